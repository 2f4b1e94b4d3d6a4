"""A recorded week against the plan, hour by hour, and the arrival profile the record suggests.

For each of the 7 x 24 hours of the plan's week (Monday first, on the plan's clock)
the observed busiest-five-minute rps is set against the plan's interactive rps, and
the observed mean prompt and output lengths against the means the plan expects in
that hour. With several recorded weeks an hour of the week keeps its busiest
occurrence (the plan sizes for the busy week), and the token means pool all of them.

The suggestion is a `workloads:` section to paste over the plan's: the interactive
arrivals become the observed rps (one interactive workload), or each interactive
workload scaled by observed / planned of the hour (several); hours without data keep
the plan's values; token means scale by observed / planned. Deferrable workloads are
copied unchanged. Pure: plain data in, text out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Mapping, Sequence

from console.fleet.hourly import Summary
from console.fleet.plan_now import HOUR, plan_now, week_time
from console.metrics.window import BucketDelta, delta_quantile, merge_deltas
from console.plan.model import DAYS, Plan, TokenStats, Workload

RPS_DIGITS = 3  # suggested rps are rounded to a thousandth of a request per second


@dataclass(frozen=True)
class HourFit:
    weekday: int  # 0 = Monday
    hour: int
    observed_rps: float | None  # busiest five minutes; None: no data for this hour of the week
    planned_rps: float  # interactive workloads
    observed_input_mean: float | None
    observed_output_mean: float | None
    planned_input_mean: float | None  # the mix of workloads the plan has in this hour
    planned_output_mean: float | None
    occurrences: int  # recorded hours that fell on this hour of the week

    @property
    def ratio(self) -> float | None:
        if self.observed_rps is None or not self.planned_rps > 0:
            return None
        return self.observed_rps / self.planned_rps


@dataclass(frozen=True)
class WeekFit:
    plan_name: str
    timezone: str
    hours: tuple[HourFit, ...]  # 168, Monday 00:00 first
    observed_input_mean: float | None
    observed_output_mean: float | None
    planned_input_mean: float | None  # weighted like the observation (by the requests seen in each hour)
    planned_output_mean: float | None
    observed_input_p95: float | None
    suggested_rps: Mapping[str, tuple[tuple[float, ...], ...]]  # interactive workload -> 7 x 24
    suggested_tokens: Mapping[str, TokenStats]  # interactive workload -> token stats
    yaml: str

    @property
    def hours_with_data(self) -> int:
        return sum(1 for h in self.hours if h.observed_rps is not None)


def _slot(at: float, zone: tzinfo) -> int:
    local = datetime.fromtimestamp(at, zone)
    return local.weekday() * 24 + local.hour


def _mean(delta: BucketDelta | None) -> float | None:
    if delta is None or delta.sum is None or delta.count is None or not delta.count > 0:
        return None
    return delta.sum / delta.count


def _ratio(observed: float | None, planned: float | None) -> float | None:
    if observed is None or planned is None or not planned > 0:
        return None
    return observed / planned


def fit_week(hours: Sequence[Summary], plan: Plan, zone: tzinfo) -> WeekFit:
    """`hours` are hour summaries bucketed on the plan's clock (`zone` is the plan's timezone)."""
    busiest: list[float | None] = [None] * 168
    prompts: list[list[BucketDelta]] = [[] for _ in range(168)]
    outputs: list[list[BucketDelta]] = [[] for _ in range(168)]
    seen = [0] * 168
    for summary in hours:
        if not summary.has_data:
            continue
        slot = _slot(summary.start, zone)
        seen[slot] += 1
        # A profile is written in busiest five minutes: a rate over less is not one of them.
        if summary.busiest_rps is not None and not summary.busiest_is_short and (busiest[slot] is None or summary.busiest_rps > busiest[slot]):
            busiest[slot] = summary.busiest_rps
        if "prompt_length" in summary.deltas:
            prompts[slot].append(summary.deltas["prompt_length"])
        if "output_length" in summary.deltas:
            outputs[slot].append(summary.deltas["output_length"])

    fits = []
    weighted = {"in": [0.0, 0.0, 0.0], "out": [0.0, 0.0, 0.0]}  # observed sum, count, planned mean x count
    for slot in range(168):
        expected = plan_now(plan, week_time(slot * HOUR))
        prompt, output = merge_deltas(prompts[slot]), merge_deltas(outputs[slot])
        for key, delta, planned in (("in", prompt, expected.input_tokens_mean), ("out", output, expected.output_tokens_mean)):
            if _mean(delta) is not None and planned is not None:
                weighted[key][0] += delta.sum
                weighted[key][1] += delta.count
                weighted[key][2] += planned * delta.count
        fits.append(HourFit(
            weekday=slot // 24,
            hour=slot % 24,
            observed_rps=busiest[slot],
            planned_rps=expected.planned_load_rps,
            observed_input_mean=_mean(prompt),
            observed_output_mean=_mean(output),
            planned_input_mean=expected.input_tokens_mean,
            planned_output_mean=expected.output_tokens_mean,
            occurrences=seen[slot],
        ))

    def pooled(key):
        total, count, planned = weighted[key]
        return (total / count, planned / count) if count > 0 else (None, None)

    observed_in, planned_in = pooled("in")
    observed_out, planned_out = pooled("out")
    all_prompts = merge_deltas(d for slot in prompts for d in slot)
    input_p95 = delta_quantile(0.95, all_prompts)
    fit_hours = tuple(fits)
    suggested_rps, notes = _suggest_rps(plan, fit_hours)
    suggested_tokens = _suggest_tokens(plan, _ratio(observed_in, planned_in), _ratio(observed_out, planned_out))
    text = _yaml(plan, fit_hours, suggested_rps, notes, suggested_tokens, (observed_in, planned_in), (observed_out, planned_out))
    return WeekFit(
        plan_name=plan.name,
        timezone=plan.timezone,
        hours=fit_hours,
        observed_input_mean=observed_in,
        observed_output_mean=observed_out,
        planned_input_mean=planned_in,
        planned_output_mean=planned_out,
        observed_input_p95=input_p95,
        suggested_rps=suggested_rps,
        suggested_tokens=suggested_tokens,
        yaml=text,
    )


def _rounded(value: float) -> float:
    return round(max(value, 0.0), RPS_DIGITS) + 0.0  # + 0.0: never a "-0.0"


def _suggest_rps(plan: Plan, hours: tuple[HourFit, ...]):
    """Each interactive workload's 7 x 24, and per workload the notes its YAML carries."""
    interactive = plan.interactive
    notes: dict[str, list[str]] = {w.name: [] for w in interactive}
    tables: dict[str, list[list[float]]] = {w.name: [list(day) for day in w.rps_by_hour] for w in interactive}
    peak_total = sum(w.peak_rps for w in interactive)
    for fit in hours:
        if fit.observed_rps is None:
            continue
        d, h = fit.weekday, fit.hour
        if len(interactive) == 1:
            tables[interactive[0].name][d][h] = _rounded(fit.observed_rps)
            continue
        planned = sum(w.rps_by_hour[d][h] for w in interactive)
        for w in interactive:
            # Scaled by observed / planned of the hour; an hour the plan left empty is shared by peak rps.
            share = w.rps_by_hour[d][h] / planned if planned > 0 else w.peak_rps / peak_total
            tables[w.name][d][h] = _rounded(fit.observed_rps * share)
    result = {}
    for w in interactive:
        table = tables[w.name]
        if max(max(day) for day in table) <= 0:
            notes[w.name].append("the record shows no requests at all: the plan's arrivals are kept")
            table = [list(day) for day in w.rps_by_hour]
        result[w.name] = tuple(tuple(day) for day in table)
    if len(interactive) > 1:
        for w in interactive:
            notes[w.name].append(
                "several interactive workloads share the fleet: each hour is this workload's planned rps "
                "scaled by observed / planned rps of all interactive workloads in that hour"
            )
    return result, notes


