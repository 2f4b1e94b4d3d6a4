"""A recorded week against the plan, hour by hour, and the arrival profile the record suggests.

For each of the 7 x 24 hours of the plan's week (Monday first, on the plan's clock,
or at the plan clock the polls recorded) the observed busiest-five-minute rps, which
counts every finished request, is set against the plan's total for that hour: its
interactive rps plus its deferrable arrivals. The observed mean prompt and output
lengths are set against the means of the plan's mix in that hour. With several
recorded weeks an hour of the week keeps its busiest occurrence (the plan sizes for
the busy week), and the token means pool all of them.

The plan's schedule does not place deferrable work in particular hours (it only checks
that the work fits in the idle hours), so the deferrable work is taken to arrive as its
arrivals table says. The suggestion is a `workloads:` section to paste over the plan's:
the interactive arrivals become the observed rps less the plan's deferrable rps of the
hour (one interactive workload), or each interactive workload's share of that (several);
hours without data keep the plan's values; token means scale by the observed interactive
mean (the plan's deferrable requests of each hour taken out) over the planned one.
Deferrable workloads are copied unchanged. Pure: plain data in, text out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo

from console.fleet.hourly import Summary
from console.fleet.plan_now import HOUR, plan_now, week_time
from console.metrics.window import BucketDelta, delta_quantile, merge_deltas
from console.plan.model import DAYS, Plan, TokenStats, Workload

RPS_DIGITS = 3  # suggested rps are rounded to a thousandth of a request per second


@dataclass(frozen=True)
class HourFit:
    weekday: int  # 0 = Monday
    hour: int
    observed_rps: float | None  # busiest five minutes of every request; None: no data for this hour of the week
    planned_rps: float  # the plan's total: interactive plus deferrable arrivals
    observed_input_mean: float | None
    observed_output_mean: float | None
    planned_input_mean: float | None  # the mix of workloads the plan has in this hour
    planned_output_mean: float | None
    occurrences: int  # recorded hours that fell on this hour of the week
    planned_interactive_rps: float = 0.0
    planned_deferrable_rps: float = 0.0

    @property
    def observed_interactive_rps(self) -> float | None:
        """The observed rps less the deferrable arrivals the plan has in this hour."""
        if self.observed_rps is None:
            return None
        return max(self.observed_rps - self.planned_deferrable_rps, 0.0)

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
    # Interactive requests only: the plan's deferrable requests of each hour taken out of the observed.
    interactive_input_mean: float | None
    interactive_output_mean: float | None
    planned_interactive_input_mean: float | None
    planned_interactive_output_mean: float | None
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


def _deferrable_rps(plan: Plan, weekday: int, hour: int) -> float:
    return sum(w.rps_by_hour[weekday][hour] for w in plan.workloads if w.kind != "interactive")


def _interactive_mean(plan: Plan, weekday: int, hour: int, key: str) -> float | None:
    """The interactive workloads' planned token mean in one hour (by their rps then, else by peak rps)."""
    weights = [(getattr(w.tokens, key), w.rps_by_hour[weekday][hour]) for w in plan.interactive]
    if sum(k for _, k in weights) <= 0:
        weights = [(getattr(w.tokens, key), w.peak_rps) for w in plan.interactive]
    total = sum(k for _, k in weights)
    return sum(v * k for v, k in weights) / total if total > 0 else None


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
    covered = [0.0] * 168  # seconds of the recorded hours that held token data
    for summary in hours:
        if not summary.has_data:
            continue
        # The hour the console read the plan at (a recorded plan clock), else the hour on the plan's clock.
        slot = summary.plan.weekday * 24 + summary.plan.hour if summary.plan is not None else _slot(summary.start, zone)
        seen[slot] += 1
        if "prompt_length" in summary.deltas or "output_length" in summary.deltas:
            covered[slot] += summary.end - summary.start
        # A profile is written in busiest five minutes: a rate over less is not one of them.
        current = busiest[slot]
        if (
            summary.busiest_rps is not None
            and not summary.busiest_is_short
            and (current is None or summary.busiest_rps > current)
        ):
            busiest[slot] = summary.busiest_rps
        if "prompt_length" in summary.deltas:
            prompts[slot].append(summary.deltas["prompt_length"])
        if "output_length" in summary.deltas:
            outputs[slot].append(summary.deltas["output_length"])

    fits = []
    weighted = {"in": [0.0, 0.0, 0.0], "out": [0.0, 0.0, 0.0]}  # observed sum, count, planned mean x count
    interactive = {"in": [0.0, 0.0, 0.0], "out": [0.0, 0.0, 0.0]}  # the same, deferrable requests taken out
    deferrable = [w for w in plan.workloads if w.kind != "interactive"]
    for slot in range(168):
        day, hour = divmod(slot, 24)
        expected = plan_now(plan, week_time(slot * HOUR))
        prompt, output = merge_deltas(prompts[slot]), merge_deltas(outputs[slot])
        for key, delta, planned, field in (
            ("in", prompt, expected.input_tokens_mean, "input_mean"),
            ("out", output, expected.output_tokens_mean, "output_mean"),
        ):
            if delta is None or planned is None:
                continue
            observed_sum, observed_count = delta.sum, delta.count
            if observed_sum is None or observed_count is None or not observed_count > 0:
                continue  # no observed mean (`_mean`)
            weighted[key][0] += observed_sum
            weighted[key][1] += observed_count
            weighted[key][2] += planned * observed_count
            # The deferrable requests the plan has arriving in these recorded seconds, and their tokens.
            counts = [(w.rps_by_hour[day][hour] * covered[slot], getattr(w.tokens, field)) for w in deferrable]
            count = min(sum(c for c, _ in counts), observed_count)
            share = count / sum(c for c, _ in counts) if count > 0 else 0.0
            left_count = observed_count - count
            left_sum = observed_sum - share * sum(c * mean for c, mean in counts)
            planned_interactive = _interactive_mean(plan, day, hour, field)
            if left_count > 0 and left_sum >= 0 and planned_interactive is not None:
                interactive[key][0] += left_sum
                interactive[key][1] += left_count
                interactive[key][2] += planned_interactive * left_count
        deferrable_rps = _deferrable_rps(plan, day, hour)
        fits.append(
            HourFit(
                weekday=day,
                hour=hour,
                observed_rps=busiest[slot],
                planned_rps=expected.planned_load_rps + deferrable_rps,
                observed_input_mean=_mean(prompt),
                observed_output_mean=_mean(output),
                planned_input_mean=expected.input_tokens_mean,
                planned_output_mean=expected.output_tokens_mean,
                occurrences=seen[slot],
                planned_interactive_rps=expected.planned_load_rps,
                planned_deferrable_rps=deferrable_rps,
            )
        )

    def pooled(sums: Mapping[str, Sequence[float]], key: str) -> tuple[float, float] | tuple[None, None]:
        total, count, planned = sums[key]
        return (total / count, planned / count) if count > 0 else (None, None)

    observed_in, planned_in = pooled(weighted, "in")
    observed_out, planned_out = pooled(weighted, "out")
    interactive_inputs, interactive_outputs = pooled(interactive, "in"), pooled(interactive, "out")
    interactive_in, planned_interactive_in = interactive_inputs
    interactive_out, planned_interactive_out = interactive_outputs
    all_prompts = merge_deltas(d for slot in prompts for d in slot)
    input_p95 = delta_quantile(0.95, all_prompts)
    fit_hours = tuple(fits)
    suggested_rps, notes = _suggest_rps(plan, fit_hours)
    suggested_tokens = _suggest_tokens(
        plan, _ratio(interactive_in, planned_interactive_in), _ratio(interactive_out, planned_interactive_out)
    )
    text = _yaml(plan, fit_hours, suggested_rps, notes, suggested_tokens, interactive_inputs, interactive_outputs)
    return WeekFit(
        plan_name=plan.name,
        timezone=plan.timezone,
        hours=fit_hours,
        observed_input_mean=observed_in,
        observed_output_mean=observed_out,
        planned_input_mean=planned_in,
        planned_output_mean=planned_out,
        observed_input_p95=input_p95,
        interactive_input_mean=interactive_in,
        interactive_output_mean=interactive_out,
        planned_interactive_input_mean=planned_interactive_in,
        planned_interactive_output_mean=planned_interactive_out,
        suggested_rps=suggested_rps,
        suggested_tokens=suggested_tokens,
        yaml=text,
    )


