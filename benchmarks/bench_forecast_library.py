"""The hand-written forecast against a well-kept forecasting library: statsmodels' damped-trend Holt, same data.

    python benchmarks/bench_forecast_library.py [--days 7] [--seed 1] [--every 5] [--quick]

The demo's week on plan and off plan is recorded exactly as benchmarks/bench_backtest.py records it (its
own functions) and read back into per-minute request rates the way `capcon history --backtest` reads them.
At each forecast origin (every `--every`-th minute that has a full trend window before it) five forecasters
are asked for 5, 15 and 30 minutes ahead and scored with the backtest's own MAE and MAPE against the rate
recorded then:

* forecast: console.ahead.forecast, as the console and the backtest call it (five minutes of rates, the
  plan's profile for the half hour ahead, the capacity);
* naive: the rate at the origin, held; profile: the plan's profile alone;
* holt 5 min: statsmodels' Holt exponential smoothing with a damped additive trend (ExponentialSmoothing,
  trend="add", damped_trend=True, every parameter and the initial state estimated), fitted on the same
  five minutes of rates the forecast sees;
* holt 60 min: the same fitted on the last hour of rates;
* holt 60 min x plan: the same fitted on the last hour of observed / planned (the plan's profile as the
  level), its forecast multiplied by the plan's profile at each horizon.

Holt's figures are clamped at zero, as the forecast's are. statsmodels (with numpy, scipy and pandas)
runs in its own venv under the benchmarks' cache (benchmarks/peer_venv.py), in a subprocess that reads
the origins' series from a file: the project does not depend on it. CPU per forecast is
`time.process_time` around the forecast calls alone, the forecaster's here and each Holt variant's in the
peer (its fit and forecast; not its imports, printed apart), on the same origins in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_backtest import REPLICAS, record_week
from peer_venv import installed_peer

from console.ahead.backtest import (
    MINUTE,
    TRUTH_SLACK_SECONDS,
    CounterPoint,
    HorizonError,
    _Errors,
    backtest,
    fleet_minutes,
)
from console.ahead.forecast import HORIZONS_MINUTES, TREND_WINDOW_SECONDS, forecast
from console.commands.history_backtest import _profiles
from console.plan.model import Plan
from console.plan.schema import load_plan
from console.store.arrivals import minute_plan_clocks, minute_requests
from console.store.database import Store

STATSMODELS = "0.15.0"
LONG_WINDOW_SECONDS = 3600.0  # the longer fit's window
HOLT_VARIANTS = ("holt 5 min", "holt 60 min", "holt 60 min x plan")

# Run in the peer's venv: reads {"horizons", "origins": [{"y5", "y60", "r60", "plan"}]}, writes per variant the
# forecasts per origin (None where the fit failed) and the CPU of fitting and forecasting.
PEER_SCRIPT = r"""
import json, sys, time, warnings
began = time.process_time()
import numpy as np
from statsmodels.tsa.holtwinters import ExponentialSmoothing
imports = time.process_time() - began
warnings.simplefilter("ignore")
job = json.load(open(sys.argv[1]))
steps = [h - 1 for h in job["horizons"]]
last = max(job["horizons"])

def holt(series):
    try:
        fit = ExponentialSmoothing(
            np.asarray(series, dtype=float), trend="add", damped_trend=True, initialization_method="estimated"
        ).fit()
        ahead = fit.forecast(last)
    except Exception:
        return None
    values = [float(ahead[s]) for s in steps]
    return values if all(v == v and abs(v) != float("inf") for v in values) else None

out = {"imports_cpu": imports, "variants": {}}
for name, key in (("holt 5 min", "y5"), ("holt 60 min", "y60"), ("holt 60 min x plan", "r60")):
    began = time.process_time()
    predictions = []
    for origin in job["origins"]:
        ahead = holt(origin[key]) if origin[key] is not None and len(origin[key]) >= 3 else None
        if ahead is not None and key == "r60":
            ahead = [r * p for r, p in zip(ahead, origin["plan"])]
        predictions.append(None if ahead is None else [max(v, 0.0) for v in ahead])
    out["variants"][name] = {"cpu": time.process_time() - began, "predictions": predictions}
