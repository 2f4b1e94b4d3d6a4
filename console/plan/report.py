"""The `capcon plan` report: every figure with its inputs and units, ideal beside expected; and its JSON form."""

from __future__ import annotations

import math
import textwrap
from dataclasses import asdict, fields
from itertools import groupby
from typing import Any

from console.plan import units
from console.plan.schedule import (
    HOURS_PER_MONTH,
    IDLE_SHARE_OF_PEAK,
    MINIMUM_REPLICAS,
    WEEKEND_DAYS_PER_MONTH,
    WORKING_DAYS_PER_MONTH,
    Schedule,
)
from console.plan.sizing import FLOP_PER_PARAMETER_PER_TOKEN, Sizing

# JSON keys of the schedule (beside every Sizing field).
SCHEDULE_KEYS = (
    "replicas_by_hour",
    "gpu_hours_month_schedule",
    "gpu_hours_month_always_on",
    "saving_share",
    "gpu_hours_week_schedule",
    "cost_month_schedule",
    "cost_month_always_on",
    "scale_ups",
    "idle_windows",
    "deferrable",
)

# The operating point at the per-replica peak load: ideal under these names, expected_* at the efficiencies.
_OPERATING_KEYS = (
    "prefill_seconds",
    "queue_and_prefill_seconds",
    "time_in_system_seconds",
    "concurrency",
    "kv_needed_bytes",
    "kv_margin_share",
    "decode_step_seconds",
    "stream_tokens_per_second",
    "aggregate_decode_tokens_per_second",
    "rps_at_tpot_target",
    "prefill_compute_share",
)
# Keys of `capcon plan --json` that rest on the capacity per replica (the replica count, the load each
# replica carries at the peak, the tensor-parallel size chosen for it, cost, the schedule): with an
# estimated capacity, `estimated_keys` lists them. tests/plan/test_estimate.py checks the list against
# what actually moves when the capacity does.
ESTIMATED_KEYS = (
    "rps_per_replica_measured",
    "per_replica_peak_rps",
    "gpus_per_replica",
    "usable_bytes_per_replica",
    "kv_budget_bytes",
    "batch_limit",
    "single_stream_ceiling_tokens_per_second",
    "required_decode_tokens_per_second",
    "prefill_flops_per_second",
    "replicas_for_peak",
    "replicas_with_redundancy",
    "fleet_cost_per_hour",
    "cost_per_million_tokens_peak",
    "cost_per_million_tokens_mean",
    *_OPERATING_KEYS,
    *(f"expected_{key}" for key in (*_OPERATING_KEYS, "batch_limited")),
    "expected_compute_rps",
    "roofline_rps",
    "roofline_limit",
    "warnings",
    *SCHEDULE_KEYS,
)

_LABEL = 24
_NOTE_WIDTH = 96
_VALUE = 15


def _finite(value: Any) -> Any:
    """JSON has no infinity or NaN: an incomputable figure is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_json(sizing: Sizing, schedule: Schedule | None = None) -> dict:
    """One flat object: every Sizing field (SI units), plus the schedule's keys when given."""
    out = {f.name: getattr(sizing, f.name) for f in fields(sizing)}
    out["warnings"] = list(sizing.warnings)
    if schedule is not None:
        whole = asdict(schedule)
        out.update({key: whole[key] for key in SCHEDULE_KEYS})
    out["estimated_keys"] = [key for key in ESTIMATED_KEYS if key in out] if sizing.capacity_estimated else []
    return _finite(out)


# Text -----------------------------------------------------------------------------------------


def _row(label: str, value: str, inputs: str) -> str:
    return f"  {label:<{_LABEL}}{value:<{_VALUE}}{inputs}".rstrip()


def _pair(label: str, ideal: str, expected: str, inputs: str) -> str:
    return f"  {label:<{_LABEL}}{ideal:<{_VALUE}}{expected:<{_VALUE}}{inputs}".rstrip()


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _days(weekdays: list[int]) -> str:
    """[0, 1, 2, 4] -> 'Mon-Wed, Fri'."""
    runs, names = [], units.DAY_NAMES
    for _, group in groupby(enumerate(sorted(weekdays)), key=lambda pair: pair[1] - pair[0]):
        days = [day for _, day in group]
        runs.append(names[days[0]] if len(days) == 1 else f"{names[days[0]]}-{names[days[-1]]}")
    return ", ".join(runs)


