"""Replica sizing and cost: memory, KV, Little's law, decode, prefill, fleet, cost.

The method is written out in docs/method.md, 'Sizing a replica' to 'From one replica to a fleet'.

Every figure comes twice where the method is an ideal: the ideal (datasheet
bandwidth and FLOP/s, the figures the worked examples use) and the
expected one (the same at the plan's bandwidth and compute efficiencies, as
measured on real hardware). Margins are judged on the expected figures.

The method is circular: concurrency sets the live KV, the live KV sets the
decode step, the step sets per-stream speed, the speed sets time in system, and
time in system sets concurrency (Little's law). `_operate` solves that loop by
fixed-point iteration; example A's hand figures "about 14 s, about 70 requests" are
one pass of the same loop, rounded (the fixed point is 13.2 s and 66 requests).

Time in system = queue allowance (the plan's `queue_seconds`, an assumption about
waiting) + prefill of a mean prompt (2 FLOP per parameter per token at the
replica's FLOP/s) + mean output tokens x decode step. In example A that is
0.8 s + 0.19 s, the "about 1 s queue + prefill" of example A, plus 400 x 30 ms.
The batch in a step is capped by max_num_seqs and by the requests whose KV fits
the budget (vLLM queues the rest); the cap keeps the iteration bounded.

Figures marked "per replica" are at the peak spread over `replicas_for_peak`
replicas: the load each carries when the N+1 spare is lost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from console.plan import advice, catalog
from console.plan.model import TENSOR_PARALLEL_SIZES, Gpu, Plan, Workload

FLOP_PER_PARAMETER_PER_TOKEN = 2.0  # prefill costs about 2 FLOP per parameter per token (docs/method.md)
MAX_ITERATIONS = 100_000


@dataclass(frozen=True)
class Demand:
    """The interactive traffic the fleet is sized for: all interactive workloads together."""

    peak_rps: float
    peak_weekday: int
    peak_hour: int
    mean_rps: float
    input_tokens_mean: float  # weighted by each workload's rps at the peak hour
    output_tokens_mean: float
    long_request_tokens: float  # the longest p95 input + max output among them
    queue_seconds: float
    ttft_target_seconds: float  # the strictest
    tpot_target_seconds: float
    output_tokens_per_hour_mean: float


def interactive_demand(plan: Plan) -> Demand:
    workloads = plan.interactive
    totals = [[sum(w.rps_by_hour[d][h] for w in workloads) for h in range(24)] for d in range(7)]
    peak_rps, weekday, hour = max((totals[d][h], -d, -h) for d in range(7) for h in range(24))
    weekday, hour = -weekday, -hour

    def at_peak(value: Callable[[Workload], float]) -> float:
        return sum(w.rps_by_hour[weekday][hour] * value(w) for w in workloads) / peak_rps

    return Demand(
        peak_rps=peak_rps,
        peak_weekday=weekday,
        peak_hour=hour,
        mean_rps=sum(map(sum, totals)) / (7 * 24),
        input_tokens_mean=at_peak(lambda w: w.tokens.input_mean),
        output_tokens_mean=at_peak(lambda w: w.tokens.output_mean),
        long_request_tokens=max(w.tokens.input_p95 + w.tokens.output_max for w in workloads),
        queue_seconds=at_peak(lambda w: w.queue_seconds),
        ttft_target_seconds=min(w.targets.ttft_p95_seconds for w in workloads),
        tpot_target_seconds=min(w.targets.tpot_p95_seconds for w in workloads),
        output_tokens_per_hour_mean=sum(w.mean_rps * w.tokens.output_mean for w in workloads) * 3600.0,
    )


@dataclass(frozen=True)
class _Operating:
    """One replica's decode operating point at one pair of bandwidth and FLOP/s."""

    prefill_seconds: float
    queue_and_prefill_seconds: float
    time_in_system_seconds: float
    concurrency: float
    batch: float
    decode_step_seconds: float
    stream_tokens_per_second: float
    aggregate_decode_tokens_per_second: float
    kv_needed_bytes: float
    kv_margin_share: float | None
    batch_limited: bool
    rps_at_tpot_target: float
    prefill_compute_share: float


