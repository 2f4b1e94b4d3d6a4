"""CPU of the planner's capacity estimate, computed and then kept: each shipped plan with its capacity taken out.

The estimate sweeps the plan's simulated replica offline, three times (console/bench/estimate.py); the first
command that reads a plan without a measured capacity computes it and keeps it in the data directory
(console/bench/estimate_store.py), and every later one reads it back. Printed per plan:

* the estimate and its CPU seconds computed (nothing kept) and read back (kept), in this process;
* `capcon watch PLAN --once --target ...` as a subprocess against a replica that refuses connections (the
  answer is a table of a down replica, so the CPU is the command's own): its CPU the first time (an empty data
  directory) and the second, and their ratio;
* the CPU of reading the same plan with its measured capacity (the baseline: what reading the plan costs anyway).

    .venv/bin/python benchmarks/bench_estimate_cpu.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from console.bench import estimate
from console.plan.report import render, to_json
from console.plan.schedule import schedule
from console.plan.schema import load_plan, parse_plan
from console.plan.sizing import size

ROOT = Path(__file__).resolve().parents[1]
PLANS = ROOT / "plans"
CAPCON = Path(sys.executable).with_name("capcon")


def without_capacity(path: Path) -> str:
    lines = path.read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("capacity:"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(" "))
    return "".join(lines[:start] + lines[end:])


def estimated(text: str, name: str) -> tuple[float, float]:
    """(CPU seconds, rps) of one estimate in this process (its in-process cache cleared first)."""
    estimate._estimates.clear()
    estimate._sweeps.clear()
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


def refused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again: nothing listens there


def watch_once_cpu(plan: Path, data_home: str) -> float:
    """CPU seconds (user + system) of one `capcon watch --once` subprocess."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [str(CAPCON), "watch", str(plan), "--once", "--target", f"127.0.0.1:{refused_port()}", "--timeout", "1s"],
        env={**os.environ, "XDG_DATA_HOME": data_home},
        capture_output=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per plan; the least CPU is shown")
    args = parser.parse_args()
    print(
        f"{'plan':<30}{'estimate':>10}{'computed':>10}{'kept':>8}{'watch 1st':>11}{'watch 2nd':>11}{'ratio':>7}"
        f"{'measured plan':>15}"
    )
    for path in sorted(PLANS.glob("*.yaml")):
        text = without_capacity(path)
        with tempfile.TemporaryDirectory() as scratch:
            os.environ["XDG_DATA_HOME"] = scratch  # this process's store: empty, then holding the estimate
            computed, rps = estimated(text, path.name)
            kept = min(estimated(text, path.name)[0] for _ in range(args.repeat))
            plan = Path(scratch) / path.name
            plan.write_text(text)
            home = str(Path(scratch) / "watch")
            first, second = watch_once_cpu(plan, home), min(watch_once_cpu(plan, home) for _ in range(args.repeat))
        base = min(reported(path) for _ in range(args.repeat))
        print(
            f"{path.name:<30}{rps:>6.2f} rps{computed:>8.2f} s{kept:>6.3f} s{first:>9.2f} s{second:>9.2f} s"
            f"{first / second:>7.1f}{base:>13.3f} s"
        )


if __name__ == "__main__":
    main()