def _compute_words(s: Sizing) -> str:
    """'BF16', or 'FP8 (the fp8 weights' GEMMs)': the rate the report computes prefill at, and why."""
    name = s.compute_precision.upper()
    if s.compute_precision in ("fp8", "int8") and s.weight_precision in ("fp8", "int8"):
        return f"{name} (W8A8: the {s.weight_precision} weights' GEMMs run at 8 bits)"
    if s.compute_precision in ("bf16", "fp16") and s.weight_precision in ("fp8", "int8", "int4"):
        return f"{name} ({s.weight_precision} weights dequantised: W{8 if s.weight_precision != 'int4' else 4}A16)"
    return name


def _header(s: Sizing, source: str) -> list[str]:
    stream_target = 1.0 / s.tpot_target_seconds
    return [
        f"capcon plan: {s.plan_name}" + (f"  ({source})" if source else ""),
        f"  model     {s.model_name}: {units.parameters(s.parameters)} parameters, "
        f"{s.weight_precision} weights, {s.kv_precision} KV cache",
        f"  GPU       {s.gpu_name}: {units.data(s.gpu_memory_bytes)}, {units.bandwidth(s.gpu_bandwidth_bytes_per_second)}, "
        f"{units.flops(s.gpu_flops_per_second)} dense {_compute_words(s)}, {units.dollars(s.gpu_price_per_hour)} per GPU-hour",
        f"  traffic   peak {units.rps(s.peak_rps)} ({units.slot(s.peak_weekday, s.peak_hour)}), mean "
        f"{units.rps(s.mean_rps)}, interactive; {s.input_tokens_mean:,.0f} input and "
        f"{s.output_tokens_mean:,.0f} output tokens per request (mean)",
        f"  targets   p95 TTFT {units.seconds(s.ttft_target_seconds)}, p95 TPOT {units.seconds(s.tpot_target_seconds)} "
        f"({units.tokens_rate(stream_target)} per stream)",
        *_capacity(s),
        "  method    docs/method.md explains every figure below and how to measure the capacity",
    ]


def _capacity(s: Sizing) -> list[str]:
    rps = units.rps(s.rps_per_replica_measured)
    if not s.capacity_estimated:
        return [
            f"  capacity  {rps} per replica at the goodput target, {s.capacity_origin} (source: {s.capacity_source})"
        ]
    note = textwrap.wrap(
        f"{s.capacity_note}. Every figure marked ~ (replicas, cost, the schedule) and the per-replica load rest on it.",
        width=_NOTE_WIDTH,
        break_on_hyphens=False,
        break_long_words=False,
    )
    band = (
        f" ({units.rps(s.capacity_low).removesuffix(' rps')}-{units.rps(s.capacity_high).removesuffix(' rps')})"
        if s.capacity_low is not None and s.capacity_high is not None
        else ""
    )
    return [
        f"  capacity  ~{rps}{band} per replica at the goodput target: ESTIMATED, not measured:",
        *(f"            {line}" for line in note),
    ]


def _approx(s: Sizing, text: str) -> str:
    """A figure that rests on the capacity, marked ~ when the capacity is an estimate."""
    return f"~{text}" if s.capacity_estimated else text