def _operate(
    *,
    rps: float,
    input_tokens: float,
    output_tokens: float,
    queue_seconds: float,
    tensor_parallel: int,
    parameters: float,
    weight_bytes: float,
    kv_bytes_per_request: float,
    kv_budget_bytes: float,
    bandwidth: float,
    flops: float,
    max_num_seqs: int,
    tpot_target: float,
) -> _Operating:
    replica_flops = tensor_parallel * flops
    prefill_seconds = input_tokens * FLOP_PER_PARAMETER_PER_TOKEN * parameters / replica_flops
    queue_and_prefill = queue_seconds + prefill_seconds
    # Decode step = (weights per GPU + that GPU's share of live KV) / bandwidth per GPU = a + b x batch.
    fixed = weight_bytes / tensor_parallel / bandwidth
    per_sequence = kv_bytes_per_request / tensor_parallel / bandwidth
    kv_sequences = math.floor(kv_budget_bytes / kv_bytes_per_request) if kv_budget_bytes > 0 else 0
    limit = max(1, min(max_num_seqs, kv_sequences))  # vLLM holds no more in the batch

    def concurrency_after(c: float) -> float:
        return rps * (queue_and_prefill + output_tokens * (fixed + per_sequence * min(c, limit)))

    # Monotone and bounded by the batch limit, so the iteration always settles; but when each
    # request in flight adds nearly one more (slope near 1) it settles only after millions of
    # passes. The loop is c = a + b min(c, limit): its least fixed point, which iterating from
    # 0 reaches, is a / (1 - b) when that is within the limit, else a + b limit. The iteration
    # starts there and settles at once.
    a = concurrency_after(0.0)
    b = rps * output_tokens * per_sequence
    concurrency = a / (1.0 - b) if b < 1.0 and a / (1.0 - b) <= limit else a + b * limit
    for _ in range(MAX_ITERATIONS):
        following = concurrency_after(concurrency)
        settled = abs(following - concurrency) <= 1e-12 * max(1.0, concurrency)
        concurrency = following
        if settled:
            break
    batch = min(concurrency, limit)
    step = fixed + per_sequence * batch
    kv_needed = concurrency * kv_bytes_per_request
    # The largest rps whose stream still meets the TPOT target: batch at step = target, within the
    # limit. A decode roofline: prefill stalls and queueing are what the measured capacity adds.
    target_batch = min((tpot_target - fixed) / per_sequence, limit) if tpot_target > fixed else 0.0
    rps_at_tpot_target = (
        target_batch / (queue_and_prefill + output_tokens * (fixed + per_sequence * target_batch))
        if target_batch > 0
        else 0.0
    )
    return _Operating(
        prefill_seconds=prefill_seconds,
        queue_and_prefill_seconds=queue_and_prefill,
        time_in_system_seconds=concurrency / rps,
        concurrency=concurrency,
        batch=batch,
        decode_step_seconds=step,
        stream_tokens_per_second=1.0 / step,
        aggregate_decode_tokens_per_second=batch / step,
        kv_needed_bytes=kv_needed,
        kv_margin_share=(1.0 - kv_needed / kv_budget_bytes) if kv_budget_bytes > 0 else None,
        batch_limited=concurrency > limit,
        rps_at_tpot_target=rps_at_tpot_target,
        prefill_compute_share=rps * input_tokens * FLOP_PER_PARAMETER_PER_TOKEN * parameters / replica_flops,
    )


