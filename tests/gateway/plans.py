"""A plan for the gateway's tests, built in code: a 70B replica on the simulator steps about 25 ms per token."""

from __future__ import annotations

from dataclasses import replace

from console.plan.model import Capacity, DataRules, Gpu, Model, Overflow, Plan, Replica, Targets, TokenStats, Workload

GB = 1e9


def flat_week(rps: float) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple([rps] * 24) for _ in range(7))


def office_week(peak: float, quiet: float) -> tuple[tuple[float, ...], ...]:
    weekday = tuple(peak if 8 <= h < 20 else quiet for h in range(24))
    return (weekday,) * 5 + (tuple([quiet] * 24),) * 2


def gateway_plan(
    mode: str = "bounded_queue",
    max_queue: int = 4,
    max_wait_seconds: float = 1.0,
    prompts_may_leave: bool = False,
    hosted_url: str | None = None,
) -> Plan:
    """The 70B assistant of docs/method.md's example A (INT8, TP 2), with an overflow section for the gateway."""
    return Plan(
        name="gateway-test",
        model=Model(
            "llama-70b",
            70e9,
            layers=80,
            kv_heads=8,
            head_dim=128,
            weight_precision="int8",
            kv_precision="fp16",
            max_model_len=8192,
        ),
        gpu=Gpu(
            "80GB-2TBs",
            memory_bytes=80 * GB,
            bandwidth_bytes_per_second=2e12,
            flops_per_second=989e12,
            price_per_hour=2.5,
        ),
        replica=Replica(tensor_parallel=2, usable_memory_share=0.90, max_num_seqs=256, block_size=16),
        workloads=(
            Workload(
                "assistant",
                "interactive",
                office_week(5.0, 1.0),
                TokenStats(200, 400, 40, 80),
                Targets(ttft_p95_seconds=1.5, tpot_p95_seconds=0.040),
            ),
        ),
        capacity=Capacity(rps_per_replica=5.0, source="manual"),
        data=DataRules(prompts_may_leave=prompts_may_leave),
        overflow=Overflow(
            mode=mode,
            max_queue=max_queue,
            max_wait_seconds=max_wait_seconds,
            hosted_model="hosted-big" if hosted_url else None,
            hosted_url=hosted_url,
        ),
    )


def with_model(plan: Plan, name: str) -> Plan:
    return replace(plan, model=replace(plan.model, name=name))
