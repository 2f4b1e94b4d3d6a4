"""The console's plan screen (key P) shows the forecast line, in the words `watch --once` prints, and its sparkline."""

from __future__ import annotations

from console.fleet.plan_now import plan_now
from console.live.handle import FleetHandle
from console.plan.schema import load_plan
from console.tui.app import ConsoleApp
from console.tui.screens.plan_screen import PlanScreen, forecast_text
from tests.test_docs import ROOT
from tests.tui.conftest import poll_times, settle
from tests.tui.fakes import NOW, FakeClock, FakeWatcher, normal_fleet


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


async def _plan_screen_with_history(tmp_path, minutes: int) -> tuple[str, str]:
    """The plan screen of a console recording to a history file holding `minutes` of the fleet's arrivals up to
    now: its forecast line and its last line once the backtest's worker has answered."""
    from console.store.recorder import Recorder
    from tests.ahead.test_forecast_accuracy import write_history

    path = tmp_path / "h.sqlite"
    write_history(path, minutes, end=NOW, fleet="assistant")
    plan = load_plan(str(ROOT / "plans" / "internal-assistant-18rps.yaml"))
    clock = FakeClock()
    recorder = Recorder(path, clock=clock)  # the file's clock is the console's: retention keeps what the test wrote
    recorder.start()
    watcher = FakeWatcher(normal_fleet(), clock=clock)
    handle = FleetHandle("assistant", plan, watcher, expect=lambda now: plan_now(plan, now))
    app = ConsoleApp([handle], clock=clock, interval=60.0, recorder=recorder)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot)
            await pilot.press("P")
            for _ in range(500):  # bounded: the walk of an hour of minutes takes a few milliseconds of CPU
                if app.forecast_accuracy.measurements and app.sessions[0].forecast_accuracy is not None:
                    break
                await pilot.pause(0.01)
            await pilot.pause()
            assert isinstance(app.screen, PlanScreen)
            lines = app.screen.query_one("#forecast").render().plain.splitlines()
            # The console kept polling meanwhile, and the poll went to the file the backtest read.
            await poll_times(pilot, 1)
            assert watcher.polls >= 2
    finally:
        recorder.close(5.0)
    return lines[0], lines[-1]


async def test_with_a_week_of_history_the_forecast_line_quotes_its_error(tmp_path):
    first, legend = await _plan_screen_with_history(tmp_path, 60)
    parts = first.split(" · ")
    for horizon, part in zip((5, 15, 30), parts):
        assert part.removeprefix("forecast: ").startswith(f"{horizon} min ") and " rps" in part and " ±" in part
    assert legend.startswith("± its mean error at each horizon, backtested on 60 minutes recorded in the last 7 days")


async def test_with_too_little_history_it_quotes_none(tmp_path):
    first, legend = await _plan_screen_with_history(tmp_path, 20)
    assert first.startswith("forecast: 5 min ") and "±" not in first
    assert legend.startswith("± (its past error) once 36 minutes in a row are recorded: 20 minutes")


async def test_without_a_history_file_nothing_is_read_or_said(tmp_path):
    plan = load_plan(str(ROOT / "plans" / "internal-assistant-18rps.yaml"))
    clock = FakeClock()
    handle = FleetHandle(
        "assistant", plan, FakeWatcher(normal_fleet(), clock=clock), expect=lambda n: plan_now(plan, n)
    )
    app = ConsoleApp([handle], clock=clock, interval=60.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        await pilot.press("P")
        await pilot.pause()
        shown = app.screen.query_one("#forecast").render().plain
        assert "±" not in shown and app.forecast_accuracy.measurements == 0
