"""What the plan expects at a moment, read from a real plan file through the planner's schedule."""

from __future__ import annotations

import calendar
from pathlib import Path

import pytest

from console.fleet.plan_now import plan_now, week_time
from console.plan.schedule import capacity_at, schedule
from console.plan.schema import load_plan

PLAN = Path(__file__).resolve().parents[2] / "plans" / "internal-assistant-18rps.yaml"
MONDAY = calendar.timegm((2026, 11, 30, 0, 0, 0))  # a Monday, 00:00 UTC


def test_expectation_follows_the_schedule_hour_by_hour():
    plan = load_plan(str(PLAN))
    for hour in (3, 9, 14, 22):
        expected = plan_now(plan, MONDAY + hour * 3600 + 1800)
        replicas, capacity = capacity_at(plan, 0, hour)
        assert (expected.weekday, expected.hour) == (0, hour)
        assert expected.replicas_scheduled == replicas
        assert expected.planned_capacity_rps == capacity
        assert expected.rps_per_replica == plan.capacity.rps_per_replica


def test_scale_up_due_within_the_lead_time_only():
    plan = load_plan(str(PLAN))
    table = schedule(plan).replicas_by_hour[0]
    rises = [h for h in range(1, 24) if table[h] > table[h - 1]]
    if not rises:
        pytest.skip(f"{PLAN.name} has no Monday scale-up to test against")
    hour = rises[0]
    lead = plan.lead_time_seconds
    inside = plan_now(plan, MONDAY + hour * 3600 - lead / 2)
    outside = plan_now(plan, MONDAY + hour * 3600 - lead - 60)
    assert inside.replicas_scheduled == table[hour - 1]
    assert inside.replicas_scheduled_soon == table[hour]
    assert outside.replicas_scheduled_soon == table[hour - 1]


def test_targets_and_token_means_come_from_the_plan():
    plan = load_plan(str(PLAN))
    expected = plan_now(plan, MONDAY)
    interactive = plan.interactive
    assert expected.ttft_p95_target_seconds == min(w.targets.ttft_p95_seconds for w in interactive)
    assert expected.tpot_p95_target_seconds == min(w.targets.tpot_p95_seconds for w in interactive)
    assert expected.kv_budget_bytes > 0 and expected.kv_bytes_per_token > 0
    assert expected.overflow_mode == plan.overflow.mode


def test_utc_offset_moves_the_plan_clock():
    plan = load_plan(str(PLAN))
    assert plan_now(plan, MONDAY + 9 * 3600, utc_offset_seconds=3600).hour == 10


def test_week_time_maps_a_simulated_week_onto_the_plan_clock():
    plan = load_plan(str(PLAN))
    tuesday_9 = plan_now(plan, week_time(24 * 3600 + 9 * 3600 + 120))
    assert (tuesday_9.weekday, tuesday_9.hour) == (1, 9)
