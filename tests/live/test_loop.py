"""The one chained poll loop: what it polls, when it waits, and what it does with a failure."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from console.live.feed import PollFeed
from console.live.handle import FleetHandle
from console.live.loop import Cadence, failure_words, poll_loop
from console.live.watcher import Poll
from tests.fleet.builders import fleet, replica

HOUR = 3600.0


class ScriptedWatcher:
    """Hands out one poll per call; an exception in the script is raised instead; `during` runs inside the poll."""

    window_seconds = 60.0
    interval_seconds = 1.0

    def __init__(self, *script, during=None) -> None:
        self.script = list(script)
        self.polls = 0
        self.during = during

    async def poll(self) -> Poll:
        self.polls += 1
        if self.during is not None:
            self.during(self.polls)
        step = self.script[min(self.polls, len(self.script)) - 1]
        if isinstance(step, Exception):
            raise step
        figures = fleet(replica("r1", waiting=step), at=1000.0 + self.polls, waiting=step)
        return Poll(figures, None, figures.at, self.window_seconds, self.interval_seconds)

    async def aclose(self) -> None:
        pass


def feed_on(watcher) -> PollFeed:
    return PollFeed(FleetHandle("f", None, watcher))


async def bounded(coroutine):
    """A loop that should end on its own: given a minute, so a hang fails the test instead of the run."""
    return await asyncio.wait_for(coroutine, timeout=60.0)


async def test_a_counted_loop_polls_that_many_times_and_each_view_carries_the_last():
    watcher = ScriptedWatcher(0.0, 4.0)
    feed, views, failures = feed_on(watcher), [], []
    await bounded(poll_loop(feed, Cadence(0.01), views.append, failures.append, clock=lambda: 2000.0, polls=2))
    assert watcher.polls == 2 and not failures
    assert [v.figures.fleet.waiting for v in views] == [0.0, 4.0]
    assert feed.previous is views[-1]
    assert len(views[-1].trends.points) == 2, "the second view carries the first one's trends"


async def test_a_failing_poll_is_handed_over_and_the_loop_polls_again():
    watcher = ScriptedWatcher(0.0, ConnectionError("refused"), 1.0)
    views, failures = [], []
    await bounded(poll_loop(feed_on(watcher), Cadence(0.01), views.append, failures.append, polls=3))
    assert [failure_words(e) for e in failures] == ["ConnectionError: refused"]
    assert [v.figures.fleet.waiting for v in views] == [0.0, 1.0]


async def test_a_failure_handler_that_raises_ends_the_loop_with_its_error():
    def failed(error: Exception) -> None:
        raise error

    with pytest.raises(ConnectionError, match="refused"):
        await bounded(
            poll_loop(feed_on(ScriptedWatcher(ConnectionError("refused"))), Cadence(0.01), print, failed, polls=2)
        )


async def test_a_wake_during_a_poll_starts_the_next_one_at_once():
    cadence = Cadence(HOUR)  # without the wake the second poll would come an hour later
    watcher = ScriptedWatcher(0.0, 1.0, during=lambda n: cadence.wake() if n == 1 else None)
    views: list = []
    await bounded(poll_loop(feed_on(watcher), cadence, views.append, print, polls=2))
    assert len(views) == 2


async def test_paused_it_polls_nothing_until_resumed_and_woken():
    cadence = Cadence(HOUR)
    cadence.paused = True
    watcher = ScriptedWatcher(0.0)
    views: list = []
    task = asyncio.create_task(poll_loop(feed_on(watcher), cadence, views.append, print))
    for _ in range(5):
        cadence.wake()  # "poll now" while paused: still nothing
        await asyncio.sleep(0)
    assert watcher.polls == 0
    cadence.paused = False
    cadence.wake()
    for _ in range(100):
        if views:
            break
        await asyncio.sleep(0.01)
    assert watcher.polls == 1 and len(views) == 1
    cadence.stop()
    await bounded(task)  # a stop ends the wait at once, without cancelling
    assert task.done() and task.exception() is None


async def test_a_stopped_cadence_makes_no_poll():
    cadence = Cadence(0.01)
    cadence.stop()
    watcher = ScriptedWatcher(0.0)
    await bounded(poll_loop(feed_on(watcher), cadence, print, print))
    assert watcher.polls == 0


class FakeTimer:
    """A monotonic clock the test moves: polls take the time the test says, waits take what the cadence asks."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class RecordingCadence(Cadence):
    """Waits on the fake timer: records each delay it was asked for and moves the timer by it."""

    def __init__(self, interval_seconds: float, timer: FakeTimer) -> None:
        super().__init__(interval_seconds, timer=timer)
        self.delays: list[float] = []
        self.fake = timer

    async def wait(self, started: float | None = None) -> None:
        delay = self.delay(started)
        self.delays.append(round(delay, 6))
        self.fake.now += delay


@pytest.mark.parametrize(
    "poll_seconds, expected_delay",
    [(0.28, 0.72), (0.0, 1.0), (1.0, 0.0), (2.5, 0.0)],
)
async def test_the_period_is_start_to_start_whatever_a_poll_takes(poll_seconds, expected_delay):
    timer = FakeTimer()
    cadence = RecordingCadence(1.0, timer)
    starts: list[float] = []

    def during(_n: int) -> None:
        starts.append(timer.now)
        timer.now += poll_seconds  # the poll itself takes this long

    watcher = ScriptedWatcher(0.0, during=during)
    await bounded(poll_loop(feed_on(watcher), cadence, print, print, polls=4))
    assert cadence.delays == [expected_delay] * 3
    periods = [round(b - a, 6) for a, b in itertools.pairwise(starts)]
    # A poll shorter than the interval: polls start an interval apart; a longer one: back to back, never overlapping.
    assert periods == [max(1.0, poll_seconds)] * 3


def test_a_paused_cadence_waits_a_whole_interval_and_a_late_one_none():
    timer = FakeTimer()
    cadence = Cadence(2.0, timer=timer)
    assert cadence.delay(None) == 2.0
    timer.now += 0.5
    assert cadence.delay(timer.now - 0.5) == 1.5
    assert cadence.delay(timer.now - 3.0) == 0.0


async def test_a_late_poll_starts_the_next_at_once_on_the_real_cadence():
    cadence = Cadence(0.05)
    watcher = ScriptedWatcher(0.0, during=lambda n: time.sleep(0.08))  # longer than the interval
    views: list = []
    await bounded(poll_loop(feed_on(watcher), cadence, views.append, print, polls=3))
    assert len(views) == 3