def _suggest_tokens(plan: Plan, input_ratio: float | None, output_ratio: float | None) -> dict[str, TokenStats]:
    suggested = {}
    for w in plan.interactive:
        t = w.tokens
        input_mean = round(t.input_mean * input_ratio) if input_ratio is not None else t.input_mean
        output_mean = round(t.output_mean * output_ratio) if output_ratio is not None else t.output_mean
        input_p95 = max(round(t.input_p95 * input_ratio) if input_ratio is not None else t.input_p95, input_mean)
        suggested[w.name] = TokenStats(
            input_mean=input_mean,
            input_p95=input_p95,
            output_mean=output_mean,
            output_max=max(t.output_max, output_mean),  # a cap the servers set, not a statistic: only raised
        )
    return suggested


# --- YAML --------------------------------------------------------------------


def number(value: float) -> str:
    """A number as YAML reads it back exactly: 8.523, 12, 0.06."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _hour_ranges(hours: list[int]) -> str:
    """[0, 1, 2, 5, 23] -> "00-02, 05, 23"."""
    parts, i = [], 0
    while i < len(hours):
        j = i
        while j + 1 < len(hours) and hours[j + 1] == hours[j] + 1:
            j += 1
        parts.append(f"{hours[i]:02d}" if i == j else f"{hours[i]:02d}-{hours[j]:02d}")
        i = j + 1
    return ", ".join(parts)


def _workload_yaml(w: Workload, arrivals: list[str], tokens: TokenStats, token_notes: Mapping[str, str]) -> list[str]:
    lines = [f"  - name: {json.dumps(w.name)}", f"    kind: {w.kind}", *arrivals, "    tokens:"]
    for key in ("input_mean", "input_p95", "output_mean", "output_max"):
        note = token_notes.get(key)
        lines.append(f"      {key}: {number(getattr(tokens, key))}" + (f"  # {note}" if note else ""))
    g = w.targets
    lines += ["    targets:", f"      ttft_p95_seconds: {number(g.ttft_p95_seconds)}", f"      tpot_p95_seconds: {number(g.tpot_p95_seconds)}"]
    if g.e2e_p95_seconds is not None:
        lines.append(f"      e2e_p95_seconds: {number(g.e2e_p95_seconds)}")
    lines.append(f"      goodput_share: {number(g.goodput_share)}")
    lines += [f"    queue_seconds: {number(w.queue_seconds)}", f"    burstiness: {number(w.burstiness)}"]
    return lines


def _week_yaml(table, hours: tuple[HourFit, ...]) -> list[str]:
    lines = ["    arrivals:", "      week:"]
    for d, day in enumerate(DAYS):
        kept = [h for h in range(24) if hours[d * 24 + h].observed_rps is None]
        values = ", ".join(number(v) for v in table[d])
        note = ""
        if len(kept) == 24:
            note = "  # no data this day: the plan's values"
        elif kept:
            note = f"  # no data at {_hour_ranges(kept)}: the plan's values"
        lines.append(f"        {day}: [{values}]{note}")
    return lines


def _yaml(plan, hours, suggested_rps, notes, suggested_tokens, inputs, outputs) -> str:
    seen = sum(1 for h in hours if h.observed_rps is not None)
    lines = [
        f"# Suggested from the record: {seen} of 168 hours of the week observed, hours on {plan.timezone} (the plan's clock).",
        "# Arrivals: the busiest five minutes of each hour as recorded; an hour without data keeps the plan's value.",
        "# Paste over the plan's `workloads:` section.",
        "workloads:",
    ]
    for w in plan.workloads:
        if w.kind != "interactive":
            lines.append(f"  # {w.name}: deferrable, copied from the plan unchanged")
            arrivals = ["    arrivals:", "      week:"] + [
                f"        {day}: [{', '.join(number(v) for v in w.rps_by_hour[d])}]" for d, day in enumerate(DAYS)
            ]
            lines += _workload_yaml(w, arrivals, w.tokens, {})
            continue
        for note in notes[w.name]:
            lines.append(f"  # {w.name}: {note}")
        token_notes = {}
        for key, (observed, planned) in (("input_mean", inputs), ("output_mean", outputs)):
            if observed is None:
                token_notes[key] = "no token data recorded: the plan's value"
            else:
                token_notes[key] = f"plan {number(getattr(w.tokens, key))}; observed mix mean {observed:.0f} vs planned {planned:.0f}"
        tokens = suggested_tokens[w.name]
        if tokens.output_max > w.tokens.output_max:
            token_notes["output_max"] = "raised to the suggested mean"
        lines += _workload_yaml(w, _week_yaml(suggested_rps[w.name], hours), tokens, token_notes)
    return "\n".join(lines) + "\n"
