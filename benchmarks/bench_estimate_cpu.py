"""CPU of the planner's capacity estimate: each shipped plan with its capacity taken out.

The estimate sweeps the plan's simulated replica offline (console/bench/estimate.py); every
command that reads a plan without a measured capacity pays it once. Printed per plan: the
estimate, CPU seconds of the estimate, CPU of the same plan's report with its measured
capacity (the baseline: what reading the plan costs anyway), and their ratio.

    .venv/bin/python benchmarks/bench_estimate.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from console.bench import estimate
from console.plan.report import render, to_json
from console.plan.schedule import schedule
from console.plan.schema import load_plan, parse_plan
from console.plan.sizing import size

PLANS = Path(__file__).resolve().parents[1] / "plans"


def without_capacity(path: Path) -> str:
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("capacity:"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(" "))
    return "".join(lines[:start] + lines[end:])


def estimated(text: str, name: str) -> tuple[float, float]:
    """(CPU seconds, rps) of one fresh estimate."""
    estimate._estimates.clear()  # each run sweeps afresh
    started = time.process_time()
    plan = parse_plan(text, name, estimate=estimate.estimate_capacity)
    return time.process_time() - started, plan.capacity.rps_per_replica


def reported(path: Path) -> float:
    """CPU seconds of reading the plan with its measured capacity and computing its report and schedule."""
    started = time.process_time()
    plan = load_plan(path)
    sized, week = size(plan), schedule(plan)
    to_json(sized, week)
    render(sized, week)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per plan; the least CPU is shown")
    args = parser.parse_args()
    print(f"{'plan':<28}{'estimate':>12}{'measured':>10}{'estimate cpu':>14}{'report cpu':>12}{'ratio':>8}")
    for path in sorted(PLANS.glob("*.yaml")):
        text = without_capacity(path)
        runs = [estimated(text, path.name) for _ in range(args.repeat)]
        best, rps = min(runs)
        base = min(reported(path) for _ in range(args.repeat))
        measured = load_plan(path)
        print(
            f"{path.name:<28}{rps:>8.3f} rps{measured.capacity.rps_per_replica:>10.3g}"
            f"{best:>12.2f} s{base:>10.3f} s{best / base:>8.0f}"
        )


if __name__ == "__main__":
    main()
