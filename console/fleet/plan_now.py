"""What the plan expects at one moment: the figures the console compares the live fleet against.

Hours are read in UTC: a plan's 7 x 24 table is taken to be in UTC unless the
caller passes an offset (the plan's own clock), so the core never reads the
machine's time zone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

from console.plan.model import Plan
from console.plan.schedule import capacity_at
from console.plan.sizing import Sizing, size

HOUR = 3600.0
A_MONDAY = 1_704_067_200.0  # 2024-01-01 00:00 UTC, a Monday


def week_time(week_seconds: float) -> float:
    """A unix time at `week_seconds` into a week (Monday 00:00 first): for simulated clocks that run a plan's week."""
    return A_MONDAY + week_seconds


@dataclass(frozen=True)
class PlanNow:
    plan_name: str
    weekday: int  # 0 = Monday
    hour: int
    replicas_scheduled: int
    rps_per_replica: float  # measured at the goodput target (or estimated: capacity_estimated)
    planned_capacity_rps: float  # scheduled replicas x per-replica capacity
    planned_load_rps: float  # the plan's busiest-five-minutes rps for this hour, interactive workloads
    replicas_scheduled_soon: int  # the most the schedule asks for within the lead time
    lead_time_seconds: float
    redundancy: int
    ttft_p95_target_seconds: float | None
    tpot_p95_target_seconds: float | None
    e2e_p95_target_seconds: float | None
    input_tokens_mean: float | None
    output_tokens_mean: float | None
    kv_budget_bytes: float | None  # per replica
    kv_bytes_per_token: float | None
    gpus_per_replica: int | None
    gpu_price_per_hour: float
    overflow_mode: str
    max_queue: int
    # The per-replica capacity is the planner's estimate, not a measurement: what rests on it says so.
    capacity_estimated: bool = False


def _clock(at: float, utc_offset_seconds: float) -> tuple[int, int]:
    parts = time.gmtime(at + utc_offset_seconds)
    return parts.tm_wday, parts.tm_hour


def _strictest(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _weighted_mean(pairs: list[tuple[float, float]]) -> float | None:
    weight = sum(w for _, w in pairs)
    if weight <= 0:
        return None
    return sum(v * w for v, w in pairs) / weight


@lru_cache(maxsize=16)
def _sized(plan: Plan) -> Sizing:
    """The plan's sizing, once per plan: the console asks for the plan at every poll."""
    return size(plan)


def plan_now(plan: Plan, now: float, utc_offset_seconds: float = 0.0) -> PlanNow:
    weekday, hour = _clock(now, utc_offset_seconds)
    replicas, capacity = capacity_at(plan, weekday, hour)
    # Every hour that starts within the lead time: a replica for it must start loading now.
    soon = replicas
    boundary = (int((now + utc_offset_seconds) // HOUR) + 1) * HOUR - utc_offset_seconds
    while boundary <= now + plan.lead_time_seconds:
        soon = max(soon, capacity_at(plan, *_clock(boundary, utc_offset_seconds))[0])
        boundary += HOUR
    interactive = plan.interactive or plan.workloads
    load = sum(w.rps_by_hour[weekday][hour] for w in interactive)
    # The fleet serves every workload, deferrable ones included: the token means it should see are those of
    # this hour's mix (each workload by its rps now), or of the peak mix in an hour the plan leaves empty.
    weights = [(w, w.rps_by_hour[weekday][hour]) for w in plan.workloads]
    if sum(k for _, k in weights) <= 0:
        weights = [(w, w.peak_rps) for w in plan.workloads]
    sized = _sized(plan)
    return PlanNow(
        plan_name=plan.name,
        weekday=weekday,
        hour=hour,
        replicas_scheduled=int(replicas),
        rps_per_replica=plan.capacity.rps_per_replica,
        capacity_estimated=plan.capacity.estimated,
        planned_capacity_rps=float(capacity),
        planned_load_rps=float(load),
        replicas_scheduled_soon=int(soon),
        lead_time_seconds=plan.lead_time_seconds,
        redundancy=plan.redundancy,
        ttft_p95_target_seconds=_strictest([w.targets.ttft_p95_seconds for w in interactive]),
        tpot_p95_target_seconds=_strictest([w.targets.tpot_p95_seconds for w in interactive]),
        e2e_p95_target_seconds=_strictest([w.targets.e2e_p95_seconds for w in interactive]),
        input_tokens_mean=_weighted_mean([(w.tokens.input_mean, k) for w, k in weights]),
        output_tokens_mean=_weighted_mean([(w.tokens.output_mean, k) for w, k in weights]),
        kv_budget_bytes=sized.kv_budget_bytes,
        kv_bytes_per_token=sized.kv_bytes_per_token,
        gpus_per_replica=sized.gpus_per_replica,
        gpu_price_per_hour=plan.gpu.price_per_hour,
        overflow_mode=plan.overflow.mode,
        max_queue=plan.overflow.max_queue,
    )
