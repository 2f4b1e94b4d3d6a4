"""Small builders for figures and plan expectations used by the fleet and console tests."""

from __future__ import annotations

from dataclasses import replace

from console.fleet.plan_now import PlanNow
from console.metrics.figures import Figures, FleetFigures


def replica(name: str = "r1", state: str = "up", **figures) -> Figures:
    return Figures(name=name, url=f"http://127.0.0.1:8000/{name}", state=state, **figures)


def fleet(*replicas: Figures, at: float = 1000.0, source_error: str = "", **totals) -> FleetFigures:
    return FleetFigures(
        window_seconds=60.0,
        source="scrape",
        replicas=tuple(replicas),
        fleet=Figures(name="fleet", url="", state="up", **totals),
        at=at,
        source_error=source_error,
    )


PLAN_NOW = PlanNow(
    plan_name="assistant",
    weekday=0,
    hour=10,
    replicas_scheduled=4,
    rps_per_replica=5.0,
    planned_capacity_rps=20.0,
    planned_load_rps=18.0,
    replicas_scheduled_soon=4,
    lead_time_seconds=600.0,
    redundancy=1,
    ttft_p95_target_seconds=1.5,
    tpot_p95_target_seconds=0.040,
    e2e_p95_target_seconds=None,
    input_tokens_mean=2000.0,
    output_tokens_mean=400.0,
    kv_budget_bytes=74e9,
    kv_bytes_per_token=327680.0,
    gpus_per_replica=2,
    gpu_price_per_hour=2.5,
    overflow_mode="bounded_queue",
    max_queue=64,
)


def plan_now(**changes) -> PlanNow:
    return replace(PLAN_NOW, **changes)
