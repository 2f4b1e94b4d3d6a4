"""The week's schedule: replicas per hour, lead time, month arithmetic, idle hours and deferrable work."""

from __future__ import annotations

import pytest
import yaml

from console.plan.schedule import capacity_at, replicas_needed, schedule
from console.plan.schema import parse_plan

from conftest import BASE_PLAN, changed


def _plan(changes: dict | None = None, workloads: list[dict] | None = None):
    data = changed(BASE_PLAN, changes or {})
    if workloads is not None:
        data["workloads"] = workloads
    return parse_plan(yaml.safe_dump(data), "test.yaml")


def _workload(name="chat", kind="interactive", weekday=None, weekend=None, **tokens):
    base = changed(BASE_PLAN["workloads"][0], {"name": name, "kind": kind})
    base["arrivals"] = {"weekday": weekday or [4.0] * 24, "weekend": weekend or [2.0] * 24}
    base["tokens"].update(tokens)
    return base


@pytest.mark.parametrize(
    "rps,redundancy,expected",
    [(18, 1, 5), (15, 1, 4), (15.01, 1, 5), (2, 1, 2), (0, 1, 2), (0.1, 0, 2), (12, 0, 3), (12, 2, 5)],
)
def test_replicas_needed(rps, redundancy, expected):
    plan = _plan({"redundancy": redundancy})  # 5 rps per replica
    assert replicas_needed(plan, rps) == expected


def test_capacity_at_follows_the_profile_of_all_interactive_workloads():
    morning = [2.0] * 24
    morning[9] = 9.0
    plan = _plan(workloads=[_workload(weekday=morning), _workload(name="rag", weekday=[1.0] * 24)])
    assert capacity_at(plan, 0, 9) == (2 + 1, 15.0)  # 10 rps -> 2 + 1
    assert capacity_at(plan, 0, 3) == (1 + 1, 10.0)  # 3 rps -> 1 + 1
    assert capacity_at(plan, 5, 9) == (2, 10.0)  # weekend: 2 + 2 rps


def test_deferrable_work_does_not_add_scheduled_replicas():
    batch = _workload(name="batch", kind="deferrable", weekday=[50.0] * 24, weekend=[50.0] * 24)
    plan = _plan(workloads=[_workload(), batch])
    assert {n for day in schedule(plan).replicas_by_hour for n in day} == {2}


def test_scale_ups_start_one_lead_time_before_the_hour():
    weekday = [2.0] * 24
    weekday[8:18] = [18.0] * 10
    plan = _plan({"lead_time_minutes": 90}, workloads=[_workload(weekday=weekday)])
    week = schedule(plan)
    ups = [up for up in week.scale_ups if up.ready_weekday == 0]
    assert len(ups) == 1
    up = ups[0]
    assert (up.ready_hour, up.from_replicas, up.to_replicas) == (8, 2, 5)
    assert (up.start_weekday, up.start_minute_of_day) == (0, 6 * 60 + 30)
    # Monday's first hour rising wraps to Sunday.
    weekday = [18.0] + [2.0] * 23
    monday_midnight = schedule(_plan({"lead_time_minutes": 30}, workloads=[_workload(weekday=weekday)]))
    first = next(up for up in monday_midnight.scale_ups if up.ready_weekday == 0)
    assert (first.start_weekday, first.start_minute_of_day) == (6, 23 * 60 + 30)


def test_month_counts_22_working_days_and_the_rest_weekend():
    plan = _plan({"lead_time_minutes": 0}, workloads=[_workload(weekday=[12.0] * 24, weekend=[2.0] * 24)])
    week = schedule(plan)
    # Weekdays 3 + 1 = 4 replicas, weekends 2: 22 x 24 x 4 + (730 - 528) x 2.
    assert week.gpu_hours_month_schedule == pytest.approx(22 * 24 * 4 + 202 * 2)
    assert week.gpu_hours_month_always_on == pytest.approx(4 * 730)
    assert week.saving_share == pytest.approx(1 - (2112 + 404) / 2920)


def test_gpu_hours_count_every_gpu_of_a_replica():
    plan = _plan({"replica": {"tensor_parallel": 4}, "lead_time_minutes": 0})
    week = schedule(plan)
    assert week.gpus_per_replica == 4
    assert week.gpu_hours_month_always_on == pytest.approx(2 * 4 * 730)
    assert week.cost_month_always_on == pytest.approx(week.gpu_hours_month_always_on * plan.gpu.price_per_hour)


def test_a_flat_profile_saves_nothing():
    week = schedule(_plan(workloads=[_workload(weekday=[7.0] * 24, weekend=[7.0] * 24)]))
    assert week.scale_ups == ()
    assert week.saving_share == pytest.approx(0.0)


def test_deferrable_work_fits_into_idle_hours_or_says_it_does_not():
    day = [1.0] * 8 + [14.0] * 12 + [1.0] * 4
    small = _workload(name="summaries", kind="deferrable", weekday=[0.2] * 24, weekend=[0.0] * 24)
    week = schedule(_plan(workloads=[_workload(weekday=day), small]))
    fit = week.deferrable
    assert fit is not None and fit.workloads == ("summaries",)
    assert fit.equivalent_requests_per_week == pytest.approx(0.2 * 24 * 5 * 3600)  # same tokens as chat
    # Idle hours: 12 a weekday night at 2 x 5 - 1 = 9 rps spare, and both weekend days (2 rps load -> 8 spare).
    assert fit.spare_requests_per_week_idle == pytest.approx((12 * 5 * 9 + 48 * 8) * 3600)
    assert fit.fits
    huge = _workload(name="backfill", kind="deferrable", weekday=[40.0] * 24, weekend=[40.0] * 24)
    assert not schedule(_plan(workloads=[_workload(weekday=day), huge])).deferrable.fits
    assert schedule(_plan()).deferrable is None


def test_idle_windows_run_across_midnight():
    day = [1.0] * 8 + [14.0] * 12 + [1.0] * 4
    week = schedule(_plan(workloads=[_workload(weekday=day)]))
    monday = next(w for w in week.idle_windows if w.weekday == 0)
    assert (monday.hour, monday.hours) == (20, 12)  # Monday 20:00 to Tuesday 08:00
    friday = next(w for w in week.idle_windows if w.weekday == 4)
    assert friday.hours == 4 + 48 + 8  # through the weekend to Monday 08:00


def test_capacity_at_agrees_with_the_printed_schedule(plan_json):
    from pathlib import Path

    from console.plan.schema import load_plan

    path = Path(__file__).resolve().parents[2] / "plans" / "chat-8b-l40s.yaml"
    table = plan_json(path, "--schedule")["replicas_by_hour"]
    plan = load_plan(path)
    for weekday in range(7):
        for hour in range(24):
            replicas, capacity = capacity_at(plan, weekday, hour)
            assert replicas == table[weekday][hour]
            assert capacity == pytest.approx(replicas * plan.capacity.rps_per_replica)


def test_the_text_schedule_shows_scale_ups_month_and_saving(capcon):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "plans" / "internal-assistant-18rps.yaml"
    code, text, _ = capcon("plan", path, "--schedule")
    assert code == 0
    assert "  Mon-Fri 07:50 start 3 (2 -> 5), serving from 08:00" in text
    assert "730 h: 22 working days and 8.42 weekend days" in text
    saving = next(line for line in text.splitlines() if line.strip().startswith("saving"))
    assert "38%" in saving
    assert "  Mon    2  2  2  2  2  2  2  2  5" in text
