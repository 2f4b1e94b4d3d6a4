"""The forecast's backtest on a recorded week of the demo: its error beside the naive forecast and the plan's profile.

    python benchmarks/bench_backtest.py [--days 7] [--seed 1] [--quick]

The demo's traffic (console.sim.traffic.TrafficGenerator on the built-in demo plan, five replicas, the
plan's Gamma arrival gaps) is run offline on a simulated clock at real pace (one simulated second per
simulated second, as fast as the CPU allows), its requests counted per replica, and a poll of the five
counters written every minute with the plan and its clock to a real history file through
`Store.write_poll`, the console's own writer. The backtest then reads it back as
`capcon history --backtest` does (console.commands.history_backtest.fleet_backtest) and prints the
table.

Two weeks are recorded:

* on plan: the traffic is the plan's profile exactly (plus the arrivals' own noise). The plan's
  profile is then the best any forecaster can do on average; the forecast should come close to it.
* off plan: what a real fleet does to its plan. Each day's level is the plan's times a factor drawn
  in 0.6-1.4, and within the day the level wanders (a mean-reverting walk of about 10 % an hour).

CPU is measured with `time.process_time`: the backtest of the week beside reading the week's counters
out of the file (the baseline, measured in the same run). `--quick` is a smoke run (a day).
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from console.ahead.backtest import Backtest, CounterPoint, backtest, fleet_minutes
from console.commands.history_backtest import _profiles, saturation_line, table
from console.metrics.figures import ReplicaState
from console.metrics.vllm import ReplicaSample
from console.plan.model import Plan
from console.plan.schema import load_plan
from console.sim.traffic import Target, TrafficGenerator
from console.store.arrivals import minute_plan_clocks, minute_requests
from console.store.database import Store
from console.store.records import PollRecord
from console.targets import TargetResult

MONDAY = 1_767_571_200.0  # 2026-01-05 00:00 UTC, a Monday: the plan clock reads the recording's own hours
REPLICAS = 5  # the demo's fleet
POLL_SECONDS = 60.0
TICK_SECONDS = 1.0
DAY = 86400.0


class CountingReplica(Target):
    """A replica that counts what it is sent (the backtest reads the requests counter alone)."""

    def __init__(self) -> None:
        self.requests = 0

    def send(self, prompt: int, answer: int, max_tokens: int, kind: str) -> bool:
        self.requests += 1
        return True


@dataclass
class Level:
    """The traffic's level against the plan: a factor per day times a mean-reverting walk within it."""

    rng: random.Random
    off_plan: bool
    walk: float = 0.0

    def day_factors(self, days: int) -> list[float]:
        return [self.rng.uniform(0.6, 1.4) if self.off_plan else 1.0 for _ in range(days)]

    def step(self, seconds: float) -> float:
        """The walk's factor after `seconds` more (log-scale, about 10 % an hour, pulled back over a few hours)."""
        if not self.off_plan:
            return 1.0
        hours = seconds / 3600.0
        self.walk += -self.walk * hours / 3.0 + self.rng.gauss(0.0, 0.1 * math.sqrt(hours))
        return math.exp(self.walk)


