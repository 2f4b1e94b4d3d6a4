"""Run one engine against a fixed arrival stream in simulated time, as fast as the CPU allows.

No server and no clock: this is how the method's figures are checked (a minute
of a 70B replica at 5 rps runs in well under a second) and how a rate sweep
finds a replica's capacity at the plan's latency targets (docs/method.md, 'Measuring a replica's goodput').
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from console.plan.model import Targets
from console.sim.engine import Engine, SimRequest
from console.sim.traffic import LengthSampler, arrival_gap


@dataclass(frozen=True)
class Sample:
    at: float
    running: int
    waiting: int
    kv_usage: float


@dataclass
class OfflineRun:
    engine: Engine
    finished: list[SimRequest] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    submitted: int = 0

    def after(self, warmup: float) -> list[SimRequest]:
        """Requests that arrived after the warm-up, finished or not by the end of the run."""
        return [r for r in self.finished if r.arrival >= warmup]

    def steady(self, warmup: float) -> list[Sample]:
        return [s for s in self.samples if s.at >= warmup]

    def mean_in_flight(self, warmup: float) -> float:
        samples = self.steady(warmup)
        return sum(s.running + s.waiting for s in samples) / len(samples)

    def mean_stream_tokens_per_second(self, warmup: float) -> float:
        """Per-stream decode speed: 1 / mean per-request TPOT over requests with more than one token."""
        tpots = [
            tpot
            for r in self.after(warmup)
            if r.generated > 1 and r.finished_reason != "abort" and (tpot := r.tpot) is not None
        ]
        return len(tpots) / sum(tpots)

    def goodput_share(self, targets: Targets, warmup: float, arrived_before: float) -> float:
        """Share of requests arriving in [warmup, arrived_before) that finished within TTFT and TPOT targets.

        Requests still in the system at the end count as missed, as a benchmark would count them.
        """
        window = [r for r in self.finished if warmup <= r.arrival < arrived_before]
        total = len(window) + sum(1 for r in self.unfinished if warmup <= r.arrival < arrived_before)
        if total == 0:
            return 1.0
        good = sum(1 for r in window if _within_targets(r, targets))
        return good / total

    @property
    def unfinished(self) -> list[SimRequest]:
        return list(self.engine.running) + list(self.engine.waiting)


def arrivals(
    rate: float,
    duration: float,
    sampler: LengthSampler,
    rng: random.Random,
    burstiness: float = 1.0,
) -> Iterator[tuple[float, int, int, int]]:
    """(arrival time, prompt, answer, max_tokens) at a constant rate for `duration` seconds."""
    t = arrival_gap(rng, rate, burstiness)
    while t < duration:
        prompt, answer, max_tokens = sampler.draw(rng)
        yield t, prompt, answer, max_tokens
        t += arrival_gap(rng, rate, burstiness)


def run(
    engine: Engine,
    stream: Iterator[tuple[float, int, int, int]],
    until: float,
    sample_every: float = 0.5,
) -> OfflineRun:
    result = OfflineRun(engine=engine)
    next_sample = 0.0

    def advance_to(t: float) -> None:
        nonlocal next_sample
        while next_sample <= t:
            _collect(engine.advance(next_sample))
            result.samples.append(Sample(next_sample, engine.num_running, engine.num_waiting, engine.kv_usage))
            next_sample += sample_every
        _collect(engine.advance(t))

    def _collect(updated: list[SimRequest]) -> None:
        result.finished.extend(r for r in updated if r.finished)

    for at, prompt, answer, max_tokens in stream:
        if at > until:
            break
        advance_to(at)
        engine.submit(SimRequest(f"r{result.submitted}", prompt, answer, max_tokens, at))
        result.submitted += 1
    advance_to(until)
    return result


def _within_targets(request: SimRequest, targets: Targets) -> bool:
    """Finished in full (stop or length; such a request has its TTFT, TPOT and end-to-end time) within targets."""
    ttft, tpot, e2e = request.ttft, request.tpot, request.e2e
    if request.finished_reason not in ("stop", "length") or ttft is None or tpot is None or e2e is None:
        return False
    return (
        ttft <= targets.ttft_p95_seconds
        and tpot <= targets.tpot_p95_seconds
        and (targets.e2e_p95_seconds is None or e2e <= targets.e2e_p95_seconds)
    )
