"""`capcon history --backtest`: how wrong the forecast has been on a recorded fleet (console.ahead.backtest).

The fleet's request rate is rebuilt minute by minute from the recorded request counters; at each minute
the forecast the console runs is made again with only what came before, and set against what followed,
beside the naive forecast and the plan's profile alone. The plan is --plan FILE, else the one recorded
with the fleet; its profile is read at the plan clock the polls recorded (a `demo --db` week runs a
simulated clock), else at the wall clock in the plan's zone.
"""

from __future__ import annotations

from datetime import tzinfo

from console.ahead.backtest import Backtest, HorizonError, SaturationCalls, needed_minutes

# The reading and the walk are the console's too (it quotes the error beside its forecast): one step for both,
# still reached here by `history` and the benchmark.
from console.live.forecast_accuracy import fleet_backtest as fleet_backtest
from console.live.forecast_accuracy import profiles_at as _profiles  # noqa: F401
from console.plan.model import Plan
from console.store import json_out
from console.when import format_when, iso_when


def too_little_words(result: Backtest, fleet: str, start: float, end: float, zone: tzinfo) -> str:
    return (
        f"fleet {fleet}: {result.minutes} minute{'s' if result.minutes != 1 else ''} of arrivals recorded from "
        f"{format_when(start, zone)[:16]} to {format_when(end, zone)[:16]}; a backtest needs at least "
        f"{needed_minutes()} in a row (the forecast's 5-minute trend window and the 30 minutes it looks ahead)"
    )


# --- output ------------------------------------------------------------------------------------


def _error_json(error: HorizonError) -> dict:
    return {"points": error.points, "mae_rps": error.mae_rps, "mape": error.mape, "mape_points": error.mape_points}


def fleet_json(fleet: str, plan: Plan | None, result: Backtest, start: float, end: float, zone: tzinfo) -> dict:
    profile = result.profile
    out: dict = {
        "fleet": fleet,
        "plan": plan.name if plan is not None else None,
        "minutes": result.minutes,
        "origins": result.origins,
        "too_little_history": None if result.complete else too_little_words(result, fleet, start, end, zone),
        "horizons": [
            {
                "horizon_minutes": f.horizon_minutes,
                "forecast": _error_json(f),
                "naive": _error_json(n),
                "profile": _error_json(profile[i]) if profile is not None else None,
            }
            for i, (f, n) in enumerate(zip(result.forecast, result.naive))
        ],
        "saturation": None,
    }
    calls = result.saturation
    if calls is None and plan is not None:  # a plan gives the capacity: no minute to score is zero calls, not unknown
        calls = SaturationCalls(origins=0, calls=0, came_true=0, false_alarms=0, missed=0, mae_minutes=None)
    if calls is not None:
        out["saturation"] = {
            "origins": calls.origins,
            "calls": calls.calls,
            "came_true": calls.came_true,
            "false_alarms": calls.false_alarms,
            "missed": calls.missed,
            "mae_minutes": calls.mae_minutes,
            "capacity_per_replica_rps": plan.capacity.rps_per_replica if plan is not None else None,
        }
    return out


def print_json(start: float, end: float, fleets: list[dict]) -> None:
    print(json_out.dumps({"from": iso_when(start), "to": iso_when(end), "fleets": fleets}, indent=2))


def _mae(error: HorizonError) -> str:
    if error.mae_rps is None:
        return "–"
    return f"{error.mae_rps:.3g}"


def _mape(error: HorizonError) -> str:
    if error.mape is None:
        return "–"
    return f"{error.mape * 100:.0f} %" if error.mape >= 0.1 else f"{error.mape * 100:.1f} %"


def table(result: Backtest) -> str:
    """Per horizon: MAE (req/s) and MAPE of the forecast, the naive forecast and the plan's profile."""
    columns = [("forecast", result.forecast), ("naive", result.naive)]
    if result.profile is not None:
        columns.append(("profile", result.profile))
    header = ["ahead"] + [f"{name} {part}" for name, _ in columns for part in ("MAE", "MAPE")]
    rows = [header]
    for i, horizon in enumerate(result.forecast):
        row = [f"{horizon.horizon_minutes} min"]
        for _, errors in columns:
            row += [_mae(errors[i]), _mape(errors[i])]
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    return "\n".join(
        "  ".join([r[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(r[1:], widths[1:])]) for r in rows
    )


def saturation_line(result: Backtest, plan: Plan | None) -> str:
    calls = result.saturation
    if calls is None or plan is None:
        return "minutes-to-saturation calls: not scored (no plan: the capacity is unknown)"
    if not calls.origins:
        return (
            "minutes-to-saturation calls: none to score (no forecast with 30 recorded minutes after it under capacity)"
        )
    off = f", called {calls.mae_minutes:.1f} min off on average" if calls.mae_minutes is not None else ""
    return (
        f"minutes-to-saturation calls ({plan.capacity.rps_per_replica:g} req/s a replica answering): "
        f"{calls.calls} call{'s' if calls.calls != 1 else ''} in {calls.origins:,} forecasts, "
        f"{calls.came_true} came true{off}; {calls.false_alarms} false alarm{'s' if calls.false_alarms != 1 else ''}, "
        f"{calls.missed} missed"
    )


def print_text(
    fleet: str, plan: Plan | None, result: Backtest, start: float, end: float, zone: tzinfo, first: bool
) -> None:
    if not first:
        print()
    if not result.complete:
        print(too_little_words(result, fleet, start, end, zone))
        return
    print(f"fleet {fleet} · plan {plan.name if plan is not None else '(none: the trend alone)'}")
    print(
        f"{format_when(start, zone)[:16]} to {format_when(end, zone)[:16]}: {result.minutes:,} minutes recorded, "
        f"{result.origins:,} forecasts made"
    )
    print("arrivals forecast error (MAE in req/s, MAPE: mean error over the actual rate):")
    print(table(result))
    print(saturation_line(result, plan))
