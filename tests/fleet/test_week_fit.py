"""A recorded week against the plan: the comparison, and the suggested profile pasted back into the plan."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from console.fleet.hourly import Summary
from console.fleet.week_fit import fit_week
from console.metrics.window import BucketDelta
from console.plan.schema import load_plan, parse_plan

PLAN = "plans/internal-assistant-18rps.yaml"  # one interactive workload, on Europe/Warsaw's clock
MONDAY = datetime(2026, 11, 23, tzinfo=ZoneInfo("Europe/Warsaw"))


def tokens(count: float, mean: float) -> BucketDelta:
    return BucketDelta({1000.0: count, math.inf: count}, count * mean, count)


def hour(
    day: int, at: int, rps: float | None, prompt_mean=1200.0, output_mean=250.0, count=100.0, week: int = 0
) -> Summary:
    start = (MONDAY + timedelta(days=day + 7 * week, hours=at)).timestamp()
    deltas = {"prompt_length": tokens(count, prompt_mean), "output_length": tokens(count, output_mean)}
    return Summary(
        start,
        start + 3600,
        1 if rps is not None else 0,
        rps,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        0,
        {},
        None,
        None,
        deltas=deltas if rps is not None else {},
    )


def paste(plan_text: str, workloads: str) -> str:
    """Replace the plan's top-level `workloads:` section with the suggested one."""
    return re.sub(r"(?ms)^workloads:.*?(?=^\S)", lambda _: workloads, plan_text, count=1)


def test_observed_hours_are_set_against_the_plans_hours_on_its_clock():
    plan = load_plan(PLAN)
    zone = ZoneInfo(plan.timezone)
    fit = fit_week([hour(0, 10, 21.0), hour(6, 23, 0.5)], plan, zone)
    monday_ten = fit.hours[10]
    assert (monday_ten.weekday, monday_ten.hour) == (0, 10)
    assert monday_ten.observed_rps == 21.0
    assert monday_ten.planned_rps == plan.workloads[0].rps_by_hour[0][10]
    assert monday_ten.ratio == 21.0 / plan.workloads[0].rps_by_hour[0][10]
    assert fit.hours[6 * 24 + 23].observed_rps == 0.5
    assert fit.hours_with_data == 2
    assert fit.hours[11].observed_rps is None and fit.hours[11].ratio is None


def test_several_weeks_keep_the_busiest_of_each_hour_and_pool_token_means():
    plan = load_plan(PLAN)
    fit = fit_week(
        [hour(1, 9, 10.0, prompt_mean=1000.0), hour(1, 9, 14.0, prompt_mean=2000.0, count=300.0, week=1)],
        plan,
        ZoneInfo(plan.timezone),
    )
    assert fit.hours[24 + 9].observed_rps == 14.0
    assert fit.hours[24 + 9].occurrences == 2
    assert fit.hours[24 + 9].observed_input_mean == (100 * 1000 + 300 * 2000) / 400


def test_the_suggested_yaml_pasted_into_the_plan_gives_the_suggested_profile_back():
    plan = load_plan(PLAN)
    zone = ZoneInfo(plan.timezone)
    observed = {
        (d, h): round(3.0 + d + h * 0.37, 2) for d in range(7) for h in range(24) if (d, h) != (2, 4) and h != 3
    }
    fit = fit_week(
        [hour(d, h, rps, prompt_mean=1500.0, output_mean=200.0) for (d, h), rps in observed.items()], plan, zone
    )
    edited = parse_plan(paste(plan.source_text, fit.yaml), PLAN)
    workload = edited.workloads[0]
    assert workload.rps_by_hour == fit.suggested_rps[workload.name]
    for d in range(7):
        for h in range(24):
            expected = observed.get((d, h), plan.workloads[0].rps_by_hour[d][h])  # no data: the plan's value
            assert workload.rps_by_hour[d][h] == expected
    # Every hour observed a 1,500-token mean: the suggestion is that mean, whatever the plan said.
    assert workload.tokens.input_mean == 1500
    assert workload.tokens.output_mean == 200
    assert workload.tokens.input_p95 >= workload.tokens.input_mean
    assert "no data at 03: the plan's values" in fit.yaml
    assert "wed: [" in fit.yaml and "no data at 03-04" in fit.yaml
    # Everything but the arrivals and tokens is the plan's own.
    assert workload.targets == plan.workloads[0].targets and edited.capacity == plan.capacity


