"""What reactive scaling loses against the schedule: minutes with too few replicas when scale-ups wait for the queue."""

from __future__ import annotations

from console.engines.keda import reactive_shortfall
from console.plan.schedule import schedule
from console.plan.schema import load_plan

from conftest import PLANS

CHAT = {
    "name": "chat",
    "kind": "interactive",
    "tokens": {"input_mean": 1000, "input_p95": 3000, "output_mean": 300, "output_max": 1000},
    "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.05},
}


def test_worked_example_b_loses_its_lead_time_every_weekday_morning(capcon):
    # 2 -> 5 replicas at 08:00 Monday to Friday, 10 min to load: 10 min short by 3 replicas, five times a week.
    week = schedule(load_plan(str(PLANS / "internal-assistant-18rps.yaml")))
    short = reactive_shortfall(week)
    assert (short.minutes_week, short.replica_minutes_week, short.worst_day_minutes) == (50, 150, 10)
    code, out, err = capcon("plan", PLANS / "internal-assistant-18rps.yaml", "--schedule")
    assert code == 0, err
    assert "50 min a week with too few replicas (150 replica-minutes), worst mon with 10 min" in out


def test_steps_closer_than_the_lead_time_are_short_all_the_way_up(write_plan):
    # 2, 3, 4 replicas from 08:00, 09:00, 10:00, back to 2 at 11:00, with a 90 min lead: 3 asked for at 09:00
    # serves from 10:30, 4 asked for at 10:00 would serve from 11:30. Short by 1 from 09:00 to 10:00, by 2
    # from 10:00 to 10:30, by 1 from 10:30 to 11:00: 120 min and 150 replica-minutes a weekday.
    weekday = [0.0] * 24
    weekday[8:11] = [4.0, 9.0, 14.0]  # at 5 rps a replica, plus one spare
    arrivals = {"weekday": weekday, "weekend": [0.0] * 24}
    plan = load_plan(str(write_plan({"lead_time_minutes": 90, "workloads": [dict(CHAT, arrivals=arrivals)]})))
    assert schedule(plan).replicas_by_hour[0][7:12] == (2, 2, 3, 4, 2)
    short = reactive_shortfall(schedule(plan))
    assert (short.minutes_week, short.replica_minutes_week, short.worst_day_minutes) == (5 * 120, 5 * 150, 120)


def test_the_same_replicas_all_week_lose_nothing(capcon):
    assert reactive_shortfall(schedule(load_plan(str(PLANS / "assistant-70b.yaml")))).minutes_week == 0
    code, out, _ = capcon("plan", PLANS / "assistant-70b.yaml", "--schedule")
    assert code == 0 and "nothing lost, no scale-ups" in out