def _rounded(value: float) -> float:
    return round(max(value, 0.0), RPS_DIGITS) + 0.0  # + 0.0: never a "-0.0"


def _suggest_rps(
    plan: Plan,
    hours: tuple[HourFit, ...],
) -> tuple[dict[str, tuple[tuple[float, ...], ...]], dict[str, list[str]]]:
    """Each interactive workload's 7 x 24, and per workload the notes its YAML carries."""
    interactive = plan.interactive
    notes: dict[str, list[str]] = {w.name: [] for w in interactive}
    tables: dict[str, list[list[float]]] = {w.name: [list(day) for day in w.rps_by_hour] for w in interactive}
    peak_total = sum(w.peak_rps for w in interactive)
    for fit in hours:
        observed = fit.observed_interactive_rps  # the plan's deferrable arrivals of the hour taken out
        if observed is None:
            continue
        d, h = fit.weekday, fit.hour
        if len(interactive) == 1:
            tables[interactive[0].name][d][h] = _rounded(observed)
            continue
        planned = sum(w.rps_by_hour[d][h] for w in interactive)
        for w in interactive:
            # Scaled by observed / planned of the hour; an hour the plan left empty is shared by peak rps.
            share = w.rps_by_hour[d][h] / planned if planned > 0 else w.peak_rps / peak_total
            tables[w.name][d][h] = _rounded(observed * share)
    result: dict[str, tuple[tuple[float, ...], ...]] = {}
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
    lines += [
        "    targets:",
        f"      ttft_p95_seconds: {number(g.ttft_p95_seconds)}",
        f"      tpot_p95_seconds: {number(g.tpot_p95_seconds)}",
    ]
    if g.e2e_p95_seconds is not None:
        lines.append(f"      e2e_p95_seconds: {number(g.e2e_p95_seconds)}")
    lines.append(f"      goodput_share: {number(g.goodput_share)}")
    lines += [f"    queue_seconds: {number(w.queue_seconds)}", f"    burstiness: {number(w.burstiness)}"]
    return lines