json.dump(out, open(sys.argv[2], "w"))
"""


def read_minutes(path: Path, plan: Plan, start: float, end: float):
    """The recorded week as the backtest reads it: (per-minute rates, origin -> the plan's profile after it)."""
    store = Store.open(path)
    try:
        read_from = start - 360.0
        points = minute_requests(store, plan.name, read_from, end)
        clocks = minute_plan_clocks(store, plan.name, read_from, end)
    finally:
        store.close()
    counters = {url: [CounterPoint(a, r, s) for a, r, s in series] for url, series in points.items()}
    per_replica = plan.capacity.rps_per_replica
    return fleet_minutes(counters, lambda at: per_replica), _profiles(plan, clocks)


def compare(minutes, profile_at, plan: Plan, every: int, job_path: Path):
    """The forecaster, naive and profile scored at every `every`-th origin (the backtest's rules for origins,
    trend windows and truth), the forecaster's CPU, and the Holt job for the same origins written to `job_path`.
    Returns (errors per column per horizon, forecaster CPU, origins, truths per origin)."""
    known = [m for m in minutes if m.rps is not None and math.isfinite(m.rps)]
    times = [m.at for m in known]
    rates = [m.rps for m in known]
    horizons = HORIZONS_MINUTES
    lead = plan.lead_time_seconds / 60.0
    planned_now: dict[float, float | None] = {}

    def plan_at(at: float) -> float | None:
        if at not in planned_now:
            planned_now[at] = profile_at(at).at(0.0)
        return planned_now[at]

    def actual(at: float) -> float | None:
        i = bisect_left(times, at - TRUTH_SLACK_SECONDS)
        return rates[i] if i < len(times) and abs(times[i] - at) <= TRUTH_SLACK_SECONDS else None

    errors = {name: {h: _Errors() for h in horizons} for name in ("forecast", "naive", "profile")}
    jobs, truths = [], []
    forecast_cpu = 0.0
    first = times[0] if times else 0.0
    eligible = 0
    for index, point in enumerate(known):
        now = point.at
        if now - first < TREND_WINDOW_SECONDS:
            continue
        eligible += 1
        if (eligible - 1) % every:
            continue
        samples = [(times[i], rates[i]) for i in range(bisect_left(times, now - TREND_WINDOW_SECONDS), index + 1)]
        profile = profile_at(now)
        began = time.process_time()
        ahead = forecast(samples, now, profile, capacity_rps=point.capacity_rps, lead_time_minutes=lead)
        forecast_cpu += time.process_time() - began
        truth = [actual(now + h * MINUTE) for h in horizons]
        truths.append(truth)
        for h, predicted, real in zip(horizons, ahead.rps, truth):
            if real is None:
                continue
            errors["forecast"][h].add(predicted, real)
            errors["naive"][h].add(point.rps, real)
            errors["profile"][h].add(profile.at(float(h)), real)
        hour = [(times[i], rates[i]) for i in range(bisect_left(times, now - LONG_WINDOW_SECONDS), index + 1)]
        ratios = [v / p for at, v in hour if (p := plan_at(at)) is not None and p > 0]
        jobs.append(
            {
                "y5": [v for _, v in samples],
                "y60": [v for _, v in hour],
                "r60": ratios if len(ratios) == len(hour) else None,
                "plan": [profile.at(float(h)) or 0.0 for h in horizons],
            }
        )
    job_path.write_text(json.dumps({"horizons": list(horizons), "origins": jobs}))
    return errors, forecast_cpu, len(jobs), truths


def run_peer(python: Path, job_path: Path, out_path: Path, scratch: Path) -> dict:
    script = scratch / "holt_peer.py"
    script.write_text(PEER_SCRIPT)
    subprocess.run([str(python), str(script), str(job_path), str(out_path)], check=True)
    return json.loads(out_path.read_text())


def holt_errors(peer: dict, truths: list) -> tuple[dict, dict, dict]:
    """Per Holt variant: (errors per horizon, CPU, fits that failed)."""
    errors, cpu, failed = {}, {}, {}
    for name, result in peer["variants"].items():
        tally = {h: _Errors() for h in HORIZONS_MINUTES}
        failed[name] = sum(p is None for p in result["predictions"])
        for predictions, truth in zip(result["predictions"], truths):
            if predictions is None:
                continue
            for h, predicted, real in zip(HORIZONS_MINUTES, predictions, truth):
                if real is not None:
                    tally[h].add(predicted, real)
        errors[name] = tally
        cpu[name] = result["cpu"]
    return errors, cpu, failed


def cell(error: HorizonError) -> str:
    if error.mae_rps is None:
        return "-"
    mape = f"{error.mape * 100:.1f} %" if error.mape is not None else "-"
    return f"{error.mae_rps:.3f} ({mape})"


def print_table(columns: dict, cpu: dict, origins: int, failed: dict) -> None:
    names = list(columns)
    rows = [["", *(f"{h} min MAE (MAPE)" for h in HORIZONS_MINUTES), "CPU per forecast"]]
    for name in names:
        per = cpu.get(name)
        shown = f"{per / origins * 1000:.3f} ms" if per is not None and origins else ""
        if failed.get(name):
            shown += f" ({failed[name]} fits failed)"
        rows.append([name, *(cell(columns[name][h].result(h)) for h in HORIZONS_MINUTES), shown])
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--every", type=int, default=5, help="score every N-th origin (Holt fits ~40 ms each)")
    parser.add_argument("--quick", action="store_true", help="a day instead of a week")
    args = parser.parse_args()
    days = 1 if args.quick else max(1, args.days)
    every = max(1, args.every)
    python, why = installed_peer("statsmodels", STATSMODELS, "python")
    if python is None:
        print(f"bench_forecast_library: {why}", file=sys.stderr)
        return 1
    with resources.as_file(resources.files("console.sim") / "demo_plan.yaml") as plan_path:
        plan = load_plan(str(plan_path))
    scratch = Path(tempfile.mkdtemp(prefix="bench-forecast-library-"))
    try:
        for name, off_plan in (("on plan", False), ("off plan", True)):
            path = scratch / f"{name.replace(' ', '-')}.sqlite"
            start, end, sent = record_week(path, plan, days, args.seed, off_plan)
            minutes, profile_at = read_minutes(path, plan, start, end)
            job_path = scratch / f"{name.replace(' ', '-')}-job.json"
            errors, forecast_cpu, origins, truths = compare(minutes, profile_at, plan, every, job_path)
            peer = run_peer(python, job_path, scratch / f"{name.replace(' ', '-')}-out.json", scratch)
            holt, holt_cpu, failed = holt_errors(peer, truths)
            columns = {**errors, **holt}
            print(
                f"\n== the demo's week {name}: {days} day{'s' if days != 1 else ''}, {REPLICAS} replicas, "
                f"{sent:,} requests; {origins:,} forecast origins (every {every}. minute)"
            )
            print_table(columns, {"forecast": forecast_cpu, **holt_cpu}, origins, failed)
            whole = backtest(minutes, profile_at, lead_time_minutes=plan.lead_time_seconds / 60.0)
            print(
                "the forecast over every origin (the backtest as `history --backtest` runs it): MAE "
                + ", ".join(f"{e.mae_rps:.3f}" for e in whole.forecast if e.mae_rps is not None)
                + f" req/s over {whole.origins:,} origins"
            )
            ratios = ", ".join(
                f"{variant} {holt_cpu[variant] / forecast_cpu:.0f}x" for variant in HOLT_VARIANTS if forecast_cpu
            )
            print(
                f"CPU: the forecast {forecast_cpu:.3f} s for {origins:,} forecasts (baseline); Holt {ratios}; "
                f"statsmodels' imports {peer['imports_cpu']:.2f} s once"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