@dataclass(frozen=True)
class Sizing:
    # Inputs, as the sizing read them from the plan (SI units).
    plan_name: str
    model_name: str
    gpu_name: str
    parameters: float
    layers: int
    kv_heads: int
    head_dim: int
    weight_precision: str
    kv_precision: str
    weight_bytes_per_parameter: float
    kv_bytes_per_element: int
    gpu_memory_bytes: float
    gpu_bandwidth_bytes_per_second: float
    gpu_flops_per_second: float  # dense, at the compute precision
    compute_precision: str  # what the GEMMs run at: bf16, fp16, fp8, int8
    gpu_price_per_hour: float
    usable_memory_share: float
    overhead_bytes_per_gpu: float
    tensor_parallel_auto: bool
    bandwidth_efficiency: float
    compute_efficiency: float
    max_num_seqs: int
    peak_rps: float
    peak_weekday: int
    peak_hour: int
    mean_rps: float
    rps_per_replica_measured: float
    capacity_source: str
    capacity_estimated: bool  # no measurement: the planner's estimate (ESTIMATED_KEYS rest on it)
    capacity_note: str
    capacity_low: float | None  # an estimate's band (None: measured)
    capacity_high: float | None
    redundancy: int
    per_replica_peak_rps: float
    input_tokens_mean: float
    output_tokens_mean: float
    tokens_held_per_request: float
    long_request_tokens: float
    queue_seconds: float
    ttft_target_seconds: float
    tpot_target_seconds: float
    # The method's figures (ideal: datasheet bandwidth and FLOP/s). Keys of `capcon plan --json`.
    kv_bytes_per_token: float
    weight_bytes: float
    gpus_per_replica: int
    usable_bytes_per_replica: float
    kv_budget_bytes: float
    time_in_system_seconds: float
    concurrency: float
    kv_needed_bytes: float
    kv_margin_share: float | None
    decode_step_seconds: float
    stream_tokens_per_second: float
    aggregate_decode_tokens_per_second: float
    required_decode_tokens_per_second: float
    prefill_flops_per_second: float
    single_stream_ceiling_tokens_per_second: float
    replicas_for_peak: int
    replicas_with_redundancy: int
    fleet_cost_per_hour: float
    cost_per_million_tokens_peak: float
    cost_per_million_tokens_mean: float
    # Further ideal figures.
    prefill_seconds: float
    queue_and_prefill_seconds: float
    batch_limit: int
    rps_at_tpot_target: float
    prefill_compute_share: float
    output_tokens_per_hour_peak: float
    output_tokens_per_hour_mean: float
    # The same at the plan's efficiencies.
    expected_prefill_seconds: float
    expected_queue_and_prefill_seconds: float
    expected_time_in_system_seconds: float
    expected_concurrency: float
    expected_kv_needed_bytes: float
    expected_kv_margin_share: float | None
    expected_decode_step_seconds: float
    expected_stream_tokens_per_second: float
    expected_aggregate_decode_tokens_per_second: float
    expected_batch_limited: bool
    expected_rps_at_tpot_target: float
    expected_prefill_compute_share: float
    # The roofline's capacity: the lower of the decode rate at the TPOT target and the rate whose prompt and
    # answer tokens use all the compute (both at the plan's efficiencies), and which of the two it is.
    expected_compute_rps: float
    roofline_rps: float
    roofline_limit: str  # "decode at the TPOT target" or "compute"
    weights_fit: bool
    warnings: tuple[str, ...]

    @property
    def capacity_origin(self) -> str:
        """Where the plan's capacity comes from, in one word wherever the report names it.

        A benchmark's figure is measured, whatever it ran against (`source: simulated` is `capcon bench`
        against the simulator); `source: manual` was written by hand; no capacity at all is estimated.
        """
        if self.capacity_estimated:
            return "estimated"
        return "hand-written" if self.capacity_source == "manual" else "measured"


