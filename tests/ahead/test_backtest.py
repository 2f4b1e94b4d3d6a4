"""The backtest (console.ahead.backtest) on hand-made arrivals whose right answer is known: a linear ramp (the
trend's error is the damping's shortfall, zero undamped; the naive one's is the ramp's rise), a day shaped like
the plan's profile (the profile's error is zero), saturation calls that come true, miss or are false alarms."""

from __future__ import annotations

import math

import pytest

from console.ahead.backtest import (
    CounterPoint,
    Minute,
    backtest,
    fleet_minutes,
    needed_minutes,
)
from console.ahead.forecast import DAMPING, Profile

T0 = 1_800_000_000.0  # a minute boundary


def minutes(rate, count: int, capacity: float | None = None) -> list[Minute]:
    return [Minute(T0 + i * 60.0, rate(i), capacity) for i in range(count)]


def damped(h: float, damping: float = DAMPING) -> float:
    return damping * (1 - damping**h) / (1 - damping)


def by_horizon(errors) -> dict[int, float | None]:
    return {e.horizon_minutes: e.mae_rps for e in errors}


def test_a_linear_ramp_the_undamped_trend_is_exact_and_the_naive_forecast_lags_by_the_rise():
    result = backtest(minutes(lambda i: 10.0 + 0.5 * i, 120), damping=1.0)
    assert result.scored and result.profile is None and result.saturation is None
    for error in result.forecast:
        assert error.mae_rps == pytest.approx(0.0, abs=1e-9)
        assert error.mape == pytest.approx(0.0, abs=1e-9)
    assert by_horizon(result.naive) == pytest.approx({5: 2.5, 15: 7.5, 30: 15.0})
    # Every origin from minute 5 (a full trend window) to the last one with its horizon recorded.
    assert [e.points for e in result.forecast] == [120 - 5 - 5, 120 - 5 - 15, 120 - 5 - 30]


def test_a_linear_ramp_the_damped_trend_falls_short_by_the_damping_alone():
    result = backtest(minutes(lambda i: 10.0 + 0.5 * i, 120))
    expected = {h: 0.5 * (h - damped(h)) for h in (5, 15, 30)}
    assert by_horizon(result.forecast) == pytest.approx(expected)
    # and still beats holding the last value at every horizon
    assert all(f.mae_rps < n.mae_rps for f, n in zip(result.forecast, result.naive))


def test_a_day_shaped_like_the_profile_the_profile_alone_is_exact():
    def day(at: float) -> float:
        return 20.0 + 15.0 * math.sin(2 * math.pi * (at - T0) / 86400.0)

    def profile_at(origin: float) -> Profile:
        return Profile(tuple((float(m), day(origin + m * 60.0)) for m in range(31)))

    series = [Minute(T0 + i * 60.0, day(T0 + i * 60.0)) for i in range(24 * 60)]
    result = backtest(series, profile_at)
    assert result.profile is not None
    for error in result.profile:
        assert error.mae_rps == pytest.approx(0.0, abs=1e-9)
    # The blend follows the trend first, so it errs a little; the naive forecast errs by the day's slope.
    assert all(n.mae_rps > 0 for n in result.naive)
    assert result.forecast[-1].mae_rps < result.naive[-1].mae_rps


def test_mape_is_the_mean_share_of_the_actual_rate_and_skips_quiet_minutes():
    # Flat at 10 then flat at 20 from minute 40: the naive forecast is 10 off for the horizon after the step.
    series = minutes(lambda i: 10.0 if i < 40 else 20.0, 80)
    result = backtest(series)
    naive5 = result.naive[0]
    wrong = 5  # origins 35-39 look at minutes 40-44
    assert naive5.mae_rps == pytest.approx(10.0 * wrong / naive5.points)
    assert naive5.mape == pytest.approx((10.0 / 20.0) * wrong / naive5.points)
    quiet = backtest(minutes(lambda i: 0.0, 60))
    assert quiet.naive[0].points > 0 and quiet.naive[0].mape is None and quiet.naive[0].mape_points == 0


