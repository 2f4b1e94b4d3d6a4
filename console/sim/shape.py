"""What one simulated replica is made of, derived from a plan: bytes, blocks, rates.

The sizing formulas live in the planner (`console.plan.sizing`, docs/method.md): the
simulator uses its weight bytes, KV bytes per token, usable memory and tensor
parallel choice, so the simulator and the plan agree by construction. This
module only turns them into what the engine steps with (KV blocks, token budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from console.plan import catalog, sizing
from console.plan.model import Plan

GIB = 1024**3
# vLLM's default max_model_len comes from the model config; without one in the plan we assume this.
DEFAULT_MAX_MODEL_LEN = 8192


@dataclass(frozen=True)
class ReplicaShape:
    model_name: str
    parameters: float
    tensor_parallel: int
    weight_bytes: float  # whole replica
    kv_bytes_per_token: float  # whole replica (all GPUs)
    kv_budget_bytes: float  # whole replica
    block_size: int
    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    bandwidth_bytes_per_second: float  # per GPU, datasheet
    flops_per_second: float  # per GPU, datasheet, at the plan's compute precision
    bandwidth_efficiency: float
    compute_efficiency: float
    gpu_memory_bytes: float
    usable_memory_share: float

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.weight_bytes / self.tensor_parallel

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def replica_shape(plan: Plan) -> ReplicaShape:
    tp = plan.replica.tensor_parallel or sizing.size(plan).gpus_per_replica
    weight_bytes = sizing.weight_bytes(plan)
    kv_per_token = sizing.kv_bytes_per_token(plan)
    kv_budget = sizing.usable_bytes(plan, tp) - weight_bytes
    block = plan.replica.block_size
    num_blocks = max(0, int(kv_budget // (kv_per_token * block)))
    max_model_len = plan.model.max_model_len or DEFAULT_MAX_MODEL_LEN
    batched = catalog.default_max_num_batched_tokens(plan.gpu)
    return ReplicaShape(
        model_name=plan.model.name,
        parameters=plan.model.parameters,
        tensor_parallel=tp,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_per_token,
        kv_budget_bytes=kv_budget,
        block_size=block,
        num_blocks=num_blocks,
        max_num_seqs=plan.replica.max_num_seqs,
        max_num_batched_tokens=batched,
        max_model_len=max_model_len,
        bandwidth_bytes_per_second=plan.gpu.bandwidth_bytes_per_second,
        flops_per_second=sizing.flops_per_gpu(plan),
        bandwidth_efficiency=plan.replica.bandwidth_efficiency,
        compute_efficiency=plan.replica.compute_efficiency,
        gpu_memory_bytes=plan.gpu.memory_bytes,
        usable_memory_share=plan.replica.usable_memory_share,
    )


def blocks_for(tokens: int, block_size: int) -> int:
    return math.ceil(tokens / block_size) if tokens > 0 else 0
