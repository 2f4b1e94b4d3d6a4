"""The one poll loop: source -> window -> figures, handing out immutable snapshots.

The TUI, `capcon watch --once` and the recorder all drive a Watcher; none of them
builds a pipeline of its own. Each `poll()` asks the source once (one scrape per
target) and polls never overlap: a second caller waits for the first to finish.

For a sample source the watcher keeps a ring of samples per replica and computes
each figure against the oldest sample inside the window (10 s, 1 min, 5 min...).
When refreshes are further apart than the window, no older sample lies inside it:
the newest one before the window edge is used instead, and the figures report the
span they actually cover. A restart (a counter that went down, or another process
behind the URL: start time, model, engines, KV cache size) empties that replica's
ring, so rates resume from the new process and never span the change. Every sample
is held to the impossible-value rule (`console.metrics.vllm.vet_sample`) on the way
in, so a recording made before it cannot bring the console down.

A figure source (Prometheus) judges staleness itself: its data age is the time
since Prometheus last scraped the target, which says nothing about this poll's
interval, so the watcher passes its states on unchanged.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from typing import Callable

from console.metrics.figures import Figures, FleetFigures, vetted_fleet_figures
from console.metrics.vllm import ReplicaSample, restart_reason, vet_sample
from console.metrics.window import fleet_figures, replica_figures, replica_window
from console.sources.base import FigureSource, SampleSource, TargetResult

# Slack on the window edge for scheduling jitter: a sample a little older than the window still
# counts, but never one a whole interval older.
WINDOW_SLACK = 0.10
RING_STEPS = 30
# A sample kept past the window edge (refreshes further apart than the window) may be at most
# this many intervals old: an older one is from before a gap in the data, not the last refresh.
REACH_INTERVALS = 2.0


class Watcher:
    def __init__(
        self,
        source: SampleSource | FigureSource,
        window_seconds: float,
        plan=None,
        interval_seconds: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.window_seconds = window_seconds
        self.plan = plan
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._lock = asyncio.Lock()
        self._rings: dict[str, deque[ReplicaSample]] = {}
        self._last_good: dict[str, float] = {}
        self._restarted: set[str] = set()  # urls restarted, until a full post-restart pair exists
        self._latest: dict[str, ReplicaSample] = {}
        self.last: FleetFigures | None = None
        # What the last poll saw, for the recorder: the raw results (None from a figure source)
        # and the `now` the window math used, so a replay computes the very same figures.
        self.last_results: tuple[TargetResult, ...] | None = None
        self.last_watched_at: float | None = None

    @property
    def source_name(self) -> str:
        return getattr(self.source, "name", type(self.source).__name__)

    async def poll(self) -> FleetFigures:
        """Ask the source once and return the figures; concurrent callers are served in turn."""
        async with self._lock:
            now = self._clock()
            if isinstance(self.source, SampleSource):
                results = await self.source.fetch(now)
                # A fresh scrape is never stale; a failed one shows its failure and the data age.
                return self.replay(results, self._clock())
            # Prometheus marks its own stale targets, against its scrape interval and the window.
            # Held to the same impossible-value rule as scraped pages: Prometheus relays what replicas said.
            figures = vetted_fleet_figures(await self.source.collect(now))
            self.last, self.last_results, self.last_watched_at = figures, None, now
            return figures

    def replay(self, results, now: float) -> FleetFigures:
        """Figures from results fetched earlier (a recorded poll) as if polled at `now`; live polls come through here too."""
        results = tuple(results)
        figures = self._from_samples(list(results), now)
        self.last, self.last_results, self.last_watched_at = figures, results, now
        return figures

    async def aclose(self) -> None:
        close = getattr(self.source, "aclose", None)
        if close is not None:
            await close()

    def _from_samples(self, results: list[TargetResult], now: float) -> FleetFigures:
        replicas: list[Figures] = []
        windows = []
        computed = []
        for result in results:
            figures, window, counted = self._replica(result, now)
            replicas.append(figures)
            if window is not None:
                windows.append(window)
                computed.append(counted)
        fleet = fleet_figures(windows, replicas, now=now, computed=computed)
        newest = max((r.fetched_at for r in results), default=now)
        return FleetFigures(self._span_covered(windows), self.source_name, tuple(replicas), fleet, newest)

    def _span_covered(self, windows) -> float:
        """The window, or the longer span the figures really cover when refreshes are further apart."""
        slack = self._slack()
        spans = [newer.at - older.at for older, newer in windows if older is not None and newer is not None]
        widest = max(spans, default=0.0)
        if widest <= self.window_seconds + slack:
            return self.window_seconds
        return round(widest, 1) if widest < 10 else float(round(widest))

    def _slack(self) -> float:
        return min(self.window_seconds * WINDOW_SLACK, self.interval_seconds * 0.5)

    def _replica(self, result: TargetResult, now: float):
        ring = self._rings.setdefault(result.url, deque())
        if result.sample is not None and not math.isfinite(result.sample.at):
            result = TargetResult(result.name, result.url, "bad_payload", None, "a sample without a usable time", result.fetched_at)
        if result.sample is None:
            last_good = self._last_good.get(result.url)
            age = now - last_good if last_good is not None else None
            return Figures(result.name, result.url, result.state, error=result.error, data_age_seconds=age), None, None
        # Held to the impossible-value rule here too: a recorded sample may come from an older capcon.
        sample = vet_sample(result.sample)
        latest = self._latest.get(result.url)
        reason = restart_reason(latest, sample) if latest is not None else ""
        if reason:
            ring.clear()
            self._restarted.add(result.url)
        elif latest is not None and result.url in self._restarted:
            self._restarted.discard(result.url)  # a full post-restart pair exists now
        self._latest[result.url] = sample
        self._last_good[result.url] = result.fetched_at
        # Keep about one sample per 1/RING_STEPS of the window: a 5-minute window at a
        # 1-second interval holds ~30 samples per replica, not 300; the span covered is then
        # between 29/30 of the window and the whole of it. The steps are fixed slices of the
        # clock, not distances from the last kept sample, so which samples are kept does not
        # depend on where the watcher started: a replay warmed up mid-recording keeps the very
        # samples the live console kept.
        step = self.window_seconds / RING_STEPS
        if not ring or math.floor(sample.at / step) != math.floor(ring[-1].at / step):
            ring.append(sample)
        slack = self._slack()
        edge = sample.at - self.window_seconds - slack
        # Past the edge, keep the newest sample before it while nothing inside the window can
        # take its place (the last kept one is the newest sample, or within a ring step of it):
        # with refreshes further apart than the window, the last refresh is the older sample.
        while len(ring) > 2 and ring[0].at < edge:
            ring.popleft()
        reach = sample.at - max(self.window_seconds, REACH_INTERVALS * self.interval_seconds) - slack
        while ring and ring[0].at < reach:
            ring.popleft()
        if not ring:
            ring.append(sample)
        older = ring[0] if ring[0] is not sample else None
        state = "restarted" if result.url in self._restarted else "up"
        if state == "restarted":
            # Shown on the poll that found the restart, so why is known (a model, start time, counter...).
            error = f"restarted ({reason}): rates resume after the next refresh" if reason else "restarted: rates resume after the next refresh"
        else:
            error = result.error
        window = replica_window(older, sample)  # once: the replica's figures and the fleet totals both use it
        figures = replica_figures(older, sample, result.name, result.url, state=state, error=error, now=now, window=window)
        return figures, (older, sample), window