def _memory(s: Sizing) -> list[str]:
    tp = s.gpus_per_replica
    how = (
        "tensor_parallel auto: smallest of 1, 2, 4, 8 whose KV budget holds the peak's KV"
        if s.tensor_parallel_auto
        else "tensor_parallel set in the plan"
    )
    overhead = f" - {units.data(s.overhead_bytes_per_gpu)} overhead" if s.overhead_bytes_per_gpu else ""
    return [
        "",
        "Memory (one replica)",
        _row(
            "weights",
            units.data(s.weight_bytes),
            f"{units.parameters(s.parameters)} parameters x {s.weight_bytes_per_parameter:g} B ({s.weight_precision})",
        ),
        _row("GPUs per replica", str(tp), how),
        _row(
            "usable memory",
            units.data(s.usable_bytes_per_replica),
            f"{tp} x ({units.data(s.gpu_memory_bytes)} x {s.usable_memory_share:g}{overhead})",
        ),
        _row(
            "KV per token",
            f"{s.kv_bytes_per_token:,.0f} B",
            f"2 (K, V) x {s.layers} layers x {s.kv_heads} KV heads x {s.head_dim} x {s.kv_bytes_per_element} B "
            f"({s.kv_precision}) = {s.kv_bytes_per_token / 1024:,.0f} KiB",
        ),
        _row(
            "KV budget",
            units.data(s.kv_budget_bytes),
            f"{units.data(s.usable_bytes_per_replica)} usable - {units.data(s.weight_bytes)} weights; "
            f"holds {max(s.batch_limit, 0):,} requests of {s.tokens_held_per_request:,.0f} tokens "
            f"(with max_num_seqs {s.max_num_seqs})",
        ),
    ]


def _peak(s: Sizing) -> list[str]:
    tp, rps = s.gpus_per_replica, s.per_replica_peak_rps
    eff_b, eff_c = f"x {s.bandwidth_efficiency:g}", f"x {s.compute_efficiency:g}"
    per_request = s.tokens_held_per_request * s.kv_bytes_per_token
    ideal_kv_share = min(s.concurrency, max(s.batch_limit, 1)) * per_request / tp
    flop_per_token = FLOP_PER_PARAMETER_PER_TOKEN * s.parameters
    replica_flops = tp * s.gpu_flops_per_second
    dash = "-"
    return [
        "",
        f"At the peak, per replica ({units.rps(rps)} on each of {s.replicas_for_peak})",
        _pair("", "ideal", "expected", f"inputs (expected: bandwidth {eff_b}, compute {eff_c})"),
        _pair(
            "queue + prefill",
            units.seconds(s.queue_and_prefill_seconds),
            units.seconds(s.expected_queue_and_prefill_seconds),
            f"queue {units.seconds(s.queue_seconds)} + {s.input_tokens_mean:,.0f} tokens x "
            f"{units.flops(flop_per_token).replace('/s', '')} / {units.flops(replica_flops)}",
        ),
        _pair(
            "time in system",
            units.seconds(s.time_in_system_seconds),
            units.seconds(s.expected_time_in_system_seconds),
            f"queue + prefill + {s.output_tokens_mean:,.0f} tokens / per-stream speed (fixed point)",
        ),
        _pair(
            "concurrency",
            units.count(s.concurrency),
            units.count(s.expected_concurrency),
            f"Little's law: {units.rps(rps)} x time in system",
        ),
        _pair(
            "KV needed",
            units.data(s.kv_needed_bytes),
            units.data(s.expected_kv_needed_bytes),
            f"concurrency x {s.tokens_held_per_request:,.0f} tokens (input + output) x {s.kv_bytes_per_token:,.0f} B",
        ),
        _pair(
            "KV margin",
            units.share(s.kv_margin_share),
            units.share(s.expected_kv_margin_share),
            f"1 - needed / {units.data(s.kv_budget_bytes)} budget",
        ),
        _pair(
            "decode step",
            units.seconds(s.decode_step_seconds),
            units.seconds(s.expected_decode_step_seconds),
            f"({units.data(s.weight_bytes / tp)} weights + {units.data(ideal_kv_share)} live KV) per GPU / "
            f"{units.bandwidth(s.gpu_bandwidth_bytes_per_second)}",
        ),
        _pair(
            "per stream",
            units.tokens_rate(s.stream_tokens_per_second),
            units.tokens_rate(s.expected_stream_tokens_per_second),
            f"1 / step; the TPOT target needs {units.tokens_rate(1 / s.tpot_target_seconds)}",
        ),
        _pair(
            "aggregate decode",
            units.tokens_rate(s.aggregate_decode_tokens_per_second),
            units.tokens_rate(s.expected_aggregate_decode_tokens_per_second),
            f"requests in the batch (at most {max(s.batch_limit, 0):,}) x per stream",
        ),
        _pair(
            "decode needed",
            units.tokens_rate(s.required_decode_tokens_per_second),
            dash,
            f"{units.rps(rps)} x {s.output_tokens_mean:,.0f} output tokens",
        ),
        _pair(
            "rps at TPOT target",
            units.rps(s.rps_at_tpot_target),
            units.rps(s.expected_rps_at_tpot_target),
            "decode roofline only; prefill and queueing lower it, the plan's capacity decides",
        ),
        _pair(
            "roofline capacity",
            dash,
            units.rps(s.roofline_rps),
            f"the lower of the above and compute: {units.rps(s.expected_compute_rps)} whose "
            f"{s.input_tokens_mean + s.output_tokens_mean:,.0f} tokens each fill {tp} x "
            f"{units.flops(s.gpu_flops_per_second)} x {s.compute_efficiency:g}",
        ),
        _pair(
            "prefill load",
            units.flops(s.prefill_flops_per_second),
            dash,
            f"{units.rps(rps)} x {s.input_tokens_mean:,.0f} input tokens x 2 FLOP x {units.parameters(s.parameters)}",
        ),
        _pair(
            "prefill share",
            units.share(s.prefill_compute_share),
            units.share(s.expected_prefill_compute_share),
            f"of {tp} x {units.flops(s.gpu_flops_per_second)}",
        ),
        _pair(
            "single-stream ceiling",
            units.tokens_rate(s.single_stream_ceiling_tokens_per_second),
            dash,
            f"{tp} x {units.bandwidth(s.gpu_bandwidth_bytes_per_second)} / {units.data(s.weight_bytes)} weights",
        ),
    ]


