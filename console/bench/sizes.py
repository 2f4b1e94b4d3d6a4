"""`capcon plan --sizes`: every tensor-parallel size of the plan's replica, sized for the peak as the report sizes it.

The plan's own size is the report's: its capacity (measured, hand-written, or the estimate the
report itself uses), its replicas and its cost. The other sizes have no figure but the plan's
simulated replica swept offline (console/bench/estimate.py). When the plan's capacity did not
come from that simulation, the simulation is corrected by it: each other size's simulated rate
is scaled by the plan's capacity over the simulated rate at the plan's own size, as NVIDIA
Dynamo's planner corrects its interpolated throughput by actual over expected. A plan whose
capacity is the estimate needs no correction: its own size and the others rest on one simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.bench import estimate
from console.plan.model import Plan
from console.plan.sizing import TENSOR_PARALLEL_SIZES, replicas_for, size, usable_bytes, weight_bytes

# `capacity_from` of a row: where its rps per replica comes from. The plan's own size says what the report
# says of the plan's capacity (Sizing.capacity_origin): "hand-written", "measured" or "estimated".
FROM_ESTIMATE = "estimated"  # the plan's capacity, estimated on its simulated replica
FROM_SIMULATED = "simulated"  # the simulated replica's own rate at that size
FROM_CORRECTED = "simulated, corrected"  # the simulated rate times the correction


@dataclass(frozen=True)
class SizeEstimate:
    """One tensor-parallel size of the plan's replica, sized at the peak."""

    tensor_parallel: int
    rps_per_replica: float | None  # None: no rate held (or not swept: it covers the peak)
    covers_peak: bool  # one replica carries the whole interactive peak
    replicas: int | None  # for the peak, with redundancy
    gpus: int | None
    cost_per_hour: float | None
    over_budget: bool = False  # not estimated: it would simulate more than the budget allows
    capacity_from: str = FROM_SIMULATED
    simulated_rps_per_replica: float | None = None  # the simulated replica's rate, before any correction


@dataclass(frozen=True)
class SizeComparison:
    sizes: list[SizeEstimate]
    plan_tensor_parallel: int  # the report's size
    plan_rps_per_replica: float  # the report's capacity
    capacity_from: str  # the plan's capacity: "hand-written", "measured" or FROM_ESTIMATE
    # The plan's capacity over the simulated rate at its own size; None when the plan's capacity is the
    # simulation's (an estimate) or the simulation has no rate there to correct by.
    correction: float | None
    simulated_at_plan_size: float | None


def sizes_compared(plan: Plan) -> SizeComparison:
    """Every tensor-parallel size whose weights fit, at the plan's peak with its redundancy.

    What the planner's smallest-size rule leaves out: a larger size can carry more per GPU (a 70B model
    on 2 GPUs spends most of each step reading its weights). A size that carries the whole interactive
    peak in one replica is not swept further: one replica (plus redundancy) is its answer.
    """
    from console.bench.simulated import BudgetSpent, TokenBudget, plan_lengths, simulated_step  # noqa: PLC0415

    estimate.last_budget = budget = TokenBudget(estimate.SIZES_TOKENS)
    sizing = size(plan)
    peak, own = sizing.peak_rps, sizing.gpus_per_replica
    source = sizing.capacity_origin
    correction = simulated_own = None
    if source != FROM_ESTIMATE:
        try:
            simulated_own = estimate.swept_rps(plan, own, budget)
        except BudgetSpent:
            simulated_own = None
        if simulated_own:
            correction = plan.capacity.rps_per_replica / simulated_own
    scale = correction if correction is not None else 1.0
    targets, settings = estimate._targets_and_settings(plan)
    out = []
    for tp in TENSOR_PARALLEL_SIZES:
        if usable_bytes(plan, tp) <= weight_bytes(plan):
            continue
        if tp == own:  # the report's own figures, so the table and the report size one fleet one way
            replicas = sizing.replicas_with_redundancy
            out.append(
                SizeEstimate(
                    tp,
                    plan.capacity.rps_per_replica,
                    plan.capacity.rps_per_replica >= peak,
                    replicas,
                    replicas * tp,
                    sizing.fleet_cost_per_hour,
                    capacity_from=source,
                    simulated_rps_per_replica=simulated_own if source != FROM_ESTIMATE else None,
                )
            )
            continue
        at_size = estimate._at_size(plan, tp)
        known = (at_size, estimate.SEEDS) if (at_size, estimate.SEEDS) in estimate._sweeps else (at_size, 1)
        kept = estimate._sweeps.get(known)
        rps = kept.rps if kept is not None else None
        covers = rps is not None and rps * scale >= peak
        if known not in estimate._sweeps:
            try:
                # The corrected rate covers the peak when the simulated one covers the peak over the correction.
                rate = peak / scale
                lengths = plan_lengths(at_size, settings.count(rate))
                covers = simulated_step(at_size, lengths, rate, settings, targets, budget).holds(targets)
                rps = None if covers else estimate.swept_rps(plan, tp, budget)
            except BudgetSpent:
                out.append(SizeEstimate(tp, None, False, None, None, None, over_budget=True))
                continue
        kind = FROM_CORRECTED if correction is not None else FROM_SIMULATED
        if covers:
            replicas = 1 + plan.redundancy
        elif rps is None:
            out.append(SizeEstimate(tp, None, False, None, None, None, capacity_from=kind))
            continue
        else:
            replicas = replicas_for(peak, rps * scale) + plan.redundancy
        out.append(
            SizeEstimate(
                tp,
                rps * scale if rps is not None else None,
                covers,
                replicas,
                replicas * tp,
                replicas * tp * plan.gpu.price_per_hour,
                capacity_from=kind,
                simulated_rps_per_replica=rps,
            )
        )
    return SizeComparison(out, own, plan.capacity.rps_per_replica, source, correction, simulated_own)
