"""The what-if dialog (key i): it runs a lever on the simulator in a worker, shows the verb's table ("now" first),
and the fleet keeps updating behind it meanwhile."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from textual.widgets import Input

from console.live.handle import FleetHandle
from console.tui.app import ConsoleApp
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.screens.whatif_screen import WhatIfScreen, run_whatif
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.table_row import TableRow
from tests.sim.sim_plans import office_assistant
from tests.tui.conftest import make_app, settle, shown
from tests.tui.fakes import PLAN_NOW, FakeClock, FakeWatcher, normal_fleet, replica_down_fleet

pytestmark = pytest.mark.usefixtures("utc_clock")


def app_with_plan() -> ConsoleApp:
    clock = FakeClock()
    handle = FleetHandle("assistant", office_assistant(), FakeWatcher(normal_fleet(), clock=clock), lambda n: PLAN_NOW)
    return ConsoleApp([handle], clock=clock, interval=60.0)


def row_behind(app, key: str) -> str:
    (screen,) = [s for s in app.screen_stack if isinstance(s, FleetScreen)]
    return next(shown(w) for w in screen.query_one(FleetTable).query(TableRow) if w.key == key)


async def poll_behind(pilot, app) -> None:
    target = app.fleets[0].watcher.polls + 1
    app.driver.poll_now()
    for _ in range(200):
        if app.fleets[0].watcher.polls >= target:
            break
        await pilot.pause(0.01)
    await pilot.pause()


async def test_the_dialog_runs_a_lever_in_a_worker_while_the_fleet_updates_behind_it():
    app = app_with_plan()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = row_behind(app, "gpu-2")
        await pilot.press("i")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WhatIfScreen)
        await pilot.press("3")  # a bounded queue: its N field shows, the verb's 32 in it
        assert screen.query_one("#row-n").display and screen.query_one("#field-n", Input).value == "32"
        await pilot.press("1")  # +1 replica: no N
        assert not screen.query_one("#row-n").display
        screen.query_one("#field-minutes", Input).value = "2"
        # The real run, held at its start until the poll behind is done: "meanwhile" by construction, not by luck.
        go = threading.Event()

        def held(*asked):
            assert go.wait(60)
            return run_whatif(*asked)

        screen.context = replace(screen.context, run=held)
        await pilot.press("enter")
        assert screen.running
        # The scenario is simulating in its thread; the console polls and redraws meanwhile.
        app.fleets[0].watcher.then(replica_down_fleet())
        await poll_behind(pilot, app)
        assert screen.running
        after = row_behind(app, "gpu-2")
        assert after != before and "TIMEOUT" in after, after
        go.set()
        for _ in range(3000):  # liveness only: the run's own length is the benchmark's business
            if screen.lines is not None:
                break
            await pilot.pause(0.02)
        assert screen.lines is not None
        text = shown(screen.query_one("#whatif-result"))
        assert text.startswith("what-if for assistant over the next 2 min")
        table = text.split("targets:", 1)[0].splitlines()
        rows = [line.split()[0] for line in table if line.startswith(("now", "+1", "scenario"))]
        assert rows == ["scenario", "now", "+1"]
        assert "correction:" in text
        assert isinstance(app.screen, WhatIfScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)


async def test_bad_minutes_are_one_line_and_nothing_runs():
    app = app_with_plan()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await pilot.pause()
        screen = app.screen
        screen.query_one("#field-minutes", Input).value = "0"
        await pilot.press("enter")
        assert not screen.running and screen.lines is None
        said = shown(screen.query_one("#whatif-status"))
        assert said.startswith("minutes ahead '0': expected a whole number from 1 to 120")


async def test_no_plan_no_what_if():
    app = make_app(normal_fleet())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.check_action("whatif", ()) is False
        await pilot.press("i")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