# What vLLM runs each weight precision's GEMMs at when the plan does not say: FP8 checkpoints as W8A8 FP8
# (Hopper, Ada; on a GPU without FP8 tensor cores the weights are dequantised, W8A16), 4-bit ones dequantised
# to 16 bits (AWQ, GPTQ Marlin: W4A16). INT8 is either (W8A8 SmoothQuant or compressed-tensors, W8A16 GPTQ):
# the slower reading, 16 bits, unless the plan says `compute_precision: int8`.
_DEFAULT_COMPUTE: dict[str, str] = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "bf16", "int4": "bf16"}


def compute_precision(plan: Plan) -> str:
    """The precision the replica's matrix multiplies run at: the plan's `compute_precision`, else from its weights."""
    if plan.model.compute_precision is not None:
        return plan.model.compute_precision
    wanted = _DEFAULT_COMPUTE[plan.model.weight_precision]
    return wanted if precision_flops(plan.gpu, wanted) is not None else "bf16"


def precision_flops(gpu: Gpu, precision: str) -> float | None:
    """Dense FLOP/s of one GPU at `precision` (None: the GPU has no tensor cores for it)."""
    if precision == "fp8":
        return gpu.fp8_flops_per_second
    if precision == "int8":
        return gpu.int8_flops_per_second
    return gpu.flops_per_second  # fp16 and bf16 run at the same rate


def flops_per_gpu(plan: Plan) -> float:
    """Dense FLOP/s of one of the replica's GPUs at the plan's compute precision (datasheet)."""
    return precision_flops(plan.gpu, compute_precision(plan)) or plan.gpu.flops_per_second


def weight_bytes(plan: Plan) -> float:
    return plan.model.parameters * catalog.WEIGHT_BYTES_PER_PARAMETER[plan.model.weight_precision]


def kv_bytes_per_token(plan: Plan) -> float:
    m = plan.model
    return 2.0 * m.layers * m.kv_heads * m.head_dim * catalog.KV_BYTES_PER_ELEMENT[m.kv_precision]


def usable_bytes(plan: Plan, tensor_parallel: int) -> float:
    per_gpu = plan.gpu.memory_bytes * plan.replica.usable_memory_share - plan.replica.overhead_bytes_per_gpu
    return tensor_parallel * per_gpu


def replicas_for(rps: float, rps_per_replica: float) -> int:
    """ceil(rps / capacity), robust to float noise (15 / 5 is 3, not 4)."""
    return max(0, math.ceil(rps / rps_per_replica - 1e-9))


def _ideal(plan: Plan, demand: Demand, tensor_parallel: int, rps: float) -> _Operating:
    return _at(plan, demand, tensor_parallel, rps, bandwidth_share=1.0, compute_share=1.0)


def _at(
    plan: Plan, demand: Demand, tensor_parallel: int, rps: float, *, bandwidth_share: float, compute_share: float
) -> _Operating:
    held = demand.input_tokens_mean + demand.output_tokens_mean
    return _operate(
        rps=rps,
        input_tokens=demand.input_tokens_mean,
        output_tokens=demand.output_tokens_mean,
        queue_seconds=demand.queue_seconds,
        tensor_parallel=tensor_parallel,
        parameters=plan.model.parameters,
        weight_bytes=weight_bytes(plan),
        kv_bytes_per_request=held * kv_bytes_per_token(plan),
        kv_budget_bytes=usable_bytes(plan, tensor_parallel) - weight_bytes(plan),
        bandwidth=plan.gpu.bandwidth_bytes_per_second * bandwidth_share,
        flops=flops_per_gpu(plan) * compute_share,
        max_num_seqs=plan.replica.max_num_seqs,
        tpot_target=demand.tpot_target_seconds,
    )


def _compute_rps(plan: Plan, demand: Demand, tensor_parallel: int) -> float:
    """Requests/s whose prompt and answer tokens take all the replica's FLOP/s at the compute efficiency."""
    tokens = demand.input_tokens_mean + demand.output_tokens_mean
    flops = tensor_parallel * flops_per_gpu(plan) * plan.replica.compute_efficiency
    return flops / (tokens * FLOP_PER_PARAMETER_PER_TOKEN * plan.model.parameters)


