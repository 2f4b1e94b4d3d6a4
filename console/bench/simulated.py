"""The same sweep run on the plan's simulated replica in simulated time: no server, no clock.

Each step sends the same number of requests at the same arrival offsets as a live
step of `capcon bench` with the same settings (console/bench/arrivals.py, same seed),
each of a given (prompt tokens, answer tokens, max_tokens), into one simulator
engine (console/sim; the striding one of console/ahead/whatif_engine.py, which takes
pure-decode stretches in one stride with the same results: an estimate's three sweeps
cost 2.0-2.7 s of CPU instead of several times that) run until every request has finished; goodput counts the
requests that met every target, from the engine's own TTFT and TPOT. Where the
live sweep against `capcon sim` lands is then checked against this one, and a plan
without a measured capacity is estimated with it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from console.ahead.whatif_engine import StridingEngine
from console.bench.arrivals import arrival_offsets
from console.bench.boundary import meets_share, within
from console.bench.measure import BenchTargets
from console.bench.runner import StepSettings
from console.bench.sweep import Sweep
from console.plan.model import Plan
from console.sim.engine import SimRequest
from console.sim.shape import replica_shape
from console.sim.traffic import LengthSampler

Lengths = tuple[int, int, int]  # prompt tokens, tokens answered, max_tokens asked for
DRAIN_SECONDS = 3600.0  # simulated time a step may take to finish after its last arrival


class BudgetSpent(Exception):
    """The simulation was asked for more tokens than its budget allows."""


@dataclass
class TokenBudget:
    """Tokens (prompt and answer) the simulated steps may process in all: what bounds their CPU."""

    limit: int
    used: int = 0

    def spend(self, lengths: Sequence[Lengths]) -> None:
        tokens = sum(prompt + answer for prompt, answer, _ in lengths)
        if self.used + tokens > self.limit:
            raise BudgetSpent(f"{self.used + tokens:,} simulated tokens, more than {self.limit:,}")
        self.used += tokens


@dataclass(frozen=True)
class SimulatedStep:
    rate: float
    sent: int
    good: int
    preemptions: int

    @property
    def goodput_share(self) -> float:
        return self.good / self.sent if self.sent else 0.0

    def holds(self, targets: BenchTargets) -> bool:
        return meets_share(self.good, self.sent, targets.share)


def plan_lengths(plan: Plan, count: int, seed: int = 0) -> list[Lengths]:
    """`count` requests drawn from the plan's first interactive workload's length distributions."""
    workload = plan.interactive[0]
    shape = replica_shape(plan)
    sampler = LengthSampler(workload.tokens, min(shape.max_model_len, shape.kv_capacity_tokens))
    rng = random.Random(seed)
    return [sampler.draw(rng) for _ in range(count)]


def simulated_step(
    plan: Plan,
    lengths: Sequence[Lengths],
    rate: float,
    settings: StepSettings,
    targets: BenchTargets,
    budget: TokenBudget | None = None,
) -> SimulatedStep:
    """One step of len(lengths) requests at `rate` on a fresh simulated replica of `plan`.

    BudgetSpent, before anything is simulated, when `budget` cannot pay for the step.
    """
    if budget is not None:
        budget.spend(lengths)
    engine = StridingEngine(replica_shape(plan))
    offsets = arrival_offsets(len(lengths), rate, settings.burstiness, random.Random(f"{settings.seed}:{rate}"))
    requests = []
    for index, ((prompt, answer, max_tokens), at) in enumerate(zip(lengths, offsets)):
        engine.advance(at)
        request = SimRequest(f"b{index}", prompt, answer, max_tokens, at)
        if engine.validate(prompt, max_tokens) is None:
            engine.submit(request)
        requests.append(request)
    engine.advance((offsets[-1] if offsets else 0.0) + DRAIN_SECONDS)
    good = sum(
        1
        for r in requests
        if r.finished_reason in ("stop", "length")
        and r.ttft is not None
        and r.tpot is not None
        and within(r.ttft, targets.ttft)
        and within(r.tpot, targets.tpot)
        and (targets.e2e is None or (r.last_token is not None and within(r.last_token - r.arrival, targets.e2e)))
    )
    return SimulatedStep(rate, len(requests), good, engine.preemptions)


def simulated_sweep(
    plan: Plan,
    lengths: Sequence[Lengths],
    targets: BenchTargets,
    settings: StepSettings,
    sweep: Sweep,
    budget: TokenBudget | None = None,
) -> list[SimulatedStep]:
    """The sweep `capcon bench` would run, on the simulated replica; `sweep.capacity` is where it lands.

    BudgetSpent when `budget` cannot pay for the next step (the sweep keeps what the steps before found).
    """
    steps = []
    taken = 0
    while (rate := sweep.next_rate()) is not None:
        count = settings.count(rate)
        chosen = [lengths[(taken + i) % len(lengths)] for i in range(count)]
        taken += count
        step = simulated_step(plan, chosen, rate, settings, targets, budget)
        steps.append(step)
        sweep.record(rate, step.holds(targets))
    return steps


def simulated_latencies(plan: Plan, lengths: Sequence[Lengths], rate: float, seed: int = 0) -> tuple[float, float]:
    """Median TTFT and TPOT of len(lengths) Poisson arrivals at `rate` on a fresh simulated replica."""
    engine = StridingEngine(replica_shape(plan))
    offsets = arrival_offsets(len(lengths), rate, 1.0, random.Random(f"{seed}:{rate}"))
    requests = []
    for index, ((prompt, answer, max_tokens), at) in enumerate(zip(lengths, offsets)):
        engine.advance(at)
        request = SimRequest(f"m{index}", prompt, answer, max_tokens, at)
        engine.submit(request)
        requests.append(request)
    engine.advance((offsets[-1] if offsets else 0.0) + DRAIN_SECONDS)
    ttfts = sorted(r.ttft for r in requests if r.ttft is not None)
    tpots = sorted(r.tpot for r in requests if r.tpot is not None)
    return ttfts[len(ttfts) // 2], tpots[len(tpots) // 2]


def simulated_throughput(plan: Plan, lengths: Sequence[Lengths]) -> float:
    """Output tokens per second of the simulated replica given every request at once (the throughput mode)."""
    engine = StridingEngine(replica_shape(plan))
    requests = [SimRequest(f"t{i}", p, a, m, 0.0) for i, (p, a, m) in enumerate(lengths)]
    for request in requests:
        engine.submit(request)
    engine.advance(DRAIN_SECONDS)
    end = max((r.last_token or 0.0) for r in requests)
    return sum(r.generated for r in requests) / end if end > 0 else 0.0