def test_too_little_history_scores_nothing():
    assert needed_minutes() == 36
    short = backtest(minutes(lambda i: 5.0, 20))
    assert (
        short.scored
        and not short.complete
        and [e.points for e in short.forecast] == [10, 0, 0]
        and short.forecast[-1].mae_rps is None
    )
    assert not backtest(minutes(lambda i: 5.0, 10)).scored
    assert not backtest([]).scored
    assert backtest(minutes(lambda i: 5.0, needed_minutes())).complete


def test_unknown_minutes_are_neither_origins_nor_truths():
    series = minutes(lambda i: None if i % 2 else 10.0, 100)
    result = backtest(series)
    assert result.minutes == 50
    assert all(e.mae_rps == pytest.approx(0.0) for e in result.forecast if e.points)


def test_a_ramp_into_saturation_is_called_and_scored_in_minutes():
    # 10 rps rising 1 rps a minute against a capacity of 40: crossed 31 minutes in, at minute 31.
    result = backtest(minutes(lambda i: 10.0 + i, 90, capacity=40.0), damping=1.0)
    calls = result.saturation
    assert calls is not None
    assert calls.calls > 0 and calls.false_alarms == 0 and calls.missed == 0
    assert calls.came_true == calls.calls
    # The undamped trend crosses 40 just after the recorded minute that first exceeds it.
    assert calls.mae_minutes is not None and calls.mae_minutes < 1.0


def test_a_spike_that_never_comes_is_a_false_alarm_and_a_sudden_jump_is_a_miss():
    # A steep ramp that stops dead under capacity: the trend calls a crossing that never comes.
    def stalled(i: int) -> float:
        return min(10.0 + 3.0 * i, 35.0)

    alarms = backtest(minutes(stalled, 60, capacity=40.0), damping=1.0).saturation
    assert alarms is not None and alarms.false_alarms > 0 and alarms.came_true == 0
    # Flat, then a jump over capacity with no trend before it: missed by the trend.
    jumped = backtest(minutes(lambda i: 10.0 if i < 50 else 60.0, 90, capacity=40.0)).saturation
    assert jumped is not None and jumped.missed > 0


def test_a_replica_sampled_twice_in_a_minute_counts_once_in_it():
    # 2 rps throughout; the last minute holds two samples (a recording's last poll beside the minute's own).
    points = [CounterPoint(T0 + 59 + 60 * i, 120.0 * i, 1.0) for i in range(3)]
    points.insert(2, CounterPoint(T0 + 60 + 100, 200.0, 1.0))  # between 1:59 and 2:59, in the minute ending 3:00
    rates = {m.at - T0: (m.rps, m.capacity_rps) for m in fleet_minutes({"a": points}, lambda at: 4.0)}
    assert rates[180.0] == pytest.approx((2.0, 4.0))  # one replica's one rate, not 4 rps from two
    assert rates[120.0] == pytest.approx((2.0, 4.0))


def test_fleet_minutes_sums_replica_rates_and_leaves_restarts_and_gaps_unknown():
    a = [CounterPoint(T0 + 59 + 60 * i, 120.0 * i, 1.0) for i in range(6)]  # 2 rps
    b = [CounterPoint(T0 + 58 + 60 * i, 60.0 * i, 1.0) for i in range(3)]  # 1 rps, then restarted
    b += [CounterPoint(T0 + 58 + 60 * 3, 5.0, 2.0), CounterPoint(T0 + 58 + 60 * 4, 65.0, 2.0)]
    c = [CounterPoint(T0 + 30, 0.0), CounterPoint(T0 + 30 + 600, 6000.0)]  # a 10-minute gap: unknown
    result = fleet_minutes({"a": a, "b": b, "c": c}, capacity_per_replica=lambda at: 4.0)
    rates = {m.at - T0: (m.rps, m.capacity_rps) for m in result}
    assert rates[120.0] == pytest.approx((3.0, 8.0))
    assert rates[240.0] == pytest.approx((2.0, 4.0))  # b restarted in that minute: only a known
    assert rates[300.0] == pytest.approx((3.0, 8.0))
    assert 660.0 not in rates
