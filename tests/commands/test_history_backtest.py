"""`capcon history --backtest` on a real history file whose arrivals the test wrote: a fleet ramping up 0.05 req/s
a minute, so the naive forecast's error is known (0.05 x the horizon) and the trend's must be smaller."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from console.cli import main
from console.plan.schema import load_plan
from console.store.database import Store
from tests.fleet.test_hourly import FakeReplica
from tests.store.test_series import record

PLAN = "plans/internal-assistant-18rps.yaml"  # Europe/Warsaw
NINE = datetime(2026, 11, 23, 9, tzinfo=ZoneInfo("Europe/Warsaw")).timestamp()  # a Monday
MINUTES = 120


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Two replicas polled once a minute for two hours: a ramps 1 + 0.05 req/s a minute, b holds 1 req/s."""
    path = tmp_path_factory.mktemp("backtest") / "h.sqlite"
    store = Store.open(path)
    plan = load_plan(PLAN)
    a, b = FakeReplica(), FakeReplica()
    for minute in range(MINUTES + 1):
        at = NINE + 60 * minute + 30
        if minute:
            a.serve(60 + 3 * minute)
            b.serve(60)
        record(store, at, {"a": a.sample(at), "b": b.sample(at)}, plan=plan)
    store.close()
    return str(path)


def run(capsys, *argv):
    code = main(["history", "--backtest", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_json_scores_the_forecast_beside_the_naive_forecast_and_the_plans_profile(history, capsys):
    code, out, err = run(capsys, "--db", history, "--json")
    assert code == 0, err
    [fleet] = json.loads(out)["fleets"]
    assert fleet["fleet"] == "chat" and fleet["plan"] == "internal-assistant-18rps"
    assert fleet["too_little_history"] is None and fleet["minutes"] == MINUTES
    horizons = {h["horizon_minutes"]: h for h in fleet["horizons"]}
    assert sorted(horizons) == [5, 15, 30]
    for h, row in horizons.items():
        assert row["naive"]["mae_rps"] == pytest.approx(0.05 * h)
        assert row["forecast"]["points"] == row["naive"]["points"] > 0
        assert row["profile"]["points"] == row["forecast"]["points"]
        assert row["forecast"]["mape"] > 0 and row["forecast"]["mape_points"] == row["forecast"]["points"]
    # The plan expects 18 req/s at 09:00-11:00 against the recorded 2-8: its profile alone is far off, but the
    # forecast corrects it by observed/expected and beats holding the last rate at 5 and 15 minutes, and no call
    # of saturation is made (two replicas carry 10 req/s).
    assert horizons[30]["profile"]["mae_rps"] > 9
    for h in (5, 15):
        assert horizons[h]["forecast"]["mae_rps"] < horizons[h]["naive"]["mae_rps"] < horizons[h]["profile"]["mae_rps"]
    calls = fleet["saturation"]
    assert calls is not None and calls["origins"] > 0
    assert calls["calls"] == calls["false_alarms"] == calls["came_true"] == calls["missed"] == 0
    assert calls["capacity_per_replica_rps"] == load_plan(PLAN).capacity.rps_per_replica


def test_the_table_names_each_horizon_and_the_saturation_calls(history, capsys):
    code, out, err = run(capsys, "--db", history)
    assert code == 0, err
    assert "fleet chat · plan internal-assistant-18rps" in out
    for words in ("forecast MAE", "naive MAPE", "profile MAE", "5 min", "15 min", "30 min", "minutes-to-saturation"):
        assert words in out


def test_too_little_history_is_one_clear_line(history, capsys):
    code, out, err = run(capsys, "--db", history, "--from", str(NINE), "--to", str(NINE + 20 * 60))
    assert code == 0, err
    assert "fleet chat: 19 minutes of arrivals recorded" in out and "a backtest needs at least 36" in out
    code, out, err = run(capsys, "--db", history, "--from", str(NINE), "--to", str(NINE + 20 * 60), "--json")
    assert "a backtest needs at least 36" in json.loads(out)["fleets"][0]["too_little_history"]


def test_without_a_plan_the_trend_alone_is_scored_and_follows_a_ramp(tmp_path, capsys):
    path = tmp_path / "h.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    for minute in range(60):
        at = NINE + 60 * minute
        replica.serve(120 + 3 * minute)
        record(store, at, {"a": replica.sample(at)})
    store.close()
    code, out, err = run(capsys, "--db", str(path), "--json")
    assert code == 0, err
    [fleet] = json.loads(out)["fleets"]
    assert fleet["plan"] is None and fleet["saturation"] is None
    assert all(h["profile"] is None for h in fleet["horizons"])
    for row in fleet["horizons"]:  # 0.05 req/s more a minute: the damped trend falls short of it, less than naive
        assert 0 < row["forecast"]["mae_rps"] < row["naive"]["mae_rps"] == pytest.approx(0.05 * row["horizon_minutes"])


def test_an_empty_history_and_a_missing_file(tmp_path, capsys):
    Store.open(tmp_path / "empty.sqlite").close()
    code, out, _ = run(capsys, "--db", str(tmp_path / "empty.sqlite"))
    assert code == 0 and "no fleet recorded yet" in out
    code = main(["history", "--backtest", "--db", str(tmp_path / "nope.sqlite")])
    _, err = capsys.readouterr()
    assert code == 2 and "no such history file" in err and "Traceback" not in err
