"""The console's plan screen (key P) shows the forecast line, in the words `watch --once` prints, and its sparkline."""

from __future__ import annotations

from console.fleet.plan_now import plan_now
from console.live.handle import FleetHandle
from console.plan.schema import load_plan
from console.tui.app import ConsoleApp
from console.tui.screens.plan_screen import PlanScreen, forecast_text
from tests.test_docs import ROOT
from tests.tui.conftest import settle
from tests.tui.fakes import FakeClock, FakeWatcher, normal_fleet


async def test_the_plan_screen_shows_the_forecast_line():
    plan = load_plan(str(ROOT / "plans" / "internal-assistant-18rps.yaml"))
    clock = FakeClock()
    watcher = FakeWatcher(normal_fleet(), clock=clock)
    app = ConsoleApp(
        [FleetHandle("assistant", plan, watcher, expect=lambda now: plan_now(plan, now))], clock=clock, interval=60.0
    )
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        await pilot.press("P")
        assert isinstance(app.screen, PlanScreen)
        await pilot.pause()
        shown = app.screen.query_one("#forecast").render().plain
        first, spark_line = shown.splitlines()[:2]
        assert first.startswith("forecast: 5 min ") and " · 15 min " in first and " · 30 min " in first
        assert first.endswith("not heading for saturation") or "saturation in " in first or "saturated now" in first
        assert spark_line.startswith("next 30 min ") and "the replicas up carry" in spark_line
        forecast = app.views[0].forecast
        assert forecast is not None and forecast.basis == "trend+plan"
        await pilot.press("escape")


def test_before_the_first_poll_it_says_so():
    assert forecast_text(None).plain.startswith("forecast: waiting for the first poll")