def _week_yaml(table: Sequence[Sequence[float]], hours: Sequence[HourFit]) -> list[str]:
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


def _yaml(
    plan: Plan,
    hours: Sequence[HourFit],
    suggested_rps: Mapping[str, Sequence[Sequence[float]]],
    notes: Mapping[str, Sequence[str]],
    suggested_tokens: Mapping[str, TokenStats],
    inputs: tuple[float, float] | tuple[None, None],  # (observed, planned) interactive mean, or neither
    outputs: tuple[float, float] | tuple[None, None],
) -> str:
    seen = sum(1 for h in hours if h.observed_rps is not None)
    deferrable = [w.name for w in plan.workloads if w.kind != "interactive"]
    lines = [
        f"# Suggested from the record: {seen} of 168 hours of the week observed, hours on {plan.timezone} (the plan's clock).",
        "# Arrivals: the busiest five minutes of each hour as recorded; an hour without data keeps the plan's value.",
    ]
    if deferrable:
        lines += [
            "# The record counts every request, deferrable ones too: each hour's interactive arrivals are the observed rps",
            f"# less the plan's deferrable arrivals in that hour ({', '.join(deferrable)}; the plan's schedule does not place",
            "# deferrable work in particular hours, so it is taken to arrive as its arrivals say). Token means likewise",
            "# leave out the deferrable requests the plan expects in each hour.",
        ]
    lines += ["# Paste over the plan's `workloads:` section.", "workloads:"]
    for w in plan.workloads:
        if w.kind != "interactive":
            lines.append(
                f"  # {w.name}: deferrable, copied from the plan unchanged (its arrivals were taken out of the observed above)"
            )
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
                which = "interactive" if deferrable else "mix"
                token_notes[key] = (
                    f"plan {number(getattr(w.tokens, key))}; observed {which} mean {observed:.0f} vs planned {planned:.0f}"
                )
        tokens = suggested_tokens[w.name]
        if tokens.output_max > w.tokens.output_max:
            token_notes["output_max"] = "raised to the suggested mean"
        lines += _workload_yaml(w, _week_yaml(suggested_rps[w.name], hours), tokens, token_notes)
    return "\n".join(lines) + "\n"
