"""A capacity for a plan no one has measured yet: the sweep `capcon bench` would run, on the plan's own
simulated replica.

The simulator steps at the plan's roofline and efficiencies (console/sim), so sweeping it offline
(console/bench/simulated.py, simulated time, no server) at the plan's first interactive workload, its
targets and its burstiness gives the rate at which goodput falls under the plan's share, in about a
second. That rate is an estimate: the simulator knows the method's formulas, not the team's prompts,
kernels or server, and every figure resting on it is reported as one until `capcon bench --write-plan`
puts a measured figure in its place.

The tensor-parallel size the planner picks depends on the capacity (the KV each replica holds at the
peak): without one in the plan, sizes are tried from the smallest up until one's estimate leads the
planner's rule back to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from console.plan import schema
from console.plan.model import ESTIMATED, Capacity, Plan
from console.plan.schema import PlanError
from console.plan.sizing import TENSOR_PARALLEL_SIZES, size, usable_bytes, weight_bytes

LENGTHS = 2_000  # requests drawn from the workload's token distributions, cycled through the steps
# Simulated tokens (prompt and answer) one estimate, and one --sizes comparison, may process: about
# 0.3-0.5 s of CPU a million. The shipped plans take 1.6-5.6 M (sizes: 5-17 M); a plan past it (answers
# of 100k tokens at hundreds of rps) is told to measure instead of waiting minutes.
ESTIMATE_TOKENS = 60_000_000
SIZES_TOKENS = 40_000_000
last_budget: TokenBudget | None = None  # what the latest estimate or comparison spent (for tests)
SEEDS = 3  # sweeps, each on its own draw of lengths and arrivals: the estimate is their median, the band their range
MISSES_TO_SEE = 3  # a step sends enough requests for this many misses at the goodput share's edge
MAX_STEP_REQUESTS = 2_000
MIN_START_RPS = 0.05  # the sweep starts at the roofline's rate at the TPOT target, never below this

if TYPE_CHECKING:
    from console.bench.estimate_store import Kept
    from console.bench.measure import BenchTargets
    from console.bench.reach import Reach
    from console.bench.runner import StepSettings
    from console.bench.simulated import TokenBudget

# A console with several plans, or a re-read, sweeps once per plan (and size).
_estimates: dict[Plan, Capacity] = {}
_sweeps: dict[tuple[Plan, int], Swept | None] = {}  # by plan at a size and the number of sweeps


def how_to_measure(plan: Plan) -> str:
    """The command that replaces the estimate with a measurement."""
    path = plan.source_path or "PLAN"
    return f"capcon bench --target URL --prompts FILE --plan {path} --write-plan"


def estimate_capacity(draft: Plan) -> Capacity:
    """The capacity of `draft`'s simulated replica at its first interactive workload's targets.

    `draft.capacity` is provisional (the loader's); only the tensor-parallel size reads it.
    PlanError when not even the sweep's lowest rate meets the targets, or when the estimate would
    simulate more than ESTIMATE_TOKENS.
    """
    if draft in _estimates:
        return _estimates[draft]
    from console.bench import estimate_store  # noqa: PLC0415
    from console.bench.simulated import BudgetSpent, TokenBudget  # noqa: PLC0415

    kept = estimate_store.read(draft)
    if kept is not None:
        capacity = _kept_capacity(draft, kept)
        _estimates[draft] = capacity
        return capacity
    global last_budget
    last_budget = budget = TokenBudget(ESTIMATE_TOKENS)
    try:
        found = _estimate(draft, budget)
        kept = estimate_store.write(draft, found.rps_per_replica, found.low, found.high, found.note)
        capacity = _kept_capacity(draft, kept)
    except BudgetSpent:
        workload = draft.interactive[0]
        raise PlanError(
            f"{draft.source_path}:1: capacity: not given, and estimating it would simulate more than "
            f"{ESTIMATE_TOKENS:,} tokens (workload {workload.name!r}: {workload.tokens.input_mean:,.0f} + "
            f"{workload.tokens.output_mean:,.0f} tokens a request); expected a measured capacity "
            f"({how_to_measure(draft)})"
        ) from None
    _estimates[draft] = capacity
    return capacity


def _estimate(draft: Plan, budget: TokenBudget) -> Capacity:
    from console.bench.sweep import Sweep  # noqa: PLC0415

    workload = draft.interactive[0]
    targets, _ = _targets_and_settings(draft)
    fixed = draft.replica.tensor_parallel
    found: Swept | None = None
    used, tried = 0, []
    # The planner's rule is the smallest tensor-parallel size whose KV budget holds the peak's KV, and
    # that depends on the capacity: take the smallest size whose own estimate leads the rule back to it.
    for tp in (fixed,) if fixed is not None else TENSOR_PARALLEL_SIZES:
        swept = _swept(draft, tp, budget)
        if swept is None or swept.rps is None:
            continue
        tried.append((tp, swept))
        chosen = size(replace(draft, capacity=Capacity(swept.rps, ESTIMATED))).gpus_per_replica
        if fixed is not None or chosen == tp:
            found, used = swept, tp
            break
    if found is None and tried:  # no size is its own choice: the largest that carries anything
        used, found = tried[-1]
    if found is None or found.rps is None:
        unreachable = _first_unreachable(draft)
        if unreachable is not None:
            tp, why = unreachable
            raise PlanError(f"{draft.source_path}:1: capacity: not given, and {why}")
        raise PlanError(
            f"{draft.source_path}:1: capacity: not given, and the plan's simulated replica meets the targets of "
            f"workload {workload.name!r} (p95 TTFT {targets.ttft:g} s, p95 TPOT {targets.tpot:g} s) at no rate "
            f"down to {Sweep.floor} rps; expected targets one replica can meet, or a measured capacity "
            f"({how_to_measure(draft)})"
        )
    note = (
        f"the plan's simulated replica (TP {used}) swept offline at the targets of workload {workload.name!r} "
        f"(goodput {targets.share:.0%}), {len(found.capacities)} sweeps of at least {found.requests:,} requests a "
        f"step: {_band_words(found)}"
    )
    if found.reach.missing:
        note += (
            f"; {found.reach.missing / found.reach.drawn:.1%} of requests miss a target even alone on an idle "
            f"replica (at most {found.reach.reachable_share:.1%} reachable)"
        )
    return Capacity(rps_per_replica=found.rps, source=ESTIMATED, note=note, low=found.low, high=found.high)


def _kept_capacity(draft: Plan, kept: Kept) -> Capacity:
    """The capacity of a kept estimate, its words saying when it was made and how to measure instead."""
    from console.bench.estimate_store import computed_words  # noqa: PLC0415

    note = f"{kept.note} ({computed_words(kept)}); measure it: {how_to_measure(draft)}"
    return Capacity(rps_per_replica=kept.rps, source=ESTIMATED, note=note, low=kept.low, high=kept.high)


@dataclass(frozen=True)
class Swept:
    """One tensor-parallel size's estimate: a sweep per seed, and what no rate changes."""

    capacities: tuple[float | None, ...]
    requests: int  # the least a step sent
    reach: Reach

    @property
    def _held(self) -> list[float]:
        return sorted(c for c in self.capacities if c is not None)

    @property
    def rps(self) -> float | None:
        """The median sweep's capacity (None: fewer than half the sweeps found a rate that held)."""
        held = self._held
        if 2 * len(held) < len(self.capacities):
            return None
        padded = [0.0] * (len(self.capacities) - len(held)) + held
        return padded[len(padded) // 2]

    @property
    def low(self) -> float:
        return self._held[0]

    @property
    def high(self) -> float:
        return self._held[-1]


def _band_words(found: Swept) -> str:
    shown = ", ".join(f"{c:.3g}" if c is not None else "none" for c in found.capacities)
    return f"{shown} rps"


def _first_unreachable(plan: Plan) -> tuple[int, str] | None:
    """The plan's first size whose weights fit and where the goodput share is unreachable, with the words."""
    from console.bench.reach import reach, unreachable_words  # noqa: PLC0415

    for tp in (plan.replica.tensor_parallel,) if plan.replica.tensor_parallel else TENSOR_PARALLEL_SIZES:
        if usable_bytes(plan, tp) <= weight_bytes(plan):
            continue
        at_size = _at_size(plan, tp)
        found = reach(at_size)
        if not found.reachable:
            return tp, unreachable_words(at_size, tp, found)
        return None
    return None


def _targets_and_settings(plan: Plan) -> tuple[BenchTargets, StepSettings]:
    """The first interactive workload's targets, and `capcon bench`'s default steps at its burstiness.

    Each step sends at least enough requests to see the share it is judged on: ten misses at the share's
    edge (1,000 requests at 99 %, 200 at 95 %), where a step of 100 could not tell 99 % from 98 %.
    """
    # The simulator and the sweep only for a plan that needs them: every command reads plans through here.
    from console.bench.measure import targets_from  # noqa: PLC0415
    from console.bench.runner import StepSettings  # noqa: PLC0415

    workload = plan.interactive[0]
    edge = max(1e-6, 1.0 - workload.targets.goodput_share)
    settings = StepSettings(
        burstiness=workload.burstiness,
        max_tokens=max(1, round(workload.tokens.output_mean)),
        min_requests=min(MAX_STEP_REQUESTS, max(StepSettings.min_requests, math.ceil(MISSES_TO_SEE / edge))),
    )
    return targets_from(workload), settings


def _at_size(plan: Plan, tp: int) -> Plan:
    # The caches' key too: a sweep at a set size reads no capacity but its start rate (from 1 rps a replica).
    return replace(plan, capacity=Capacity(1.0, ESTIMATED), replica=replace(plan.replica, tensor_parallel=tp))


def swept_rps(plan: Plan, tp: int, budget: TokenBudget, seeds: int = 1) -> float | None:
    """The capacity at tensor-parallel size `tp` over `seeds` sweeps (None: the weights do not fit, or no rate
    holds). `--sizes` compares sizes with one sweep each: a comparison, not the plan's figure."""
    found = _swept(plan, tp, budget, seeds)
    return found.rps if found is not None else None


def _swept(plan: Plan, tp: int, budget: TokenBudget, seeds: int = SEEDS) -> Swept | None:
    """The sweeps' capacities at tensor-parallel size `tp` (None: the weights do not fit, or no rate can hold)."""
    at_size = _at_size(plan, tp)
    if (at_size, seeds) in _sweeps:
        return _sweeps[at_size, seeds]
    from console.bench.reach import reach  # noqa: PLC0415
    from console.bench.simulated import plan_lengths, simulated_sweep  # noqa: PLC0415
    from console.bench.sweep import Sweep  # noqa: PLC0415

    found = None
    if usable_bytes(plan, tp) > weight_bytes(plan):
        reached = reach(at_size)
        if reached.reachable:
            targets, settings = _targets_and_settings(plan)
            start = max(size(at_size).expected_rps_at_tpot_target, MIN_START_RPS)
            capacities: list[float | None] = []
            for seed in range(seeds):
                # Each sweep on its own, from the same start: their spread is the estimate's uncertainty.
                sweep = Sweep(start=start)
                lengths = plan_lengths(at_size, LENGTHS, seed)
                simulated_sweep(at_size, lengths, targets, replace(settings, seed=seed), sweep, budget)
                capacities.append(sweep.capacity)
            found = Swept(tuple(capacities), settings.min_requests, reached)
    _sweeps[at_size, seeds] = found
    return found


def estimate_comment(plan: Plan) -> str:
    """YAML comment lines for a file exported from a plan whose capacity is estimated ("" when measured)."""
    if not plan.capacity.estimated:
        return ""
    return (
        f"# The plan's capacity, {plan.capacity.rps_per_replica:.4g} rps per replica, is ESTIMATED, not measured:\n"
        "# the load figures below rest on it. Measure it, write it into the plan and regenerate this file:\n"
        f"#   {how_to_measure(plan)}\n"
    )


def load_plan(path: str | Path) -> Plan:
    """The plan file at `path`, its capacity estimated when it gives none (what every command reads)."""
    return schema.load_plan(path, estimate=estimate_capacity)


def parse_plan(text: str, source_name: str) -> Plan:
    return schema.parse_plan(text, source_name, estimate=estimate_capacity)