def _fleet(s: Sizing) -> list[str]:
    return [
        "",
        "Fleet and cost",
        _row(
            "replicas for the peak",
            _approx(s, str(s.replicas_for_peak)),
            f"ceil({units.rps(s.peak_rps)} / {units.rps(s.rps_per_replica_measured)} per replica, {s.capacity_origin})",
        ),
        _row("with redundancy", _approx(s, str(s.replicas_with_redundancy)), f"+ {s.redundancy} (N+{s.redundancy})"),
        _row(
            "fleet cost",
            _approx(s, f"{units.dollars(s.fleet_cost_per_hour)}/h"),
            f"{s.replicas_with_redundancy} replicas x {_gpus(s.gpus_per_replica)} x "
            f"{units.dollars(s.gpu_price_per_hour)} per GPU-hour",
        ),
        _row(
            "per M tokens, peak",
            _approx(s, units.dollars(s.cost_per_million_tokens_peak)),
            f"{units.dollars(s.fleet_cost_per_hour)} / {s.output_tokens_per_hour_peak / 1e6:,.2f} M output tokens/h "
            f"({units.rps(s.peak_rps)} x {s.output_tokens_mean:,.0f} x 3,600 s)",
        ),
        _row(
            "per M tokens, mean",
            _approx(s, units.dollars(s.cost_per_million_tokens_mean)),
            f"{units.dollars(s.fleet_cost_per_hour)} / {s.output_tokens_per_hour_mean / 1e6:,.2f} M output tokens/h "
            f"at the mean {units.rps(s.mean_rps)}",
        ),
    ]


def _warnings(s: Sizing) -> list[str]:
    if not s.warnings:
        return ["", "Warnings: none at the expected figures."]
    return [
        "",
        "Warnings (judged on the expected figures)",
        *(f"  ! {w}" for w in s.warnings),
        "  What each warning means and what to change: docs/method.md, 'Plan warnings'.",
    ]


