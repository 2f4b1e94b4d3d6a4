"""How the console looks: SVG snapshots over prepared figures (update with --snapshot-update)."""

from __future__ import annotations

import os
import time

import pytest

from console.tui.app import ConsoleApp, FleetHandle
from tests.tui.conftest import make_app, poll_times, settle
from tests.tui.fakes import PLAN_NOW, DemoRecorder, FakeClock, FakeWatcher, normal_fleet, replica_down_fleet, saturated_fleet


@pytest.fixture(autouse=True)
def utc_clock(monkeypatch):
    """The console shows local times (flag "since"): the snapshots are drawn on a UTC clock wherever they run."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def watched_for_a_minute(pilot) -> None:
    """Five polls 10 s apart: long enough for flags to pass their 30 s minimum duration."""
    await settle(pilot)
    await poll_times(pilot, 4)


def test_normal_fleet(snap_compare):
    assert snap_compare(make_app(normal_fleet()), terminal_size=(120, 40), run_before=watched_for_a_minute)


def test_saturated_fleet_with_flags(snap_compare):
    assert snap_compare(make_app(saturated_fleet()), terminal_size=(120, 40), run_before=watched_for_a_minute)


def test_replica_down(snap_compare):
    assert snap_compare(make_app(replica_down_fleet()), terminal_size=(120, 40), run_before=watched_for_a_minute)


def test_compact_80x24(snap_compare):
    assert snap_compare(make_app(saturated_fleet()), terminal_size=(80, 24), run_before=watched_for_a_minute)


def test_compact_80x24_sixteen_colours(snap_compare):
    app = make_app(replica_down_fleet(), theme="ansi-dark")
    assert snap_compare(app, terminal_size=(80, 24), run_before=watched_for_a_minute)


def test_detail_screen(snap_compare):
    async def open_detail(pilot) -> None:
        await watched_for_a_minute(pilot)
        await pilot.press("down", "enter")
        await pilot.pause()

    assert snap_compare(make_app(saturated_fleet()), terminal_size=(80, 24), run_before=open_detail)


def test_overview_of_several_fleets(snap_compare):
    clock = FakeClock()
    fleets = [
        FleetHandle(name, None, FakeWatcher(figures, clock=clock, step=7.5), expect=lambda now: PLAN_NOW)
        for name, figures in (("assistant", normal_fleet()), ("batch", saturated_fleet()), ("rag", replica_down_fleet()))
    ]
    assert snap_compare(ConsoleApp(fleets, clock=clock, interval=60.0), terminal_size=(80, 24), run_before=watched_for_a_minute)


def test_demo_fault_menu(snap_compare):
    async def fault_then_open_menu(pilot) -> None:
        await watched_for_a_minute(pilot)
        await pilot.press("down", "down", "f", "g")  # gpu-2's /metrics returns garbage
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()

    app = make_app(normal_fleet(), demo=DemoRecorder())
    assert snap_compare(app, terminal_size=(80, 24), run_before=fault_then_open_menu)