def record_week(path: Path, plan: Plan, days: int, seed: int, off_plan: bool) -> tuple[float, float, int]:
    """The demo's traffic for `days` days into `path`; returns (start, end, requests sent)."""
    clock = [0.0]
    replicas = [CountingReplica() for _ in range(REPLICAS)]
    generator = TrafficGenerator(
        plan.workloads,
        replicas,
        plan.model.max_model_len,
        time_scale=1.0,
        start_week_seconds=0.0,
        seed=seed,
        clock=lambda: clock[0],
    )
    level = Level(random.Random(seed + 1), off_plan)
    factors = level.day_factors(days)
    store = Store.open(path)
    start = MONDAY
    sent = 0
    try:
        walk = 1.0
        seconds = 0.0
        end_seconds = days * DAY
        next_poll = POLL_SECONDS / 2
        while seconds <= end_seconds:
            if seconds % 60.0 == 0.0:
                walk = level.step(60.0)
            generator.rps_scale = factors[min(int(seconds // DAY), days - 1)] * walk
            clock[0] = seconds
            sent += generator.run_due(seconds)
            if seconds >= next_poll:
                at = start + seconds
                results = tuple(
                    TargetResult(
                        f"replica-{i}",
                        f"http://127.0.0.1:{8000 + i}/metrics",
                        ReplicaState.UP,
                        ReplicaSample(at=at, counters={"requests": float(r.requests)}, start_time=start - 3600.0),
                        "",
                        at,
                    )
                    for i, r in enumerate(replicas)
                )
                store.write_poll(
                    PollRecord(
                        fleet=plan.name,
                        at=at,
                        watched_at=at,
                        source="scrape",
                        window_seconds=60.0,
                        interval_seconds=POLL_SECONDS,
                        results=results,
                        plan=plan,
                        plan_clock=at,
                    )
                )
                next_poll += POLL_SECONDS
            seconds += TICK_SECONDS
    finally:
        store.close()
    return start, start + end_seconds, sent


def timed_backtest(path: Path, plan: Plan, start: float, end: float) -> tuple[Backtest, float, float]:
    """The backtest as `capcon history --backtest` runs it; (result, CPU reading the file, CPU of the backtest)."""
    store = Store.open(path)
    try:
        read_from = start - 360.0
        began = time.process_time()
        points = minute_requests(store, plan.name, read_from, end)
        clocks = minute_plan_clocks(store, plan.name, read_from, end)
        read_cpu = time.process_time() - began
    finally:
        store.close()
    began = time.process_time()
    counters = {url: [CounterPoint(a, r, s) for a, r, s in series] for url, series in points.items()}
    per_replica = plan.capacity.rps_per_replica
    minutes = fleet_minutes(counters, lambda at: per_replica)
    result = backtest(minutes, _profiles(plan, clocks), lead_time_minutes=plan.lead_time_seconds / 60.0)
    return result, read_cpu, time.process_time() - began


def figures_at(result: Backtest, horizon: int) -> str:
    i = [e.horizon_minutes for e in result.forecast].index(horizon)
    f, n = result.forecast[i], result.naive[i]
    p = result.profile[i] if result.profile is not None else None
    verdict = "beats both" if p is not None and f.mae_rps < min(n.mae_rps, p.mae_rps) else "does not beat both"
    shown = f"forecast {f.mae_rps:.3f}, naive {n.mae_rps:.3f}, profile {p.mae_rps if p else float('nan'):.3f}"
    return f"at {horizon} min the forecast {verdict} (MAE req/s: {shown})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a day instead of a week")
    args = parser.parse_args()
    days = 1 if args.quick else max(1, args.days)
    with resources.as_file(resources.files("console.sim") / "demo_plan.yaml") as plan_path:
        plan = load_plan(str(plan_path))
    scratch = Path(tempfile.mkdtemp(prefix="bench-backtest-"))
    try:
        for name, off_plan in (("on plan", False), ("off plan", True)):
            path = scratch / f"{name.replace(' ', '-')}.sqlite"
            began = time.process_time()
            start, end, sent = record_week(path, plan, days, args.seed, off_plan)
            record_cpu = time.process_time() - began
            result, read_cpu, backtest_cpu = timed_backtest(path, plan, start, end)
            print(
                f"\n== the demo's week {name}: {days} day{'s' if days != 1 else ''}, {REPLICAS} replicas, "
                f"{sent:,} requests (recorded in {record_cpu:.1f} s of CPU)"
            )
            print(f"{result.minutes:,} minutes recorded, {result.origins:,} forecasts made")
            print(table(result))
            print(saturation_line(result, plan))
            print(figures_at(result, 15))
            print(
                f"CPU: backtest {backtest_cpu:.3f} s over {result.minutes:,} minutes; reading them from the file "
                f"{read_cpu:.3f} s (baseline); ratio {backtest_cpu / read_cpu if read_cpu else float('nan'):.2f}x"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
