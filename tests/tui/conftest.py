"""Console test helpers: an app over prepared figures, and reading what a widget shows."""

from __future__ import annotations

import time

import pytest

from console.live.handle import FleetHandle
from console.tui.app import ConsoleApp
from tests.tui.fakes import PLAN_NOW, FakeClock, FakeWatcher


def shown(widget) -> str:
    """The plain text a Static-based widget shows now."""
    content = widget.content
    return getattr(content, "plain", str(content))


async def settle(pilot, polls: int = 1, app=None) -> None:
    """Wait (bounded) until each fleet has been polled `polls` times and the screen has caught up."""
    app = app or pilot.app
    for _ in range(200):
        if all(h.watcher.polls >= polls for h in app.fleets) and all(v is not None for v in app.views):
            break
        await pilot.pause(0.01)
    await pilot.pause()
    await pilot.pause()


async def poll_times(pilot, times: int) -> None:
    """Ask for `times` more polls ("n" polls now) and wait for each."""
    for _ in range(times):
        target = pilot.app.fleets[0].watcher.polls + 1
        await pilot.press("n")
        for _ in range(200):
            if pilot.app.fleets[0].watcher.polls >= target and pilot.app.views[0] is not None:
                break
            await pilot.pause(0.01)
        await pilot.pause()
        await pilot.pause()


def make_app(*snapshots, clock: FakeClock | None = None, expect=PLAN_NOW, **options) -> ConsoleApp:
    clock = clock or FakeClock()
    watcher = FakeWatcher(*snapshots, clock=clock)
    handle = FleetHandle("assistant", None, watcher, expect=(lambda now: expect))
    return ConsoleApp([handle], clock=clock, interval=options.pop("interval", 60.0), **options)


@pytest.fixture
def utc_clock(monkeypatch):
    """The console shows local times (flag "since", the switch times): snapshots draw them on a UTC clock
    wherever they run."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
