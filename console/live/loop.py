"""The one chained poll loop: the console, `capcon record` and `capcon watch --once` all drive it.

Polls of one fleet never overlap: the next starts `interval` after the last one finished, or
at once when woken ("poll now", the console's `-` key, resume after pause). Each poll becomes a
view (and a record) through the fleet's PollFeed; a failing poll is handed to `on_failure` and
the loop goes on, unless `on_failure` raises.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from console.fleet.view import FleetView
from console.live.feed import PollFeed


class Cadence:
    """When polls start: shared by every fleet of one console, so pause, interval and "poll now" act on all."""

    def __init__(self, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        self.paused = False
        self.stopped = False
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

    async def wait(self) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=self.interval_seconds)
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
        if not cadence.paused:
            try:
                poll = await feed.handle.watcher.poll()
                view = feed.add(poll, clock())
            except Exception as error:  # noqa: BLE001 - a failing source is shown, never fatal
                on_failure(error)
            else:
                on_view(view)
            made += 1
            if polls is not None and made >= polls:
                return
        await cadence.wait()


def failure_words(error: Exception) -> str:
    """A failed poll in words, as the console's header and the recorder's stderr say it."""
    return f"{type(error).__name__}: {error}"
