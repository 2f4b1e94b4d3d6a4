"""A fleet view as JSON: each replica's figures and the fleet's, the plan beside them, and the flags.

The form `watch --once --json` prints, one object per fleet. Unknown is null, never NaN; the keys
are the same with or without a plan. The history file keeps figures in a form of its own
(`Figures.to_json`), read back by `Figures.from_json`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from console.ahead.accuracy import ForecastAccuracy
from console.ahead.forecast import HORIZONS_MINUTES, Forecast
from console.fleet import slo
from console.fleet.client import client_json
from console.fleet.gpus import ReplicaGpu
from console.fleet.view import Comparison, FleetView
from console.metrics.attainment import quantile_bucket
from console.metrics.figures import Figures, FleetFigures
from console.plan.model import DAYS

FIGURE_FIELDS = (
    "name",
    "url",
    "state",
    "requests_per_second",
    "prompt_tokens_per_second",
    "generation_tokens_per_second",
    "running",
    "waiting",
    "kv_usage",
    "preemptions_per_second",
    "prefix_hit_share",
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "ttft_p99_seconds",
    "itl_p95_seconds",
    "tpot_p95_seconds",
    "e2e_p95_seconds",
    "queue_p95_seconds",
    "mean_input_tokens",
    "mean_output_tokens",
)


def figures_json(figures: Figures) -> dict:
    out = {}
    for key in FIGURE_FIELDS:
        value = getattr(figures, key)
        out[key] = None if isinstance(value, float) and not math.isfinite(value) else value
    out["kv_usage_by_engine"] = dict(figures.kv_usage_by_engine)
    out["kv_capacity_tokens"] = figures.kv_capacity_tokens
    out["kv_capacity_tokens_by_engine"] = dict(figures.kv_capacity_tokens_by_engine)
    out["requests_per_second_by_reason"] = dict(figures.requests_per_second_by_reason)
    out["rejections_per_second"] = figures.rejections_per_second
    out["data_age_seconds"] = figures.data_age_seconds
    out["error"] = figures.error or None
    out["p95_buckets_seconds"] = p95_buckets_json(figures)
    return out


def _bounds(pair: tuple[float, float] | None) -> list[float | None] | None:
    """A bucket as [lower, upper]; upper null past the last bound (+Inf is not JSON)."""
    if pair is None:
        return None
    return [pair[0], pair[1] if math.isfinite(pair[1]) else None]


def p95_buckets_json(figures: Figures) -> dict:
    """The bucket holding each latency p95, by histogram: the p95 figures are interpolated inside it."""
    return {name: _bounds(quantile_bucket(b, slo.QUANTILE)) for name, b in sorted(figures.latency_buckets.items())}


def slo_json(view: FleetView | None) -> list[dict]:
    """Each latency target of the plan judged on the window's buckets (console.fleet.slo); empty without a plan."""
    if view is None:
        return []
    found = []
    for check in view.slo_checks:
        j = check.judgement
        found.append(
            {
                "figure": check.key,
                "judged_on": "clients" if check.label.startswith("client") else "replicas",
                "target_seconds": check.target,
                "p95_seconds": _rounded(check.value, 4),
                "p95_bucket_seconds": _bounds(check.percentile),
                "verdict": check.verdict,
                "over_share": [_rounded(j.over_low, 4), _rounded(j.over_high, 4)] if j else None,
                "attainment": [_rounded(a, 4) for a in j.attainment] if j else None,
                "target_bucket_seconds": _bounds(j.bucket) if j else None,
                "fix": slo.fix(check) if check.verdict == "undetermined" else None,
            }
        )
    return found


def gpu_unpaired() -> dict:
    return ReplicaGpu(how="not in the poll the GPU pages were paired with").as_dict()


def comparison_json(c: Comparison) -> dict:
    return {
        "label": c.label,
        "planned": c.planned,
        "actual": c.actual,
        "unit": c.unit,
        "status": c.status,
        "note": c.note or None,
    }


