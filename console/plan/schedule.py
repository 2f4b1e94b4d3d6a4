"""The week's replica schedule: replicas per hour, scale-ups ahead of the ramp, GPU-hours.

The method is in docs/method.md, 'The week's schedule'.

How a month is counted: 730 hours (8,760 / 12), of which 22 working days (Monday to
Friday, as in worked example B) and the remaining 202 hours, 8.42 days, weekend. A
weekday of the 7 x 24 table counts 22 / 5 times a month, a weekend day 8.42 / 2 times.
Hours are the plan's own clock (the table's hours); a scale-up is moved earlier by the
lead time so the replicas are serving when the hour starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from console.plan.model import Plan, Workload
from console.plan.sizing import interactive_demand, replicas_for, size

HOURS_PER_MONTH = 730.0
WORKING_DAYS_PER_MONTH = 22.0
WEEKEND_DAYS_PER_MONTH = (HOURS_PER_MONTH - WORKING_DAYS_PER_MONTH * 24) / 24
# How many times each day of the table occurs in a month (Monday first).
DAYS_PER_MONTH_BY_WEEKDAY = (WORKING_DAYS_PER_MONTH / 5,) * 5 + (WEEKEND_DAYS_PER_MONTH / 2,) * 2
IDLE_SHARE_OF_PEAK = 0.5  # an hour whose interactive rps is at most this share of the peak is idle
MINIMUM_REPLICAS = 2  # one serving plus one spare, whatever the traffic


@dataclass(frozen=True)
class ScaleUp:
    ready_weekday: int  # when the added replicas must be serving
    ready_hour: int
    start_weekday: int  # when they must start loading: ready time minus the lead time
    start_minute_of_day: int
    from_replicas: int
    to_replicas: int


@dataclass(frozen=True)
class IdleWindow:
    weekday: int  # first hour of a run of idle hours
    hour: int
    hours: int
    spare_rps_min: float  # the least spare capacity in any of its hours


@dataclass(frozen=True)
class DeferrableFit:
    workloads: tuple[str, ...]
    # Deferrable requests counted in interactive-equivalents: scaled by their tokens per
    # request (input + output) against the interactive mean, since capacity is measured there.
    equivalent_requests_per_week: float
    spare_requests_per_week_idle: float  # spare capacity x 3,600 s over the idle hours
    fits: bool
    idle_hours_needed: float  # at the idle hours' mean spare rate
    # "throughput" when the plan has one replica's measured offline throughput (capacity.
    # throughput_tokens_per_second): the work is then sized in replica-hours of batch decoding, and
    # `fits` and `idle_hours_needed` follow those; else "equivalents" (the two figures above).
    basis: str = "equivalents"
    output_tokens_per_week: float = 0.0
    replica_hours_week: float | None = None  # deferrable output tokens / throughput
    gpu_hours_week: float | None = None  # x GPUs per replica
    spare_replica_hours_week_idle: float | None = None  # replicas the schedule has beyond the interactive need


@dataclass(frozen=True)
class Schedule:
    plan_name: str
    rps_per_replica: float
    capacity_estimated: bool  # every replica count and cost below rests on an estimated capacity
    redundancy: int
    lead_time_seconds: float
    gpus_per_replica: int
    interactive_rps_by_hour: tuple[tuple[float, ...], ...]
    replicas_by_hour: tuple[tuple[int, ...], ...]  # serving, 7 x 24, Monday first
    scale_ups: tuple[ScaleUp, ...]
    gpu_hours_week_schedule: float
    gpu_hours_month_schedule: float
    gpu_hours_month_always_on: float
    saving_share: float
    cost_month_schedule: float
    cost_month_always_on: float
    idle_windows: tuple[IdleWindow, ...]
    deferrable: DeferrableFit | None


def replicas_needed(plan: Plan, rps: float) -> int:
    """ceil(rps / measured capacity) plus redundancy, never below one serving plus one spare."""
    serving = max(1, replicas_for(rps, plan.capacity.rps_per_replica))
    return max(MINIMUM_REPLICAS, serving + plan.redundancy)


def interactive_rps(plan: Plan, weekday: int, hour: int) -> float:
    return sum(w.rps_by_hour[weekday][hour] for w in plan.interactive)


def capacity_at(plan: Plan, weekday: int, hour: int) -> tuple[int, float]:
    """(replicas the schedule has serving, their planned rps capacity) at weekday 0-6 (Monday 0), hour 0-23."""
    replicas = replicas_needed(plan, interactive_rps(plan, weekday % 7, hour % 24))
    return replicas, replicas * plan.capacity.rps_per_replica


def _scale_ups(table: tuple[tuple[int, ...], ...], lead_time_seconds: float) -> tuple[ScaleUp, ...]:
    found = []
    lead_minutes = round(lead_time_seconds / 60)
    for slot in range(7 * 24):
        weekday, hour = divmod(slot, 24)
        before = table[(slot - 1) // 24 % 7][(slot - 1) % 24]
        now = table[weekday][hour]
        if now > before:
            start = (slot * 60 - lead_minutes) % (7 * 24 * 60)
            start_day, start_minute = divmod(start, 24 * 60)
            found.append(ScaleUp(weekday, hour, start_day, start_minute, before, now))
    return tuple(found)


def _idle_windows(
    plan: Plan, rps: Sequence[Sequence[float]], table: Sequence[Sequence[int]], peak: float
) -> tuple[IdleWindow, ...]:
    capacity = plan.capacity.rps_per_replica
    idle = [rps[s // 24][s % 24] <= IDLE_SHARE_OF_PEAK * peak for s in range(7 * 24)]
    if all(idle):
        starts = [0]
    else:
        starts = [s for s in range(7 * 24) if idle[s] and not idle[s - 1]]
    windows = []
    for start in starts:
        length, spare = 0, float("inf")
        while length < 7 * 24 and idle[(start + length) % (7 * 24)]:
            day, hour = divmod((start + length) % (7 * 24), 24)
            spare = min(spare, table[day][hour] * capacity - rps[day][hour])
            length += 1
        windows.append(IdleWindow(start // 24, start % 24, length, spare))
    return tuple(windows)


def _deferrable_fit(
    plan: Plan, rps: Sequence[Sequence[float]], table: Sequence[Sequence[int]], peak: float, gpus: int
) -> DeferrableFit | None:
    deferrable: tuple[Workload, ...] = tuple(w for w in plan.workloads if w.kind == "deferrable")
    if not deferrable:
        return None
    demand = interactive_demand(plan)
    interactive_tokens = demand.input_tokens_mean + demand.output_tokens_mean
    equivalent = sum(
        w.mean_rps * 7 * 24 * 3600 * (w.tokens.input_mean + w.tokens.output_mean) / interactive_tokens
        for w in deferrable
    )
    capacity = plan.capacity.rps_per_replica
    spare_rates = [
        table[d][h] * capacity - rps[d][h]
        for d in range(7)
        for h in range(24)
        if rps[d][h] <= IDLE_SHARE_OF_PEAK * peak
    ]
    spare = sum(spare_rates) * 3600
    mean_rate = sum(spare_rates) / len(spare_rates) if spare_rates else 0.0
    fit = DeferrableFit(
        workloads=tuple(w.name for w in deferrable),
        equivalent_requests_per_week=equivalent,
        spare_requests_per_week_idle=spare,
        fits=equivalent <= spare,
        idle_hours_needed=equivalent / (mean_rate * 3600) if mean_rate > 0 else float("inf"),
        output_tokens_per_week=sum(w.mean_rps * 7 * 24 * 3600 * w.tokens.output_mean for w in deferrable),
    )
    throughput = plan.capacity.throughput_tokens_per_second
    if throughput is None:
        return fit
    # Batch work decodes at the replica's offline throughput on whatever share of a replica the
    # interactive load leaves free in an idle hour.
    replica_hours = fit.output_tokens_per_week / throughput / 3600
    spare_replicas = [rate / capacity for rate in spare_rates]
    spare_hours = sum(spare_replicas)
    mean_spare = spare_hours / len(spare_replicas) if spare_replicas else 0.0
    return replace(
        fit,
        basis="throughput",
        replica_hours_week=replica_hours,
        gpu_hours_week=replica_hours * gpus,
        spare_replica_hours_week_idle=spare_hours,
        fits=replica_hours <= spare_hours,
        idle_hours_needed=replica_hours / mean_spare if mean_spare > 0 else float("inf"),
    )


def schedule(plan: Plan) -> Schedule:
    gpus = size(plan).gpus_per_replica
    rps = tuple(tuple(interactive_rps(plan, d, h) for h in range(24)) for d in range(7))
    table = tuple(tuple(replicas_needed(plan, rps[d][h]) for h in range(24)) for d in range(7))
    ups = _scale_ups(table, plan.lead_time_seconds)
    # Replicas started early for a scale-up run (and cost) the lead time before they serve.
    warmup_by_day = [0.0] * 7
    for up in ups:
        warmup_by_day[up.ready_weekday] += (up.to_replicas - up.from_replicas) * plan.lead_time_seconds / 3600
    day_gpu_hours = [(sum(table[d]) + warmup_by_day[d]) * gpus for d in range(7)]
    month = sum(hours * times for hours, times in zip(day_gpu_hours, DAYS_PER_MONTH_BY_WEEKDAY))
    always_on = max(map(max, table)) * gpus * HOURS_PER_MONTH
    peak = max(map(max, rps))
    price = plan.gpu.price_per_hour
    return Schedule(
        plan_name=plan.name,
        rps_per_replica=plan.capacity.rps_per_replica,
        capacity_estimated=plan.capacity.estimated,
        redundancy=plan.redundancy,
        lead_time_seconds=plan.lead_time_seconds,
        gpus_per_replica=gpus,
        interactive_rps_by_hour=rps,
        replicas_by_hour=table,
        scale_ups=ups,
        gpu_hours_week_schedule=sum(day_gpu_hours),
        gpu_hours_month_schedule=month,
        gpu_hours_month_always_on=always_on,
        saving_share=1.0 - month / always_on,
        cost_month_schedule=month * price,
        cost_month_always_on=always_on * price,
        idle_windows=_idle_windows(plan, rps, table, peak),
        deferrable=_deferrable_fit(plan, rps, table, peak, gpus),
    )
