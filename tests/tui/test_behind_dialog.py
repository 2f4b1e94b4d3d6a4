"""The fleet keeps updating behind an open dialog (the help, the overflow switch): the table and the header's age
move under it, and close it to find the screen already current."""

from __future__ import annotations

import pytest

from console.live.handle import FleetHandle
from console.tui.app import ConsoleApp
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.screens.help_screen import HelpScreen
from console.tui.screens.switch_screen import SwitchScreen
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.table_row import TableRow
from tests.tui.conftest import make_app, settle, shown
from tests.tui.fakes import PLAN_NOW, FakeClock, FakeWatcher, normal_fleet, replica_down_fleet

pytestmark = pytest.mark.usefixtures("utc_clock")


def row_behind(app, key: str) -> str:
    (screen,) = [s for s in app.screen_stack if isinstance(s, FleetScreen)]
    table = screen.query_one(FleetTable)
    return next(shown(w) for w in table.query(TableRow) if w.key == key)


async def poll_behind(pilot, app) -> None:
    """One more poll, asked for the way the timer would (keys go to the dialog)."""
    target = app.fleets[0].watcher.polls + 1
    app.driver.poll_now()
    for _ in range(200):
        if app.fleets[0].watcher.polls >= target:
            break
        await pilot.pause(0.01)
    await pilot.pause()
    await pilot.pause()


async def test_the_fleet_table_changes_behind_the_help():
    app = make_app(normal_fleet())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = row_behind(app, "gpu-2")
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        app.fleets[0].watcher.then(replica_down_fleet())
        await poll_behind(pilot, app)
        assert isinstance(app.screen, HelpScreen)  # still open
        after = row_behind(app, "gpu-2")
        assert after != before and "TIMEOUT" in after, after
        # What the terminal shows: the row behind the dimmed background has changed too.
        assert "TIMEOUT" in app.export_screenshot()


async def test_the_fleet_table_changes_behind_the_switch_dialog():
    from dataclasses import replace

    from console.plan.model import Actuator
    from tests.gateway.plans import gateway_plan

    plan = gateway_plan()
    plan = replace(plan, overflow=replace(plan.overflow, actuators=(Actuator("command", argv=("true",)),)))
    clock = FakeClock()
    handle = FleetHandle("assistant", plan, FakeWatcher(normal_fleet(), clock=clock), lambda now: PLAN_NOW)
    app = ConsoleApp([handle], clock=clock, interval=60.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = row_behind(app, "gpu-2")
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, SwitchScreen)
        app.fleets[0].watcher.then(replica_down_fleet())
        await poll_behind(pilot, app)
        assert isinstance(app.screen, SwitchScreen)
        after = row_behind(app, "gpu-2")
        assert after != before and "TIMEOUT" in after, after
