"""How the console looks: SVG snapshots over prepared figures (update with --snapshot-update)."""

from __future__ import annotations

import pytest

from console.live.handle import FleetHandle
from console.tui.app import ConsoleApp
from tests.tui.conftest import make_app, poll_times, settle
from tests.tui.fakes import (
    PLAN_NOW,
    DemoRecorder,
    FakeClock,
    FakeWatcher,
    fleet_of,
    normal_fleet,
    replica,
    replica_down_fleet,
    saturated_fleet,
)

pytestmark = pytest.mark.usefixtures("utc_clock")  # tests/tui/conftest.py


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
    async def select_an_ok_row(pilot) -> None:
        await watched_for_a_minute(pilot)
        await pilot.press("down")  # the selected row: black on white, its "✓ ok" bold, never green on green
        await pilot.pause()

    app = make_app(replica_down_fleet(), theme="ansi-dark")
    assert snap_compare(app, terminal_size=(80, 24), run_before=select_an_ok_row)


def test_a_spike_at_80x24_in_sixteen_colours(snap_compare):
    """The first poll of a spike: cells over their limits marked at once, rows pending, a row selected."""
    spiked = fleet_of(
        *(
            replica(f"127.0.0.1{i}:28100", ttft_p95_seconds=7.2, waiting=24.0, kv_usage=0.71 + i / 100)
            for i in range(1, 6)
        )
    )

    async def spike(pilot) -> None:
        await settle(pilot)
        pilot.app.fleets[0].watcher.then(spiked)
        await poll_times(pilot, 1)
        await pilot.press("down", "down")
        await pilot.pause()

    app = make_app(fleet_of(*(replica(f"127.0.0.1{i}:28100") for i in range(1, 6))), theme="ansi-dark")
    assert snap_compare(app, terminal_size=(80, 24), run_before=spike)


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
        for name, figures in (
            ("assistant", normal_fleet()),
            ("batch", saturated_fleet()),
            ("rag", replica_down_fleet()),
        )
    ]
    assert snap_compare(
        ConsoleApp(fleets, clock=clock, interval=60.0), terminal_size=(80, 24), run_before=watched_for_a_minute
    )


def test_demo_fault_menu(snap_compare):
    async def fault_then_open_menu(pilot) -> None:
        await watched_for_a_minute(pilot)
        await pilot.press("down", "down", "f", "g")  # gpu-2's /metrics returns garbage
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()

    app = make_app(normal_fleet(), demo=DemoRecorder())
    assert snap_compare(app, terminal_size=(80, 24), run_before=fault_then_open_menu)