def choose_tensor_parallel(plan: Plan, demand: Demand, rps: float) -> int:
    """The smallest TP size whose KV budget holds the peak's KV (ideal), else one long request.

    docs/method.md, 'Sizing a replica'.

    "A useful KV budget" is read as: room for the KV the peak concurrency needs; failing
    that at every size, room for at least one request of p95 input + max output.
    """
    if plan.replica.tensor_parallel is not None:
        return plan.replica.tensor_parallel
    weights, per_token = weight_bytes(plan), kv_bytes_per_token(plan)
    for tp in TENSOR_PARALLEL_SIZES:
        budget = usable_bytes(plan, tp) - weights
        if budget > 0 and _ideal(plan, demand, tp, rps).kv_needed_bytes <= budget:
            return tp
    for tp in TENSOR_PARALLEL_SIZES:
        if usable_bytes(plan, tp) - weights >= demand.long_request_tokens * per_token:
            return tp
    return TENSOR_PARALLEL_SIZES[-1]


def size(plan: Plan) -> Sizing:
    demand = interactive_demand(plan)
    capacity = plan.capacity.rps_per_replica
    replicas_peak = max(1, replicas_for(demand.peak_rps, capacity))
    replicas_total = replicas_peak + plan.redundancy
    per_replica_rps = demand.peak_rps / replicas_peak
    tp = choose_tensor_parallel(plan, demand, per_replica_rps)
    weights, per_token = weight_bytes(plan), kv_bytes_per_token(plan)
    usable = usable_bytes(plan, tp)
    budget = usable - weights
    held = demand.input_tokens_mean + demand.output_tokens_mean
    ideal = _ideal(plan, demand, tp, per_replica_rps)
    expected = _at(
        plan,
        demand,
        tp,
        per_replica_rps,
        bandwidth_share=plan.replica.bandwidth_efficiency,
        compute_share=plan.replica.compute_efficiency,
    )
    cost_per_hour = replicas_total * tp * plan.gpu.price_per_hour
    tokens_hour_peak = demand.peak_rps * demand.output_tokens_mean * 3600.0
    kv_sequences = math.floor(budget / (held * per_token)) if budget > 0 else 0
    sizing = Sizing(
        plan_name=plan.name,
        model_name=plan.model.name,
        gpu_name=plan.gpu.name,
        parameters=plan.model.parameters,
        layers=plan.model.layers,
        kv_heads=plan.model.kv_heads,
        head_dim=plan.model.head_dim,
        weight_precision=plan.model.weight_precision,
        kv_precision=plan.model.kv_precision,
        weight_bytes_per_parameter=catalog.WEIGHT_BYTES_PER_PARAMETER[plan.model.weight_precision],
        kv_bytes_per_element=catalog.KV_BYTES_PER_ELEMENT[plan.model.kv_precision],
        gpu_memory_bytes=plan.gpu.memory_bytes,
        gpu_bandwidth_bytes_per_second=plan.gpu.bandwidth_bytes_per_second,
        gpu_flops_per_second=flops_per_gpu(plan),
        compute_precision=compute_precision(plan),
        gpu_price_per_hour=plan.gpu.price_per_hour,
        usable_memory_share=plan.replica.usable_memory_share,
        overhead_bytes_per_gpu=plan.replica.overhead_bytes_per_gpu,
        tensor_parallel_auto=plan.replica.tensor_parallel is None,
        bandwidth_efficiency=plan.replica.bandwidth_efficiency,
        compute_efficiency=plan.replica.compute_efficiency,
        max_num_seqs=plan.replica.max_num_seqs,
        peak_rps=demand.peak_rps,
        peak_weekday=demand.peak_weekday,
        peak_hour=demand.peak_hour,
        mean_rps=demand.mean_rps,
        rps_per_replica_measured=capacity,
        capacity_source=plan.capacity.source,
        capacity_estimated=plan.capacity.estimated,
        capacity_note=plan.capacity.note,
        capacity_low=plan.capacity.low,
        capacity_high=plan.capacity.high,
        redundancy=plan.redundancy,
        per_replica_peak_rps=per_replica_rps,
        input_tokens_mean=demand.input_tokens_mean,
        output_tokens_mean=demand.output_tokens_mean,
        tokens_held_per_request=held,
        long_request_tokens=demand.long_request_tokens,
        queue_seconds=demand.queue_seconds,
        ttft_target_seconds=demand.ttft_target_seconds,
        tpot_target_seconds=demand.tpot_target_seconds,
        kv_bytes_per_token=per_token,
        weight_bytes=weights,
        gpus_per_replica=tp,
        usable_bytes_per_replica=usable,
        kv_budget_bytes=budget,
        time_in_system_seconds=ideal.time_in_system_seconds,
        concurrency=ideal.concurrency,
        kv_needed_bytes=ideal.kv_needed_bytes,
        kv_margin_share=ideal.kv_margin_share,
        decode_step_seconds=ideal.decode_step_seconds,
        stream_tokens_per_second=ideal.stream_tokens_per_second,
        aggregate_decode_tokens_per_second=ideal.aggregate_decode_tokens_per_second,
        required_decode_tokens_per_second=per_replica_rps * demand.output_tokens_mean,
        prefill_flops_per_second=per_replica_rps
        * demand.input_tokens_mean
        * FLOP_PER_PARAMETER_PER_TOKEN
        * plan.model.parameters,
        single_stream_ceiling_tokens_per_second=tp * plan.gpu.bandwidth_bytes_per_second / weights,
        replicas_for_peak=replicas_peak,
        replicas_with_redundancy=replicas_total,
        fleet_cost_per_hour=cost_per_hour,
        cost_per_million_tokens_peak=cost_per_hour / (tokens_hour_peak / 1e6),
        cost_per_million_tokens_mean=cost_per_hour / (demand.output_tokens_per_hour_mean / 1e6),
        prefill_seconds=ideal.prefill_seconds,
        queue_and_prefill_seconds=ideal.queue_and_prefill_seconds,
        batch_limit=min(plan.replica.max_num_seqs, kv_sequences),
        rps_at_tpot_target=ideal.rps_at_tpot_target,
        prefill_compute_share=ideal.prefill_compute_share,
        output_tokens_per_hour_peak=tokens_hour_peak,
        output_tokens_per_hour_mean=demand.output_tokens_per_hour_mean,
        expected_prefill_seconds=expected.prefill_seconds,
        expected_queue_and_prefill_seconds=expected.queue_and_prefill_seconds,
        expected_time_in_system_seconds=expected.time_in_system_seconds,
        expected_concurrency=expected.concurrency,
        expected_kv_needed_bytes=expected.kv_needed_bytes,
        expected_kv_margin_share=expected.kv_margin_share,
        expected_decode_step_seconds=expected.decode_step_seconds,
        expected_stream_tokens_per_second=expected.stream_tokens_per_second,
        expected_aggregate_decode_tokens_per_second=expected.aggregate_decode_tokens_per_second,
        expected_batch_limited=expected.batch_limited,
        expected_rps_at_tpot_target=expected.rps_at_tpot_target,
        expected_prefill_compute_share=expected.prefill_compute_share,
        expected_compute_rps=(compute_rps := _compute_rps(plan, demand, tp)),
        roofline_rps=min(expected.rps_at_tpot_target, compute_rps),
        roofline_limit="compute" if compute_rps < expected.rps_at_tpot_target else "decode at the TPOT target",
        weights_fit=budget > 0,
        warnings=(),
    )
    return replace(sizing, warnings=advice.warnings_for(plan, sizing))
