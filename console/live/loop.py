"""The one chained poll loop: the console, `capcon record` and `capcon watch --once` all drive it.

Polls of one fleet never overlap: the next starts `interval` after the last one started (the
period is start to start, so "every 1s" on the header is what the fleet gets), at once when a
poll took longer than the interval, or at once when woken ("poll now", the console's `-` key,
resume after pause). Each poll becomes a
view (and a record) through the fleet's PollFeed; a failing poll is handed to `on_failure` and
the loop goes on, unless `on_failure` raises.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from console.fleet.gpu_view import GpuPages
from console.fleet.view import FleetView
from console.live.collector import COLLECTOR
from console.live.feed import PollFeed
from console.live.gateways import GatewayView
from console.live.watcher import Poll


class Cadence:
    """When polls start: shared by every fleet of one console, so pause, interval and "poll now" act on all."""

    def __init__(self, interval_seconds: float, timer: Callable[[], float] = time.monotonic) -> None:
        self.interval_seconds = interval_seconds
        self.paused = False
        self.stopped = False
        self.timer = timer  # monotonic: the period must not jump with the wall clock
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Start the next poll now instead of at the end of the wait."""
        self._wake.set()

    def forget_wakes(self) -> None:
        """Called as a poll starts: a wake from now on (a "poll now" during this poll) is not lost."""
        self._wake.clear()

    def stop(self) -> None:
        self.stopped = True
        self._wake.set()

    def delay(self, started: float | None) -> float:
        """Seconds left before the next poll of one that began at `started` (by `timer`); None: a whole interval."""
        if started is None:
            return self.interval_seconds
        return max(self.interval_seconds - (self.timer() - started), 0.0)

    async def wait(self, started: float | None = None) -> None:
        """Until the next poll is due (an interval after `started`), a wake, or a stop."""
        delay = self.delay(started)
        if delay <= 0:
            await asyncio.sleep(0)  # late already: start at once, but let the screen draw first
            return
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=delay)
        except TimeoutError:
            pass


async def poll_loop(
    feed: PollFeed,
    cadence: Cadence,
    on_view: Callable[[FleetView], object],
    on_failure: Callable[[Exception], object],
    clock: Callable[[], float] = time.time,
    polls: int | None = None,
) -> None:
    """Poll `feed`'s fleet until the cadence stops, or `polls` polls have been made (`watch --once`)."""
    made = 0
    while not cadence.stopped:
        cadence.forget_wakes()
        started: float | None = None  # paused: no poll began, a whole interval to the next look
        if not cadence.paused:
            started = cadence.timer()
            try:
                poll, gateways, gpus = await _poll_step(feed)
                view = feed.add(poll, clock(), gateways, gpus)
            except Exception as error:  # noqa: BLE001 - a failing source is shown, never fatal
                on_failure(error)
            else:
                on_view(view)
            COLLECTOR.after_poll()  # a full pass, when one is due, between refreshes (once tuned)
            made += 1
            if polls is not None and made >= polls:
                return
        await cadence.wait(started)


async def _nothing() -> None:
    return None


async def _poll_step(feed: PollFeed) -> tuple[Poll, GatewayView | None, GpuPages | None]:
    """The fleet's replicas, its gateways and its GPU pages read together: one window for all."""
    if feed.gateways is None and feed.gpus is None:
        return await feed.handle.watcher.poll(), None, None
    poll, gateways, gpus = await asyncio.gather(
        feed.handle.watcher.poll(),
        feed.gateways.poll() if feed.gateways is not None else _nothing(),
        feed.gpus.poll() if feed.gpus is not None else _nothing(),
        return_exceptions=True,
    )
    if isinstance(poll, BaseException):
        raise poll
    # Gateways or GPU pages that cannot be read leave their figures unknown for this poll; the replicas' view
    # goes on. A GPU read that failed as a whole is a read of no page: every replica's GPU reads unknown.
    if isinstance(gpus, BaseException):
        gpus = GpuPages(
            (), len(feed.gpus.source.urls) if feed.gpus is not None else 0, (f"{type(gpus).__name__}: {gpus}",)
        )
    return poll, gateways if isinstance(gateways, GatewayView) else None, gpus


def failure_words(error: Exception) -> str:
    """A failed poll in words, as the console's header and the recorder's stderr say it."""
    return f"{type(error).__name__}: {error}"