def _schedule(sch: Schedule) -> list[str]:
    lines = [
        "",
        f"Week schedule: replicas serving each hour = ceil(interactive rps / "
        f"{'~' if sch.capacity_estimated else ''}{units.rps(sch.rps_per_replica)}) "
        f"+ {sch.redundancy}, at least {MINIMUM_REPLICAS}"
        + (" (~: an estimated capacity, so every count below is an estimate)" if sch.capacity_estimated else ""),
        "       " + "".join(f"{h:>3}" for h in range(24)),
    ]
    for day, row in zip(units.DAY_NAMES, sch.replicas_by_hour):
        lines.append(f"  {day}  " + "".join(f"{n:>3}" for n in row))
    lead = f"{sch.lead_time_seconds / 60:g} min"
    if sch.scale_ups:
        lines.append(f"Scale-ups, started {lead} ahead so replicas serve when the hour starts:")
        scale_up = lambda up: (up.start_minute_of_day, up.ready_hour, up.from_replicas, up.to_replicas)  # noqa: E731 - one key for sorted() and groupby()
        for (minute, ready, before, after), group in groupby(sorted(sch.scale_ups, key=scale_up), key=scale_up):
            days = _days([up.start_weekday for up in group])
            lines.append(
                f"  {days} {minute // 60:02d}:{minute % 60:02d} start {after - before} "
                f"({before} -> {after}), serving from {ready:02d}:00"
            )
    else:
        lines.append("Scale-ups: none, the same replicas all week.")
    lines += [
        f"GPU-hours a month ({HOURS_PER_MONTH:g} h: {WORKING_DAYS_PER_MONTH:g} working days and "
        f"{WEEKEND_DAYS_PER_MONTH:.2f} weekend days; {_gpus(sch.gpus_per_replica)} per replica)",
        _row(
            "on the schedule",
            f"{sch.gpu_hours_month_schedule:,.0f}",
            f"{units.dollars(sch.cost_month_schedule)} a month, including each scale-up's {lead} of loading",
        ),
        _row(
            "24/7 at the peak",
            f"{sch.gpu_hours_month_always_on:,.0f}",
            f"{units.dollars(sch.cost_month_always_on)} a month ({max(map(max, sch.replicas_by_hour))} replicas "
            f"x {HOURS_PER_MONTH:g} h)",
        ),
        _row("saving", units.share(sch.saving_share), "1 - schedule / 24/7"),
    ]
    lines.append(
        f"Idle hours (interactive rps at most {IDLE_SHARE_OF_PEAK:.0%} of its peak), spare capacity on the "
        f"scheduled replicas:"
    )
    window = lambda w: (w.hour, w.hours, w.spare_rps_min)  # noqa: E731 - one key for sorted() and groupby()
    for (hour, hours, spare), windows in groupby(sorted(sch.idle_windows, key=window), key=window):
        days = _days([w.weekday for w in windows])
        lines.append(f"  {days} from {hour:02d}:00 for {hours} h, at least {units.rps(spare)} spare")
    if not sch.idle_windows:
        lines.append("  none")
    d = sch.deferrable
    if d is not None:
        verdict = (
            f"fits, in about {d.idle_hours_needed:,.0f} idle hours a week"
            if d.fits
            else "does not fit: it needs replicas of its own or a smaller batch"
        )
        if d.basis == "throughput" and d.replica_hours_week is not None and d.gpu_hours_week is not None:
            lines.append(
                f"Deferrable work ({', '.join(d.workloads)}): {d.output_tokens_per_week / 1e6:,.1f} M output tokens a "
                f"week at the measured batch throughput: {d.replica_hours_week:,.1f} replica-hours "
                f"({d.gpu_hours_week:,.1f} GPU-hours) against {d.spare_replica_hours_week_idle or 0:,.1f} spare in "
                f"idle hours: {verdict}"
            )
        else:
            lines.append(
                f"Deferrable work ({', '.join(d.workloads)}): {d.equivalent_requests_per_week:,.0f} requests a week "
                f"in interactive equivalents (by tokens per request) against {d.spare_requests_per_week_idle:,.0f} "
                f"spare in idle hours: {verdict}; `capcon bench --throughput --write-plan` sizes it in GPU-hours"
            )
    return lines


def render(sizing: Sizing, schedule: Schedule | None = None, source: str = "") -> str:
    lines = [*_header(sizing, source), *_memory(sizing), *_peak(sizing), *_fleet(sizing), *_warnings(sizing)]
    if schedule is not None:
        lines += _schedule(schedule)
    return "\n".join(lines) + "\n"