def test_several_interactive_workloads_are_each_scaled_by_observed_over_planned():
    plan = load_plan(PLAN)
    text = plan.source_text
    section = re.search(r"(?ms)^workloads:\n(.*?)(?=^\S)", text).group(1)
    second = section.replace(f"name: {plan.workloads[0].name}", "name: second", 1)
    doubled = parse_plan(text.replace(section, section + second), PLAN)
    assert len(doubled.interactive) == 2
    zone = ZoneInfo(doubled.timezone)
    planned = sum(w.rps_by_hour[0][10] for w in doubled.interactive)
    fit = fit_week([hour(0, 10, planned * 1.5)], doubled, zone)
    edited = parse_plan(paste(doubled.source_text, fit.yaml), PLAN)
    for before, after in zip(doubled.interactive, edited.interactive):
        assert math.isclose(after.rps_by_hour[0][10], before.rps_by_hour[0][10] * 1.5, abs_tol=1e-3)
        assert after.rps_by_hour[0][11] == before.rps_by_hour[0][11]
    assert "scaled by observed / planned" in fit.yaml


def test_deferrable_arrivals_are_part_of_the_planned_total_and_left_out_of_the_suggested_interactive_profile():
    plan = load_plan("plans/chat-8b-l40s.yaml")  # chat (interactive) plus document-summaries, 0.3 rps weekdays 08-17
    chat, summaries = plan.workloads
    assert (chat.kind, summaries.kind) == ("interactive", "deferrable")
    zone = ZoneInfo(plan.timezone)
    # Monday 10:00 exactly as planned: chat's and the summaries' rps of that hour, each with its planned prompts.
    chat_rps, summary_rps = chat.rps_by_hour[0][10], summaries.rps_by_hour[0][10]
    assert summary_rps > 0
    chat_count, summary_count = chat_rps * 3600, summary_rps * 3600
    prompts = BucketDelta(
        {1000.0: chat_count, math.inf: chat_count + summary_count},
        chat_count * chat.tokens.input_mean + summary_count * summaries.tokens.input_mean,
        chat_count + summary_count,
    )
    outputs = BucketDelta(
        {1000.0: chat_count + summary_count, math.inf: chat_count + summary_count},
        chat_count * chat.tokens.output_mean + summary_count * summaries.tokens.output_mean,
        chat_count + summary_count,
    )
    start = datetime(2026, 11, 23, 10, tzinfo=zone).timestamp()
    summary = Summary(
        start,
        start + 3600,
        1,
        chat_rps + summary_rps,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        0,
        {},
        None,
        None,
        deltas={"prompt_length": prompts, "output_length": outputs},
        busiest_seconds=300.0,
    )
    fit = fit_week([summary], plan, zone)
    monday_ten = fit.hours[10]
    assert math.isclose(monday_ten.planned_rps, chat_rps + summary_rps) and math.isclose(monday_ten.ratio, 1.0)
    assert (monday_ten.planned_interactive_rps, monday_ten.planned_deferrable_rps) == (chat_rps, summary_rps)
    assert math.isclose(fit.interactive_input_mean, chat.tokens.input_mean)
    edited = parse_plan(paste(plan.source_text, fit.yaml), "plans/chat-8b-l40s.yaml")
    new_chat, new_summaries = edited.workloads
    assert new_chat.rps_by_hour[0][10] == chat_rps  # the summaries are not counted twice
    assert new_summaries.rps_by_hour == summaries.rps_by_hour
    assert new_chat.tokens.input_mean == chat.tokens.input_mean
    assert new_chat.tokens.output_mean == chat.tokens.output_mean
    assert "less the plan's deferrable arrivals in that hour (document-summaries;" in fit.yaml


def test_an_hour_is_placed_on_the_plan_clock_the_polls_recorded():
    from console.fleet.hourly import plan_hour_at_clock
    from console.fleet.plan_now import week_time

    plan = load_plan(PLAN)
    at = hour(0, 3, 12.0)  # recorded at 03:00 on the wall clock...
    clocked = replace(at, plan=plan_hour_at_clock(plan, week_time(2 * 86400 + 14 * 3600)))  # ...Wed 14:00 simulated
    fit = fit_week([clocked], plan, ZoneInfo(plan.timezone))
    assert fit.hours[2 * 24 + 14].observed_rps == 12.0
    assert fit.hours[3].observed_rps is None