def flags_json(view: FleetView | None, iso_time: Callable[[float], str]) -> dict:
    """Raised flags, and the conditions that hold but have not lasted their minimum duration yet.

    `iso_time` writes a moment as the caller's readers expect it (the local zone's ISO 8601).
    """
    if view is None:
        return {"active": [], "pending": []}
    todo = {flag_id: tracker.todo for flag_id, tracker in view.flag_state.trackers.items()}
    active = [
        {
            "kind": f.kind,
            "subject": f.subject,
            "severity": f.severity,
            "since": f.since,
            "since_time": iso_time(f.since),
            "why": f.why,
            "todo": f.todo,
        }
        for f in view.flags
    ]
    pending = [
        {
            "kind": p.kind,
            "subject": p.subject,
            "severity": p.severity,
            "since": p.since,
            "since_time": iso_time(p.since),
            "held_seconds": round(max(view.now - p.since, 0.0), 3),
            "needed_seconds": p.needed_seconds,
            "why": p.why,
            "todo": todo.get(p.id),
        }
        for p in view.pending
    ]
    return {"active": active, "pending": pending}


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def forecast_json(forecast: Forecast | None, accuracy: ForecastAccuracy | None = None) -> dict:
    """Arrivals ahead (console.ahead.forecast): the same keys whether or not there is a forecast, unknown as null.

    `trend_samples` says how many request-rate samples the trend rests on (`--once` has one or two, so the
    forecast leans on the plan); `basis` says what it blends: "trend+plan", "trend" (no plan), "plan" (no
    samples) or "none". `backtest_mae_rps`: how wrong the forecast has been at each horizon on this fleet's
    recorded last week (console.ahead.accuracy), null without a history file or with too little in it.
    """
    horizons = forecast.horizon_minutes if forecast is not None else HORIZONS_MINUTES
    backtest_mae = [_rounded(accuracy.mae_at(h), 3) if accuracy is not None else None for h in horizons]
    if forecast is None:
        nothing = [None] * len(HORIZONS_MINUTES)
        return {
            "horizon_minutes": list(HORIZONS_MINUTES),
            "rps": nothing,
            "rps_low": nothing,
            "rps_high": nothing,
            "minutes_to_saturation": None,
            "lead_time_minutes": None,
            "capacity_rps": None,
            "trend_samples": 0,
            "basis": "none",
            "plan_correction": None,
            "backtest_mae_rps": backtest_mae,
        }
    return {
        "horizon_minutes": list(forecast.horizon_minutes),
        "rps": [_rounded(v, 3) for v in forecast.rps],
        "rps_low": [_rounded(v, 3) for v in forecast.rps_low],
        "rps_high": [_rounded(v, 3) for v in forecast.rps_high],
        "minutes_to_saturation": _rounded(forecast.minutes_to_saturation, 2),
        "lead_time_minutes": _rounded(forecast.lead_time_minutes, 2),
        "capacity_rps": _rounded(forecast.capacity_rps, 3),
        "trend_samples": forecast.trend_samples,
        "basis": forecast.basis,
        "plan_correction": _rounded(forecast.plan_correction, 3),
        "backtest_mae_rps": backtest_mae,
    }


def fleet_view_json(
    figures: FleetFigures,
    view: FleetView | None,
    plan_file: str | None,
    iso_time: Callable[[float], str],
    accuracy: ForecastAccuracy | None = None,
) -> dict:
    """The figures, the plan beside them and the flags; unknown as null.

    `view` (a FleetView of the last poll) gives the comparisons and flags; without one (a caller
    with figures only) they are empty. Keys are the same with or without a plan. `accuracy`: the
    forecast's backtest error on the fleet's history (None: no history file read).
    """
    plan = view.plan if view is not None else None
    gpu = view.gpu if view is not None else None

    def replica_json(r: Figures) -> dict:
        out = figures_json(r)
        # The replica's GPU counters (dcgm-exporter); null without GPU pages, each figure null where unknown.
        paired = gpu.replica(r.name) if gpu is not None else None
        out["gpu"] = paired.as_dict() if paired is not None else (gpu_unpaired() if gpu is not None else None)
        return out

    fleet = figures_json(figures.fleet)
    fleet["gpu"] = gpu.fleet_dict() if gpu is not None else None
    return {
        "plan": plan.plan_name if plan is not None else None,
        "plan_file": plan_file if plan is not None else None,
        "plan_at": {"weekday": DAYS[plan.weekday], "hour": plan.hour} if plan is not None else None,
        # true: the plan's per-replica capacity is the planner's estimate (no measurement in the plan)
        "capacity_estimated": plan.capacity_estimated if plan is not None else None,
        "window_seconds": figures.window_seconds,
        "source": figures.source,
        "at": figures.at,
        "source_error": figures.source_error or None,
        "replicas": [replica_json(r) for r in figures.replicas],
        "fleet": fleet,
        "comparisons": [comparison_json(c) for c in view.comparisons] if view is not None else [],
        "slo": slo_json(view),
        "flags": flags_json(view, iso_time),
        "forecast": forecast_json(view.forecast if view is not None else None, accuracy),
        # What the clients saw through the fleet's gateways (console.fleet.client); null without one.
        "client": client_json(view.gateway if view is not None else None),
    }
