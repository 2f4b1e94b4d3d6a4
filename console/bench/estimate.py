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

from dataclasses import replace
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
ESTIMATE_TOKENS = 20_000_000
SIZES_TOKENS = 40_000_000
last_budget: TokenBudget | None = None  # what the latest estimate or comparison spent (for tests)
SEEDS = 3  # steps averaged where one would be too noisy
MIN_START_RPS = 0.05  # the sweep starts at the roofline's rate at the TPOT target, never below this

if TYPE_CHECKING:
    from console.bench.measure import BenchTargets
    from console.bench.runner import StepSettings
    from console.bench.simulated import TokenBudget

# A console with several plans, or a re-read, sweeps once per plan (and size).
_estimates: dict[Plan, Capacity] = {}
_sweeps: dict[Plan, float | None] = {}


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
    from console.bench.simulated import BudgetSpent, TokenBudget  # noqa: PLC0415

    global last_budget
    last_budget = budget = TokenBudget(ESTIMATE_TOKENS)
    try:
        capacity = _estimate(draft, budget)
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
    targets, settings = _targets_and_settings(draft)
    fixed = draft.replica.tensor_parallel
    rps, used, tried = None, 0, []
    # The planner's rule is the smallest tensor-parallel size whose KV budget holds the peak's KV, and
    # that depends on the capacity: take the smallest size whose own estimate leads the rule back to it.
    for tp in (fixed,) if fixed is not None else TENSOR_PARALLEL_SIZES:
        found = _swept(draft, tp, budget)
        if found is None:
            continue
        tried.append((tp, found))
        chosen = size(replace(draft, capacity=Capacity(found, ESTIMATED))).gpus_per_replica
        if fixed is not None or chosen == tp:
            rps, used = found, tp
            break
    if rps is None and tried:  # no size is its own choice: the largest that carries anything
        used, rps = tried[-1]
    if rps is None:
        raise PlanError(
            f"{draft.source_path}:1: capacity: not given, and the plan's simulated replica meets the targets of "
            f"workload {workload.name!r} (p95 TTFT {targets.ttft:g} s, p95 TPOT {targets.tpot:g} s) at no rate "
            f"down to {Sweep.floor} rps; expected targets one replica can meet, or a measured capacity "
            f"({how_to_measure(draft)})"
        )
    note = (
        f"the plan's simulated replica swept offline at the targets of workload {workload.name!r} "
        f"(goodput {targets.share:.0%})"
    )
    unloaded = _goodput_at(draft, used, rps / 2, targets, settings, budget)
    if unloaded < targets.share + (1 - targets.share) / 2:
        # Requests that miss at any load (long prompts' prefill past the TTFT target, say) leave the
        # share barely met everywhere: where the sweep stops is then noise, not a knee.
        note += (
            f"; at half that rate goodput is still only {unloaded:.1%}: some requests miss the targets at any "
            "load, so this figure is noise-bound"
        )
    return Capacity(rps_per_replica=rps, source=ESTIMATED, note=f"{note}; measure it: {how_to_measure(draft)}")


def _targets_and_settings(plan: Plan) -> tuple[BenchTargets, StepSettings]:
    """The first interactive workload's targets, and `capcon bench`'s default steps at its burstiness."""
    # The simulator and the sweep only for a plan that needs them: every command reads plans through here.
    from console.bench.measure import targets_from  # noqa: PLC0415
    from console.bench.runner import StepSettings  # noqa: PLC0415

    workload = plan.interactive[0]
    settings = StepSettings(burstiness=workload.burstiness, max_tokens=max(1, round(workload.tokens.output_mean)))
    return targets_from(workload), settings


def _at_size(plan: Plan, tp: int) -> Plan:
    # The caches' key too: a sweep at a set size reads no capacity but its start rate (from 1 rps a replica).
    return replace(plan, capacity=Capacity(1.0, ESTIMATED), replica=replace(plan.replica, tensor_parallel=tp))


def _swept(plan: Plan, tp: int, budget: TokenBudget) -> float | None:
    """The sweep's capacity at tensor-parallel size `tp` (None: the weights do not fit, or no rate held)."""
    at_size = _at_size(plan, tp)
    if at_size in _sweeps:
        return _sweeps[at_size]
    from console.bench.simulated import plan_lengths, simulated_sweep  # noqa: PLC0415
    from console.bench.sweep import Sweep  # noqa: PLC0415

    found = None
    if usable_bytes(plan, tp) > weight_bytes(plan):
        targets, settings = _targets_and_settings(plan)
        sweep = Sweep(start=max(size(at_size).expected_rps_at_tpot_target, MIN_START_RPS))
        simulated_sweep(at_size, plan_lengths(at_size, LENGTHS), targets, settings, sweep, budget)
        found = sweep.capacity
    _sweeps[at_size] = found
    return found


def _goodput_at(
    plan: Plan, tp: int, rate: float, targets: BenchTargets, settings: StepSettings, budget: TokenBudget | None = None
) -> float:
    """Mean goodput share of a step at `rate` over a few seeds (one step is noisy at a 99 % share)."""
    from console.bench.simulated import plan_lengths, simulated_step  # noqa: PLC0415

    at_size = replace(plan, replica=replace(plan.replica, tensor_parallel=tp))
    shares = [
        simulated_step(
            at_size,
            plan_lengths(at_size, settings.count(rate), seed),
            rate,
            replace(settings, seed=seed),
            targets,
            budget,
        ).goodput_share
        for seed in range(SEEDS)
    ]
    return sum(shares) / len(shares)


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
