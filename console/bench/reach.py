"""What no rate can change: the requests of a workload that miss a target even alone on an idle replica.

A goodput share is reachable only if at most 1 - share of the requests would miss a target with the whole
replica to themselves. The longest prompts are the usual culprits: their prefill alone can take longer than the
TTFT target, and at goodput 99 % the tail of the prompt distribution decides. A sweep cannot see this (every
rate it tries falls, and it reports its floor), so the estimate asks first, from the simulator's own step
formula (console/sim/engine.py) and the same length distribution the sweep draws from (console/sim/traffic.py):

* TTFT alone: the prompt's prefill in chunks of the step's token budget, each chunk a step;
* TPOT alone: a decode step of one request over its context (at the middle of its answer);
* E2E alone: TTFT + (answer - 1) x TPOT.

From these, the levers are computed, not guessed: the longest prompt whose prefill alone meets the TTFT target
(the input cap: `max_model_len` or a per-request cap), the goodput share reachable as the plan stands, and the
smallest larger tensor-parallel size and FP8 KV where they make the share reachable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from fractions import Fraction

from console.bench.boundary import percent_text, share_down_text, within, written
from console.plan.model import TENSOR_PARALLEL_SIZES, Plan
from console.plan.sizing import usable_bytes, weight_bytes
from console.sim.engine import Engine
from console.sim.shape import ReplicaShape, replica_shape
from console.sim.traffic import LengthSampler

DRAWS = 20_000  # lengths drawn to measure the shares (a share of 0.1 % is 20 requests)
SEED = 7


@dataclass(frozen=True)
class Alone:
    """One replica's figures for one request with the replica to itself."""

    shape: ReplicaShape
    engine: Engine

    @classmethod
    def of(cls, plan: Plan) -> Alone:
        shape = replica_shape(plan)
        return cls(shape, Engine(shape))

    def ttft(self, prompt: int) -> float:
        budget = self.shape.max_num_batched_tokens
        done, seconds = 0, 0.0
        while done < prompt:
            chunk = min(budget, prompt - done)
            done += chunk
            seconds += self.engine.decode_step_seconds(done, prefill_tokens=chunk)
        return seconds

    def tpot(self, prompt: int, answer: int) -> float:
        return self.engine.decode_step_seconds(prompt + answer // 2, decode_tokens=1)

    def longest_prompt_within(self, ttft_target: float, longest: int) -> int:
        """The longest prompt (at most `longest`) whose prefill alone meets `ttft_target`; 0 when none does."""
        if self.ttft(1) > ttft_target:
            return 0
        low, high = 1, longest
        if self.ttft(high) <= ttft_target:
            return high
        while high - low > 1:  # ttft grows with the prompt: bisect
            middle = (low + high) // 2
            if self.ttft(middle) <= ttft_target:
                low = middle
            else:
                high = middle
        return low


@dataclass(frozen=True)
class Reach:
    """The share of a workload's requests that miss a target alone, and why."""

    share: float  # the plan's goodput share
    drawn: int
    ttft_missing: int  # requests whose prefill alone is over the TTFT target
    tpot_missing: int
    e2e_missing: int
    missing: int  # requests missing any target (each counted once)
    input_cap: int  # the longest prompt whose prefill alone meets the TTFT target
    longest_prompt: int  # the longest prompt the workload sends (after the context cap)
    ttft_target: float
    tpot_target: float

    @property
    def reachable_share(self) -> float:
        return 1.0 - self.missing / self.drawn

    @property
    def reachable(self) -> bool:
        """At most 1 - share miss alone (exactly, for the share as written)."""
        return Fraction(self.drawn - self.missing, self.drawn) >= written(self.share)


def reach(plan: Plan, draws: int = DRAWS) -> Reach:
    """Reach of `plan`'s first interactive workload on its replica (tensor parallelism as the plan or shape has it)."""
    workload = plan.interactive[0]
    targets = workload.targets
    alone = Alone.of(plan)
    shape = alone.shape
    sampler = LengthSampler(workload.tokens, min(shape.max_model_len, shape.kv_capacity_tokens))
    rng = random.Random(SEED)
    lengths = [sampler.draw(rng) for _ in range(draws)]
    longest = max(prompt for prompt, _, _ in lengths)
    cap = alone.longest_prompt_within(targets.ttft_p95_seconds, max(longest, 1))
    ttft_missing = tpot_missing = e2e_missing = missing = 0
    for prompt, answer, _ in lengths:
        tpot = alone.tpot(prompt, answer)
        over_ttft = prompt > cap
        over_tpot = not within(tpot, targets.tpot_p95_seconds)
        over_e2e = targets.e2e_p95_seconds is not None and not within(
            alone.ttft(prompt) + max(0, answer - 1) * tpot, targets.e2e_p95_seconds
        )
        ttft_missing += over_ttft
        tpot_missing += over_tpot
        e2e_missing += over_e2e
        missing += over_ttft or over_tpot or over_e2e
    return Reach(
        share=targets.goodput_share,
        drawn=draws,
        ttft_missing=ttft_missing,
        tpot_missing=tpot_missing,
        e2e_missing=e2e_missing,
        missing=missing,
        input_cap=cap,
        longest_prompt=longest,
        ttft_target=targets.ttft_p95_seconds,
        tpot_target=targets.tpot_p95_seconds,
    )


def levers(plan: Plan, tp: int, found: Reach) -> list[str]:
    """The changes that make the share reachable, each computed on the plan so changed."""
    out = []
    workload = plan.interactive[0]
    if found.ttft_missing and found.input_cap > 0:
        max_len = found.input_cap + int(workload.tokens.output_max)
        out.append(
            f"cap inputs at {found.input_cap:,} tokens (model.max_model_len: {max_len:,}, or a per-request cap "
            "at the gateway)"
        )
    out.append(f"goodput_share at most {share_down_text(found.drawn - found.missing, found.drawn)}")
    for larger in (size for size in TENSOR_PARALLEL_SIZES if size > tp):
        if usable_bytes(plan, larger) <= weight_bytes(plan):
            continue
        bigger = replace(plan, replica=replace(plan.replica, tensor_parallel=larger))
        if reach(bigger).reachable:
            out.append(f"tensor_parallel: {larger} (prefill at {larger // tp}x the FLOP/s)")
            break
    if plan.model.kv_precision != "fp8":
        at_tp = replace(plan, replica=replace(plan.replica, tensor_parallel=tp))
        fp8_kv = replace(at_tp, model=replace(plan.model, kv_precision="fp8"))
        if reach(fp8_kv).reachable:
            out.append("kv_precision: fp8 (half the KV each step reads)")
    return out


def unreachable_words(plan: Plan, tp: int, found: Reach) -> str:
    """Why the plan's goodput share cannot be met at any rate, with the figures, and the levers."""
    workload = plan.interactive[0]
    parts = []
    if found.ttft_missing:
        parts.append(
            f"{found.ttft_missing / found.drawn:.1%} of requests (prompts over {found.input_cap:,} tokens, up to "
            f"{found.longest_prompt:,}) miss p95 TTFT {found.ttft_target:g} s on their prefill alone"
        )
    if found.tpot_missing:
        parts.append(f"{found.tpot_missing / found.drawn:.1%} miss p95 TPOT {found.tpot_target:g} s at a batch of one")
    if found.e2e_missing:
        parts.append(f"{found.e2e_missing / found.drawn:.1%} miss the end-to-end target alone")
    why = "; ".join(parts)
    return (
        f"goodput {percent_text(found.share)} of workload {workload.name!r} is unreachable at any rate on this "
        f"replica (TP {tp}): {why}, on an idle replica; expected a target it can reach: "
        + "; or ".join(levers(plan, tp, found))
    )
