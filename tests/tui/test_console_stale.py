"""Figures that stop coming never read as live: the header turns `● live` into the age and the reason once a
fleet has had no fresh poll for two intervals (a source that hangs, one that fails), and back on a fresh poll."""

from __future__ import annotations

import asyncio

from console.live.handle import FleetHandle
from console.tui.app import ConsoleApp
from console.tui.widgets.console_header import ConsoleHeader
from tests.tui.conftest import shown
from tests.tui.fakes import FakeClock, FakeWatcher, normal_fleet


class StallingWatcher(FakeWatcher):
    """Answers its first `answers` polls, then stalls (`hang`: a poll that never ends) or fails every poll."""

    def __init__(self, *snapshots, clock, answers: int, hang: bool) -> None:
        super().__init__(*snapshots, clock=clock, step=0.0)
        self.answers = answers
        self.hang = hang
        self.release = asyncio.Event()

    async def poll(self):
        if self.polls >= self.answers:
            self.polls += 1
            if self.hang:
                await self.release.wait()
            raise ConnectionError("scrape target refused")
        return await super().poll()


async def header_once(pilot, app, seen, seconds: float = 10.0) -> str:
    """The header's text once `seen(text)` holds (the header redraws every second), bounded."""
    text = ""
    for _ in range(int(seconds / 0.05)):
        text = shown(app.screen.query_one(ConsoleHeader))
        if seen(text):
            return text
        await pilot.pause(0.05)
    raise AssertionError(f"the header never showed it; it shows: {text}")


def stalling_console(hang: bool) -> tuple[FakeClock, StallingWatcher, ConsoleApp]:
    """A console polling every 2 s a source that answers once, then hangs (`hang`) or fails."""
    clock = FakeClock()
    watcher = StallingWatcher(normal_fleet(), clock=clock, answers=1, hang=hang)
    return clock, watcher, ConsoleApp([FleetHandle("assistant", None, watcher)], clock=clock, interval=2.0)


async def test_a_source_that_hangs_turns_live_into_the_age_and_the_reason():
    clock, watcher, app = stalling_console(hang=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await header_once(pilot, app, lambda text: "● live" in text)
        clock.now += 1.0  # the next poll is under way, 3 s since the figures: nothing is stale yet
        await pilot.press("n")
        text = await header_once(pilot, app, lambda text: watcher.polls >= 2)
        assert "● live" in text and "stale" not in text
        clock.now += 6.0  # the second poll never ends: 9 s since the figures, over two intervals (4 s)
        text = await header_once(pilot, app, lambda text: "stale" in text)
        assert "● live" not in text
        assert "✖ stale 9s: a poll still running" in text, text
        watcher.release.set()
        await pilot.press("q")


async def test_a_source_that_fails_says_why_in_the_stale_header_once_and_a_fresh_poll_ends_it():
    clock, watcher, app = stalling_console(hang=False)
    async with app.run_test(size=(200, 30)) as pilot:
        await header_once(pilot, app, lambda text: "● live" in text)
        clock.now += 5.0
        await pilot.press("n")
        text = await header_once(pilot, app, lambda text: "stale" in text)
        assert "✖ stale 7s: poll failed: ConnectionError: scrape target refused" in text, text
        assert text.count("scrape target refused") == 1 and "● live" not in text
        watcher.answers = 10**9  # the source answers again
        await pilot.press("n")
        text = await header_once(pilot, app, lambda text: "● live" in text)
        assert "stale" not in text
        await pilot.press("q")


async def test_a_paused_console_is_not_called_stale():
    clock, watcher, app = stalling_console(hang=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await header_once(pilot, app, lambda text: "● live" in text)
        await pilot.press("p")
        clock.now += 60.0
        text = await header_once(pilot, app, lambda text: "PAUSED" in text)
        assert "stale" not in text
        watcher.release.set()
        await pilot.press("q")
