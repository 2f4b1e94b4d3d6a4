"""The saturation-ahead flag: raised when the forecast passes the replicas up sooner than a replica can start,
after the rules' minimum duration, with hysteresis; its advice switches the overflow policy now."""

from __future__ import annotations

import textwrap

import pytest

from console.ahead.forecast import Forecast, Profile
from console.fleet.flags import FLAG_TITLES, FlagInputs, FlagState, Thresholds, asks_for_overflow, evaluate
from console.fleet.view import advance
from console.metrics.figures import FLEET_TOTAL
from tests.fleet.builders import fleet, plan_now, replica
from tests.test_docs import DO_LINES, DO_WIDTH, headings, pointed_at

LEAD = 10.0  # the builders' plan: lead_time_seconds 600


def ahead(minutes: float | None, rps: float | None = 15.0) -> Forecast:
    return Forecast(
        horizon_minutes=(5, 15, 30),
        rps=(rps, rps, rps),
        rps_low=(None, None, None),
        rps_high=(None, None, None),
        minutes_to_saturation=minutes,
        lead_time_minutes=LEAD,
        capacity_rps=20.0,
        trend_samples=30,
        basis="trend+plan",
    )


def step(state: FlagState, minutes: float | None, now: float, plan=None) -> FlagState:
    inputs = FlagInputs(fleet(replica("r1"), at=now), plan=plan or plan_now(), forecast=ahead(minutes))
    return evaluate(state, inputs, now, Thresholds())


def kinds(state: FlagState) -> tuple[list[str], list[str]]:
    """This rule's flag, active and pending (the one-replica fleet is behind the builders' schedule too)."""
    mine = "saturation_ahead"
    return [f.kind for f in state.active if f.kind == mine], [p.kind for p in state.pending if p.kind == mine]


def raised(state: FlagState):
    [flag] = [f for f in state.active if f.kind == "saturation_ahead"]
    return flag


def test_raised_after_the_minimum_duration_when_saturation_comes_within_the_lead_time():
    state = step(FlagState(), 9.0, 0.0)
    assert kinds(state) == ([], ["saturation_ahead"])
    state = step(state, 8.0, 29.0)
    assert kinds(state) == ([], ["saturation_ahead"])
    state = step(state, 7.0, 30.0)
    flag = raised(state)
    assert flag.kind == "saturation_ahead" and flag.subject == FLEET_TOTAL and flag.severity == "warning"
    assert "in 7 min" in flag.why and "10 min to serve" in flag.why
    assert FLAG_TITLES["saturation_ahead"] == "saturation ahead"


@pytest.mark.parametrize("minutes", [LEAD, 12.0, None, 0.0])
def test_not_raised_at_or_past_the_lead_time_nor_when_already_over(minutes):
    """At the lead time a replica started now is in time; over capacity now (0) is the load and saturation flags'."""
    state = FlagState()
    for now in (0.0, 30.0, 60.0):
        state = step(state, minutes, now)
    assert kinds(state) == ([], [])


def test_hysteresis_it_stays_between_the_lead_time_and_one_and_a_half_lead_times():
    state = FlagState()
    for now in (0.0, 30.0):
        state = step(state, 9.0, now)
    assert kinds(state)[0] == ["saturation_ahead"]
    for now, minutes in ((40.0, 12.0), (50.0, 14.9), (60.0, 0.0)):  # further off, or arrived: it stays
        state = step(state, minutes, now)
        assert kinds(state)[0] == ["saturation_ahead"], minutes
    assert kinds(step(state, 15.0, 70.0)) == ([], [])  # 1.5 lead times away
    assert kinds(step(state, None, 70.0)) == ([], [])  # not in sight within 30 min


def test_a_pending_condition_that_breaks_starts_over():
    state = step(FlagState(), 9.0, 0.0)
    state = step(state, 11.0, 20.0)
    assert kinds(state) == ([], [])
    state = step(state, 9.0, 40.0)
    assert [p.since for p in state.pending if p.kind == "saturation_ahead"] == [40.0]


def test_without_a_plan_or_a_forecast_nothing_is_said():
    inputs = FlagInputs(fleet(replica("r1")), plan=None, forecast=ahead(5.0))
    assert "saturation_ahead" not in str(evaluate(FlagState(), inputs, 0.0).trackers)
    inputs = FlagInputs(fleet(replica("r1")), plan=plan_now(), forecast=ahead(5.0, rps=None))
    assert "saturation_ahead" not in str(evaluate(FlagState(), inputs, 0.0).trackers)


@pytest.mark.parametrize("mode", ["bounded_queue", "hosted", "defer"])
def test_the_advice_switches_the_plans_overflow_mode_now_and_points_at_a_section(mode):
    state = FlagState()
    for now in (0.0, 30.0):
        state = step(state, 5.0, now, plan=plan_now(overflow_mode=mode))
    flag = raised(state)
    assert f"switch the overflow policy to {mode} now" in flag.todo
    assert asks_for_overflow(flag.todo)  # the console names its overflow switch key beside it
    assert len(textwrap.wrap(flag.todo, DO_WIDTH)) <= DO_LINES
    assert pointed_at(flag.todo) == ["Above the plan"] and set(pointed_at(flag.todo)) <= headings()


def test_a_ramp_through_the_views_raises_it():
    """Polls every 10 s of a fleet of 4 replicas (20 req/s) ramping 1 req/s a minute toward a plan that rises too."""
    plan = plan_now()  # 5 req/s per replica, lead time 10 min
    view = None
    for i in range(37):
        now = 1000.0 + 10.0 * i
        rps = 12.0 + i / 6  # +1 a minute
        replicas = [replica(f"r{n}", requests_per_second=rps / 4) for n in range(4)]
        rising = Profile(((0.0, rps), (30.0, rps + 30.0)))
        view = advance(view, "f", fleet(*replicas, requests_per_second=rps, at=now), plan, now, profile=rising)
    assert view.forecast.capacity_rps == 20.0 and view.forecast.lead_time_minutes == LEAD
    assert 0 < view.forecast.minutes_to_saturation < LEAD
    assert "saturation_ahead" in [f.kind for f in view.flags]
