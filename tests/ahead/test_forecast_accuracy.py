"""How wrong the forecast has been, quoted beside it: the backtest of a real history file's last week, read without
waiting on the recorder's writer, in the forecast line, its legend and `backtest_mae_rps` in the --once JSON."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.ahead.accuracy import REACH_SECONDS, ForecastAccuracy, accuracy_of
from console.ahead.backtest import Minute, backtest, needed_minutes
from console.ahead.forecast import Forecast
from console.ahead.words import accuracy_legend, error_words, forecast_line
from console.commands.watch_output import _dumps, forecast_lines, once_json
from console.fleet.view import advance
from console.fleet.view_json import forecast_json
from console.live.forecast_accuracy import fleet_backtest, forecast_accuracy
from console.plan.schema import load_plan
from console.store.database import Store
from tests.fleet.test_hourly import FakeReplica
from tests.store.test_series import record
from tests.test_docs import ROOT
from tests.tui.fakes import NOW, fleet_of, replica

PLAN = str(ROOT / "plans" / "internal-assistant-18rps.yaml")
AHEAD = Forecast(
    (5, 15, 30), (12.3, 15.0, 18.25), (11.2, 12.0, 9.6), (14.1, 18.0, 27.0), 7.2, 10.0, 17.0, 30, "trend+plan"
)


def write_history(path, minutes: int, end: float = NOW, fleet: str = "chat", ramp: int = 3) -> None:
    """Two replicas polled once a minute up to `end`: a serves 60 + `ramp` x minute requests a minute, b 60."""
    store = Store.open(path)
    plan = load_plan(PLAN)
    a, b = FakeReplica(), FakeReplica()
    first = end - 60 * minutes
    for minute in range(minutes + 1):
        at = first + 60 * minute - 30
        if minute:
            a.serve(60 + ramp * minute)
            b.serve(60)
        record(store, at, {"a": a.sample(at), "b": b.sample(at)}, fleet=fleet, plan=plan)
    store.close()


def accuracy(mae=(0.41, 1.234, 13.6), minutes=2345) -> ForecastAccuracy:
    return ForecastAccuracy((5, 15, 30), mae, minutes, needed_minutes())


# --- pure: the figures and their words ----------------------------------------------------------


def test_a_complete_backtest_gives_its_forecast_error_per_horizon_and_a_short_one_none():
    ramp = [Minute(at=60.0 * m, rps=1.0 + 0.05 * m) for m in range(1, 80)]
    result = backtest(ramp)
    found = accuracy_of(result)
    assert found.known and found.horizon_minutes == (5, 15, 30) and found.minutes == result.minutes
    assert found.mae_rps == tuple(e.mae_rps for e in result.forecast)
    short = accuracy_of(backtest(ramp[:20]))  # 20 minutes: the 5-minute horizon is scored, the 30-minute is not
    assert backtest(ramp[:20]).scored and not short.known and short.mae_rps == (None, None, None)


def test_each_horizon_says_its_past_error_after_its_band():
    assert forecast_line(AHEAD, accuracy()) == (
        "forecast: 5 min 12.3 rps (11-14) ±0.41 · 15 min 15.0 rps (12-18) ±1.2 · 30 min 18.2 rps (9.6-27) ±14"
        " · saturation in 7 min (a replica takes 10)"
    )
    # Too little history, or none read: the line is the forecast alone.
    assert forecast_line(AHEAD, accuracy((None, None, None), 12)) == forecast_line(AHEAD) == forecast_line(AHEAD, None)
    assert "±" not in forecast_line(AHEAD)


@pytest.mark.parametrize(
    "mae, words", [(0.134, " ±0.13"), (0.652, " ±0.65"), (1.24, " ±1.2"), (13.4, " ±13"), (0.0, " ±0.00")]
)
def test_the_error_is_rounded_as_the_rates_are(mae, words):
    assert error_words(mae) == words


@pytest.mark.parametrize("mae", [None, float("nan"), float("inf")])
def test_an_unknown_error_says_nothing(mae):
    assert error_words(mae) == ""


def test_the_legend_says_what_the_figures_are_or_what_they_wait_for():
    days = f"{REACH_SECONDS / 86400:.0f} days"
    assert accuracy_legend(accuracy()) == (
        f"± its mean error at each horizon, backtested on 2,345 minutes recorded in the last {days}"
    )
    waiting = accuracy_legend(accuracy((None, None, None), 12))
    assert waiting is not None and f"once {needed_minutes()} minutes in a row are recorded" in waiting
    assert "12 minutes in the last 7 days" in waiting
    assert accuracy_legend(None) is None  # no history file: nothing to say


def test_the_json_has_one_error_per_horizon_null_without_a_history():
    assert forecast_json(AHEAD, accuracy())["backtest_mae_rps"] == [0.41, 1.234, 13.6]
    assert forecast_json(AHEAD)["backtest_mae_rps"] == [None, None, None]
    assert forecast_json(AHEAD, accuracy((None, None, None), 12))["backtest_mae_rps"] == [None, None, None]
    assert forecast_json(None, accuracy())["backtest_mae_rps"] == [0.41, 1.234, 13.6]
    assert forecast_json(None)["backtest_mae_rps"] == [None, None, None]


def test_the_once_output_carries_the_error_and_its_legend():
    from console.fleet.plan_now import plan_now

    plan = load_plan(PLAN)
    figures = fleet_of(replica("r1", requests_per_second=4.0), requests_per_second=4.0, at=NOW)
    view = advance(None, "f", figures, plan_now(plan, NOW), NOW)
    document = json.loads(_dumps(once_json(figures, view, "p.yaml", accuracy())))
    assert document["forecast"]["backtest_mae_rps"] == [0.41, 1.234, 13.6]
    line, legend = forecast_lines(view, accuracy())
    assert line.startswith("forecast: 5 min ") and " ±0.41 · 15 min " in line and legend.startswith("± its mean error")
    [alone] = forecast_lines(view)
    assert "±" not in alone


# --- the history file: read-only, the last week only -----------------------------------------------


def test_the_last_week_of_a_history_file_gives_the_backtests_figures(tmp_path):
    path = tmp_path / "h.sqlite"
    write_history(path, 60)
    plan = load_plan(PLAN)
    [found] = forecast_accuracy(path, [("chat", plan)], NOW)
    assert found is not None and found.known and found.minutes == 60
    store = Store.open(path, read_only=True)
    expected = fleet_backtest(store, "chat", NOW - REACH_SECONDS, NOW, plan)
    store.close()
    assert found.mae_rps == tuple(e.mae_rps for e in expected.forecast)
    # b holds 1 req/s and a ramps 0.05 req/s a minute: holding the last rate is 0.05 x h off; the forecast less.
    assert all(0 <= mae < 0.05 * h for h, mae in zip((5, 15), found.mae_rps))


def test_too_little_history_an_unknown_fleet_or_no_file_give_no_figures(tmp_path):
    path = tmp_path / "h.sqlite"
    write_history(path, 20)
    plan = load_plan(PLAN)
    short, unknown = forecast_accuracy(path, [("chat", plan), ("other", plan)], NOW)
    assert short is not None and not short.known and short.minutes == 20
    assert unknown is not None and not unknown.known and unknown.minutes == 0
    assert forecast_accuracy(tmp_path / "absent.sqlite", [("chat", plan)], NOW) == [None]
    (tmp_path / "not-a-history").write_text("hello")
    assert forecast_accuracy(tmp_path / "not-a-history", [("chat", plan)], NOW) == [None]


def test_only_the_last_week_is_read(tmp_path):
    """A fortnight-old stretch is not walked: the cost is a week's at most, whatever the file keeps."""
    path = tmp_path / "h.sqlite"
    write_history(path, 60, end=NOW - 8 * 86400)
    write_history(path, 40, end=NOW)
    [found] = forecast_accuracy(path, [("chat", None)], NOW)
    assert found is not None and found.known and found.minutes == 40


def test_reading_does_not_wait_for_a_writer_holding_the_file(tmp_path):
    """The recorder's thread may be inside a write transaction: the backtest reads the last committed minutes."""
    path = tmp_path / "h.sqlite"
    write_history(path, 60)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("BEGIN IMMEDIATE")  # the write lock held, as mid-poll
    writer.execute("DELETE FROM samples")  # uncommitted: a reader does not see it
    try:
        [found] = forecast_accuracy(path, [("chat", None)], NOW)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert found is not None and found.known and found.minutes == 60


maes = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@given(st.tuples(maes, maes, maes), st.integers(min_value=0, max_value=10**7))
@settings(max_examples=200, deadline=None)
def test_any_figure_the_backtest_could_give_reads_as_words_and_strict_json(mae, minutes):
    found = accuracy(mae, minutes)
    line = forecast_line(AHEAD, found)
    assert "nan" not in line and "inf" not in line and line.count("±") <= 3
    document = json.loads(_dumps({"forecast": forecast_json(AHEAD, found)}))  # strict: no NaN or Infinity
    assert all(v is None or isinstance(v, float) for v in document["forecast"]["backtest_mae_rps"])
    assert accuracy_legend(found) is not None
