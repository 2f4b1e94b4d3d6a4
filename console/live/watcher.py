"""Source -> window -> figures: what one poll of a fleet saw, as an immutable `Poll`.

The console, `capcon record` and `capcon watch --once` all poll through a Watcher
(console.live.loop drives it); none of them builds a pipeline of its own. Each `poll()`
asks the source once (one scrape per target) and polls never overlap: a second caller
waits for the first to finish.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from console.metrics.figures import Figures, FleetFigures, ReplicaState, vetted_fleet_figures
from console.metrics.vllm import ReplicaSample, restart_reason, vet_sample
from console.metrics.window import ReplicaWindow, fleet_figures, replica_figures, replica_window
from console.sources.base import FigureSource, SampleSource
from console.targets import TargetResult

# Slack on the window edge for scheduling jitter: a sample a little older than the window still
# counts, but never one a whole interval older.
WINDOW_SLACK = 0.10
RING_STEPS = 30
# A sample kept past the window edge (refreshes further apart than the window) may be at most
# this many intervals old: an older one is from before a gap in the data, not the last refresh.
REACH_INTERVALS = 2.0


@dataclass(frozen=True)
class Poll:
    """What one poll saw: the figures, and what the recorder stores so a replay computes the very same ones."""

    figures: FleetFigures
    results: tuple[TargetResult, ...] | None  # a sample source's raw results; None from a figure source
    watched_at: float  # the `now` the window math used
    window_seconds: float
    interval_seconds: float  # the watcher's own: it sets the window slack (the console's +/- only poll more often)


@dataclass(frozen=True)
class WatcherMemory:
    """A copy of a watcher's memory (rings of immutable samples): enough to carry on from a poll (replay keyframes)."""

    source: str
    window_seconds: float
    interval_seconds: float
    rings: dict[str, tuple[ReplicaSample, ...]]
    last_good: dict[str, float]
    restarted: frozenset[str]
    latest: dict[str, ReplicaSample]


class RecordedSource:
    """A recorded source's name, for a watcher that only replays results (figures carry `source`)."""

    def __init__(self, name: str) -> None:
        self.name = name


class Watcher:
    def __init__(
        self,
        source: SampleSource | FigureSource | RecordedSource,
        window_seconds: float,
        interval_seconds: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.window_seconds = window_seconds
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._lock = asyncio.Lock()
        self._rings: dict[str, deque[ReplicaSample]] = {}
        self._last_good: dict[str, float] = {}
        self._restarted: set[str] = set()  # urls restarted, until a full post-restart pair exists
        self._latest: dict[str, ReplicaSample] = {}

    @property
    def source_name(self) -> str:
        name = getattr(self.source, "name", None)
        return name if isinstance(name, str) else type(self.source).__name__

    async def poll(self) -> Poll:
        """Ask the source once; concurrent callers are served in turn."""
        async with self._lock:
            now = self._clock()
            if isinstance(self.source, SampleSource):
                results = tuple(await self.source.fetch(now))
                # A fresh scrape is never stale; a failed one shows its failure and the data age.
                watched_at = self._clock()
                return self._poll(self.replay(results, watched_at), results, watched_at)
            if not isinstance(self.source, FigureSource):
                raise TypeError(f"{self.source_name}: a recorded source cannot be polled, only replayed")
            # Prometheus marks its own stale targets, against its scrape interval and the window.
            # Held to the same impossible-value rule as scraped pages: Prometheus relays what replicas said.
            return self._poll(vetted_fleet_figures(await self.source.collect(now)), None, now)

    def _poll(self, figures: FleetFigures, results: tuple[TargetResult, ...] | None, watched_at: float) -> Poll:
        return Poll(figures, results, watched_at, self.window_seconds, self.interval_seconds)

    def replay(self, results: Iterable[TargetResult], now: float) -> FleetFigures:
        """Figures from results fetched earlier (a recorded poll) as if polled at `now`; live polls come through here too."""
        return self._from_samples(list(results), now)

    def memory(self) -> WatcherMemory:
        return WatcherMemory(
            self.source_name,
            self.window_seconds,
            self.interval_seconds,
            {url: tuple(ring) for url, ring in self._rings.items()},
            dict(self._last_good),
            frozenset(self._restarted),
            dict(self._latest),
        )

    @classmethod
    def from_memory(cls, memory: WatcherMemory) -> Watcher:
        """A watcher that carries on from `memory`, replaying recorded results only."""
        watcher = cls(RecordedSource(memory.source), memory.window_seconds, interval_seconds=memory.interval_seconds)
        watcher._rings = {url: deque(ring) for url, ring in memory.rings.items()}
        watcher._last_good = dict(memory.last_good)
        watcher._restarted = set(memory.restarted)
        watcher._latest = dict(memory.latest)
        return watcher

    def ring_length(self, url: str) -> int:
        """How many samples the watcher keeps for one replica (bounded whatever the interval)."""
        return len(self._rings.get(url, ()))

    async def aclose(self) -> None:
        close = getattr(self.source, "aclose", None)
        if close is not None:
            await close()

    def _from_samples(self, results: list[TargetResult], now: float) -> FleetFigures:
        replicas: list[Figures] = []
        windows: list[tuple[ReplicaSample | None, ReplicaSample]] = []
        computed: list[ReplicaWindow | None] = []
        for result in results:
            figures, window, counted = self._replica(result, now)
            replicas.append(figures)
            if window is not None:
                windows.append(window)
                computed.append(counted)
        fleet = fleet_figures(windows, replicas, now=now, computed=computed)
        newest = max((r.fetched_at for r in results), default=now)
        return FleetFigures(self._span_covered(windows), self.source_name, tuple(replicas), fleet, newest)

    def _span_covered(self, windows: list[tuple[ReplicaSample | None, ReplicaSample]]) -> float:
        """The window, or the longer span the figures really cover when refreshes are further apart."""
        slack = self._slack()
        spans = [newer.at - older.at for older, newer in windows if older is not None and newer is not None]
        widest = max(spans, default=0.0)
        if widest <= self.window_seconds + slack:
            return self.window_seconds
        return round(widest, 1) if widest < 10 else float(round(widest))

    def _slack(self) -> float:
        return min(self.window_seconds * WINDOW_SLACK, self.interval_seconds * 0.5)

    def _replica(
        self, result: TargetResult, now: float
    ) -> tuple[Figures, tuple[ReplicaSample | None, ReplicaSample] | None, ReplicaWindow | None]:
        ring = self._rings.setdefault(result.url, deque())
        if result.sample is not None and not math.isfinite(result.sample.at):
            result = TargetResult(
                result.name,
                result.url,
                ReplicaState.BAD_PAYLOAD,
                None,
                "a sample without a usable time",
                result.fetched_at,
            )
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
        state = ReplicaState.RESTARTED if result.url in self._restarted else ReplicaState.UP
        if state is ReplicaState.RESTARTED:
            # Shown on the poll that found the restart, so why is known (a model, start time, counter...).
            error = (
                f"restarted ({reason}): rates resume after the next refresh"
                if reason
                else "restarted: rates resume after the next refresh"
            )
        else:
            error = result.error
        window = replica_window(older, sample)  # once: the replica's figures and the fleet totals both use it
        figures = replica_figures(
            older, sample, result.name, result.url, state=state, error=error, now=now, window=window
        )
        return figures, (older, sample), window
