"""The forecaster (console.ahead.forecast): flat stays flat, a ramp goes on, the plan takes over with the
horizon, the band widens, saturation is found where it is and is null where it is not or cannot be known."""

from __future__ import annotations

import math

import pytest

from console.ahead.forecast import HORIZONS_MINUTES, Profile, forecast
from console.ahead.profile import plan_profile, planned_rps
from console.plan.schema import load_plan
from tests.test_docs import ROOT

NOW = 1_000_000.0


def series(rate, minutes: float = 5.0, step: float = 10.0) -> list[tuple[float, float | None]]:
    """Samples every `step` seconds over the last `minutes`, `rate(minutes from now)` each (0 now, negative before)."""
    count = int(minutes * 60 / step)
    return [(NOW - (count - i) * step, rate(-(count - i) * step / 60)) for i in range(count + 1)]


def flat(level: float) -> list[tuple[float, float | None]]:
    return series(lambda m: level)


def ramp(level: float, per_minute: float) -> list[tuple[float, float | None]]:
    return series(lambda m: level + per_minute * m)


def test_the_horizons_are_five_fifteen_and_thirty_minutes():
    assert forecast(flat(10.0), NOW).horizon_minutes == HORIZONS_MINUTES == (5, 15, 30)


def test_a_flat_series_stays_flat():
    ahead = forecast(flat(10.0), NOW)
    assert ahead.rps == pytest.approx((10.0, 10.0, 10.0)) and ahead.basis == "trend"
    with_plan = forecast(flat(10.0), NOW, Profile(((0.0, 10.0),)))
    assert with_plan.rps == pytest.approx((10.0, 10.0, 10.0)) and with_plan.basis == "trend+plan"


def test_a_ramp_is_extrapolated_and_damped():
    undamped = forecast(ramp(10.0, 1.0), NOW, damping=1.0)
    assert undamped.rps == pytest.approx((15.0, 25.0, 40.0))
    damped = forecast(ramp(10.0, 1.0), NOW)
    assert 10.0 < damped.rps[0] < damped.rps[1] < damped.rps[2]
    assert all(d < u for d, u in zip(damped.rps, undamped.rps))  # flattens rather than running away


def test_the_blend_moves_toward_the_plans_shape_at_the_fleets_own_level():
    # The fleet runs at half the plan's level, flat; the plan rises +1 rps every 3 minutes from 20.
    rising = Profile(((-10.0, 20.0 - 10.0 / 3), (60.0, 40.0)))
    ahead = forecast(flat(10.0), NOW, rising)
    expected = [rising.at((at - NOW) / 60.0) for at, _ in flat(10.0)]  # about 19.2 over the last five minutes
    ratio = 10.0 / (sum(expected) / len(expected))
    assert ahead.plan_correction == pytest.approx(ratio) and 0.5 < ratio < 0.53  # observed / expected
    corrected = [ratio * rising.at(float(h)) for h in ahead.horizon_minutes]
    # How far each horizon has gone from the fleet's level toward the corrected plan: near minutes follow the
    # fleet, far ones the plan's rise at the fleet's level.
    toward_plan = [(r - 10.0) / (c - 10.0) for r, c in zip(ahead.rps, corrected)]
    assert 0 < toward_plan[0] < toward_plan[1] < toward_plan[2] < 1
    assert all(r < 16.0 for r in ahead.rps)  # never back up to the plan's own 25-30 rps


def test_a_fleet_below_a_flat_plan_is_not_forecast_to_jump_back_to_it():
    ahead = forecast(flat(10.0), NOW, Profile(((0.0, 20.0),)))
    assert ahead.rps == pytest.approx((10.0, 10.0, 10.0), rel=0.02)
    short = forecast([(NOW - 1.0, 10.0)], NOW, Profile(((0.0, 20.0),)))  # one rate: the plan is barely corrected
    assert short.plan_correction == pytest.approx(1.0, abs=0.01) and short.rps[2] > 15.0
    assert forecast(flat(10.0), NOW).plan_correction is None  # no plan, nothing corrected


def test_the_correction_is_bounded():
    tiny = forecast(flat(10.0), NOW, Profile(((0.0, 0.001),)))
    assert tiny.plan_correction == pytest.approx(10.0)  # the plan is for another fleet: at most x10
    nothing = forecast(flat(10.0), NOW, Profile(((0.0, 0.0),)))
    assert nothing.plan_correction == 1.0  # a plan that expected nothing says nothing about its shape


def test_the_plan_profile_is_read_at_each_horizon():
    rising = Profile(((0.0, 10.0), (60.0, 70.0)))  # +1 rps a minute on the plan's clock
    assert rising.at(30.0) == 40.0 and rising.at(-5.0) == 10.0 and rising.at(90.0) == 70.0
    ahead = forecast([], NOW, rising)
    assert ahead.basis == "plan" and ahead.rps == pytest.approx((15.0, 25.0, 40.0)) and ahead.trend_samples == 0


def test_few_samples_lean_on_the_plan():
    """`watch --once` has one rate: the trend counts less and the plan sooner than with five minutes of history."""
    profile = Profile(((0.0, 20.0),))
    one = forecast([(NOW - 1.0, 10.0)], NOW, profile)
    full = forecast(flat(10.0), NOW, profile)
    assert one.trend_samples == 1 and full.trend_samples == len(flat(10.0))
    assert all(o > f for o, f in zip(one.rps, full.rps))
    assert one.rps_low == one.rps_high == (None, None, None)  # no spread to measure: no band, never a made-up one


