"""CPU seconds of a what-if scenario against the plain offline run of the same arrivals, in the same run.

A scenario of 30 minutes at 10 replicas (the issue's budget: under 2 s of CPU) on each shipped plan,
at the plan's capacity per replica, with nothing changed and with a bounded queue; the baseline is
the simulator's own offline runner (console/sim/offline.py) on one replica at the same rate for the
same 30 minutes, with the step-by-step engine: what one replica's share costs without striding.

    .venv/bin/python benchmarks/bench_whatif.py
"""

from __future__ import annotations

import random
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.ahead.whatif import Costs, Lengths, Policy, Scenario, Workload, run_scenario
from console.plan.schema import load_plan
from console.plan.sizing import size
from console.sim import offline
from console.sim.engine import Engine
from console.sim.shape import replica_shape
from console.sim.traffic import LengthSampler

PLANS = ("plans/internal-assistant-18rps.yaml", "plans/chat-8b-l40s.yaml", "plans/assistant-70b.yaml")
MINUTES = 30
REPLICAS = 10


def cpu(call) -> tuple[float, object]:
    start = time.process_time()
    result = call()
    return time.process_time() - start, result


def main() -> None:
    root = Path(__file__).resolve().parents[1]
    print(f"{'plan':<32} {'scenario':<16} {'cpu s':>7} {'baseline s':>10} {'ratio':>6}  ttft p95  refused")
    for name in PLANS:
        plan = load_plan(str(root / name), None)
        shape = replica_shape(plan)
        tokens = plan.interactive[0].tokens
        per_replica = plan.capacity.rps_per_replica
        sampler = LengthSampler(tokens, shape.max_model_len)
        stream = offline.arrivals(per_replica, MINUTES * 60.0, sampler, random.Random(0))
        baseline, _ = cpu(partial(offline.run, Engine(shape), stream, MINUTES * 60.0))
        lengths = Lengths(
            tokens.input_mean, tokens.input_p95, tokens.output_mean, int(tokens.output_max), shape.max_model_len
        )
        workload = Workload((per_replica * REPLICAS,) * MINUTES, lengths)
        cap = max(1, round(min(size(plan).expected_concurrency, plan.replica.max_num_seqs)))
        for label, policy in (("now (pass)", Policy(mode="pass")), ("bounded queue 32", Policy(max_queue=32))):
            scenario = Scenario(label, REPLICAS, policy, None if policy.mode == "pass" else cap)
            seconds, result = cpu(partial(run_scenario, shape, scenario, workload, Costs(1, None)))
            ttft = result.ttft_p95_seconds
            print(
                f"{plan.name:<32} {label:<16} {seconds:7.2f} {baseline:10.2f} {seconds / baseline:6.2f}  "
                f"{ttft if ttft is not None else float('nan'):7.2f}s  {result.refused_share * 100:5.1f} %"
                f"  ({result.simulated_replicas} of {REPLICAS} simulated)"
            )


if __name__ == "__main__":
    main()
