"""What the console's quote of its forecast error costs: the backtest of the history file's last week, on a thread.

    python benchmarks/bench_forecast_accuracy.py [--days 14] [--replicas 5] [--quick]

A history file holding `--days` of one fleet's minutes (five replicas polled once a minute, their request
counters following a daily curve with noise, written through `Store.write_poll`, the console's own writer)
is read as the console reads it every ten minutes (console.live.forecast_accuracy.forecast_accuracy: read-only,
the last week only). Printed, each beside a baseline measured in the same run:

* CPU of the walk against reading the week's counters out of the file alone;
* the minutes walked: a week's, however many days the file holds (the cost is bounded by the week);
* how late an event loop's 10 ms tick runs while the walk runs on a worker thread (as in the console), against
  the same loop with nothing beside it: the console's polls and keys wait on the same loop.

`--quick` is a smoke run (two days in the file).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from console.ahead.accuracy import REACH_SECONDS
from console.live.forecast_accuracy import forecast_accuracy
from console.metrics.figures import ReplicaState
from console.metrics.vllm import ReplicaSample
from console.plan.schema import load_plan
from console.store.arrivals import minute_requests
from console.store.database import Store
from console.store.records import PollRecord
from console.targets import TargetResult

MONDAY = 1_767_571_200.0  # 2026-01-05 00:00 UTC
DAY = 86400.0
TICK_SECONDS = 0.01


def record(path: Path, plan, days: int, replicas: int, seed: int) -> float:
    """`days` of one poll a minute into `path`; returns the end (the last poll's minute end)."""
    rng = random.Random(seed)
    counters = [0.0] * replicas
    store = Store.open(path)
    try:
        for minute in range(int(days * DAY / 60)):
            at = MONDAY + 60 * minute + 30
            hour = (minute / 60) % 24
            rate = 2.0 + 1.5 * math.sin((hour - 6) / 24 * 2 * math.pi)  # req/s a replica, a daily curve
            for i in range(replicas):
                counters[i] += max(rng.gauss(rate * 60, math.sqrt(rate * 60)), 0.0)
            results = tuple(
                TargetResult(
                    f"replica-{i}",
                    f"http://127.0.0.1:{8000 + i}/metrics",
                    ReplicaState.UP,
                    ReplicaSample(at=at, counters={"requests": counters[i]}, start_time=MONDAY - 3600.0),
                    "",
                    at,
                )
                for i in range(replicas)
            )
            store.write_poll(PollRecord(plan.name, at, at, "scrape", 60.0, 60.0, results, plan=plan))
    finally:
        store.close()
    return MONDAY + days * DAY


async def lateness(seconds: float, beside=None) -> tuple[float, float, object]:
    """A loop ticking every TICK_SECONDS for `seconds` (or until `beside`, run on a thread, is done):
    (p99, max) of how late the ticks ran, and what `beside` returned."""
    late: list[float] = []
    task = asyncio.create_task(asyncio.to_thread(beside)) if beside is not None else None
    began = time.perf_counter()
    while (task is not None and not task.done()) or (task is None and time.perf_counter() - began < seconds):
        due = time.perf_counter() + TICK_SECONDS
        await asyncio.sleep(TICK_SECONDS)
        late.append(max(time.perf_counter() - due, 0.0))
    result = await task if task is not None else None
    late.sort()
    return late[int(0.99 * (len(late) - 1))], late[-1], result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="two days in the file")
    args = parser.parse_args()
    days = 2 if args.quick else max(1, args.days)
    plan = load_plan(str(REPO / "plans" / "internal-assistant-18rps.yaml"))
    scratch = Path(tempfile.mkdtemp(prefix="bench-forecast-accuracy-"))
    try:
        path = scratch / "h.sqlite"
        began = time.process_time()
        end = record(path, plan, days, args.replicas, args.seed)
        print(
            f"history: {days} days of {args.replicas} replicas, one poll a minute ({time.process_time() - began:.1f} s of CPU to write)"
        )

        store = Store.open(path, read_only=True)
        began = time.process_time()
        minute_requests(store, plan.name, end - REACH_SECONDS, end)
        read_cpu = time.process_time() - began
        store.close()

        cpu: dict[str, float] = {}

        def walk():
            began = time.thread_time()
            found = forecast_accuracy(path, [(plan.name, plan)], end)
            cpu["walk"] = time.thread_time() - began
            return found

        idle_p99, idle_max, _ = asyncio.run(lateness(1.0))
        busy_p99, busy_max, found = asyncio.run(lateness(0.0, walk))
        [accuracy] = found
        assert accuracy is not None
        walked_days = accuracy.minutes / 1440
        mae = ", ".join(f"{h} min {m:.3f}" for h, m in zip(accuracy.horizon_minutes, accuracy.mae_rps) if m is not None)
        print(f"backtest MAE (req/s): {mae}")
        print(
            f"minutes walked: {accuracy.minutes:,} ({walked_days:.1f} days) of the {days} days in the file "
            f"(bounded by the last {REACH_SECONDS / DAY:.0f} days)"
        )
        print(
            f"CPU: the walk {cpu['walk']:.3f} s on its thread; reading the week's counters alone {read_cpu:.3f} s "
            f"(baseline); ratio {cpu['walk'] / read_cpu if read_cpu else float('nan'):.2f}x"
        )
        print(
            f"event loop's 10 ms tick, late by: p99 {busy_p99 * 1000:.1f} ms, max {busy_max * 1000:.1f} ms with the "
            f"walk on a thread; p99 {idle_p99 * 1000:.1f} ms, max {idle_max * 1000:.1f} ms with nothing beside it "
            f"(baseline); threads {threading.active_count()}"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