def test_the_band_widens_with_the_horizon():
    noisy = series(lambda m: 10.0 + (1.0 if round(m * 6) % 2 else -1.0))
    ahead = forecast(noisy, NOW, Profile(((0.0, 10.0),)))
    widths = [high - low for low, high in zip(ahead.rps_low, ahead.rps_high)]
    assert 0 < widths[0] < widths[1] < widths[2]
    assert all(low <= r <= high for low, r, high in zip(ahead.rps_low, ahead.rps, ahead.rps_high))


def test_minutes_to_saturation_is_exact_on_a_ramp():
    # 10 rps now, +1 a minute, undamped: 17 rps is passed 7 minutes from now.
    ahead = forecast(ramp(10.0, 1.0), NOW, capacity_rps=17.0, lead_time_minutes=10.0, damping=1.0)
    assert ahead.minutes_to_saturation == pytest.approx(7.0, abs=1e-6)
    assert ahead.saturates_before_a_replica_starts
    later = forecast(ramp(10.0, 1.0), NOW, capacity_rps=17.0, lead_time_minutes=5.0, damping=1.0)
    assert not later.saturates_before_a_replica_starts
    damped = forecast(ramp(10.0, 1.0), NOW, capacity_rps=17.0)
    assert damped.minutes_to_saturation is not None and damped.minutes_to_saturation > 7.0


def test_over_capacity_now_is_zero_minutes():
    assert forecast(flat(20.0), NOW, capacity_rps=17.0).minutes_to_saturation == 0.0


def test_null_when_flat_below_capacity():
    ahead = forecast(flat(10.0), NOW, Profile(((0.0, 10.0),)), capacity_rps=17.0, lead_time_minutes=10.0)
    assert ahead.minutes_to_saturation is None and not ahead.saturates_before_a_replica_starts


def test_unknown_figures_give_null_never_zero():
    nothing = forecast([], NOW, None, capacity_rps=17.0, lead_time_minutes=10.0)
    assert nothing.basis == "none" and nothing.rps == (None, None, None) and nothing.minutes_to_saturation is None
    unknown_rates = forecast([(NOW - 20.0, None), (NOW - 10.0, math.nan), (NOW, None)], NOW)
    assert unknown_rates.rps == (None, None, None) and unknown_rates.trend_samples == 0
    no_capacity = forecast(ramp(10.0, 1.0), NOW, capacity_rps=None, lead_time_minutes=math.nan)
    assert no_capacity.minutes_to_saturation is None and no_capacity.capacity_rps is None
    assert no_capacity.lead_time_minutes is None
    assert forecast(flat(0.0), NOW, capacity_rps=0.0).minutes_to_saturation is None  # nothing to carry, none sent


def test_samples_older_than_the_window_are_not_the_trend():
    old = [(NOW - 3600.0 + i, 1000.0) for i in range(10)]
    assert forecast(old + flat(10.0), NOW).rps == pytest.approx((10.0, 10.0, 10.0))


def test_the_plan_profile_follows_the_plan_week_between_hour_middles():
    plan = load_plan(str(ROOT / "plans" / "internal-assistant-18rps.yaml"))
    monday = 1_704_067_200.0  # 2024-01-01 00:00 on the plan's clock, a Monday
    interactive = plan.interactive or plan.workloads
    at_hour = [sum(w.rps_by_hour[0][h] for w in interactive) for h in range(24)]
    clock = monday + 10.5 * 3600  # the middle of Monday 10:00
    profile = plan_profile(plan, clock)
    assert planned_rps(plan, clock) == pytest.approx(at_hour[10])
    assert profile.at(0.0) == pytest.approx(at_hour[10]) and profile.at(60.0) == pytest.approx(at_hour[11])
    assert profile.at(30.0) == pytest.approx((at_hour[10] + at_hour[11]) / 2)
    assert plan_profile(plan, math.inf).knots == ()


def test_a_fleet_on_its_plan_is_forecast_on_the_plan_not_on_its_noise():
    """Per-minute rates scattered about a rising plan: the plan gives the shape, the noise's chance slope is
    not carried forward (continued for 15 minutes it would be the forecast's largest error)."""
    rising = Profile(((-10.0, 10.0), (60.0, 24.0)))  # +0.2 rps a minute
    scatter = [0.9, -0.7, 0.4, -0.2, 1.1, -1.0]  # the last minutes' noise, ending high: a chance upward slope
    samples = [(NOW + x * 60.0, rising.at(float(x)) + scatter[x + 5]) for x in range(-5, 1)]
    ahead = forecast(samples, NOW, rising)
    for h, r in zip(ahead.horizon_minutes, ahead.rps):
        assert r == pytest.approx(rising.at(float(h)), abs=0.35)


def test_a_ramp_off_a_flat_plan_is_still_followed():
    ahead = forecast(ramp(10.0, 1.0), NOW, Profile(((0.0, 10.0),)), capacity_rps=12.0)
    assert ahead.rps[0] > 12.0  # the fleet's own rise, not the plan's flat line (10 now)
    assert ahead.minutes_to_saturation is not None and 2.0 < ahead.minutes_to_saturation < 5.0
