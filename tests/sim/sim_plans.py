"""Plans for the simulator's tests, built in code from the seeds' worked examples (METHOD §4, §6)."""

from __future__ import annotations

from console.plan.model import Capacity, Gpu, Model, Plan, Replica, Targets, TokenStats, Workload

GB = 1e9


def flat_week(rps: float) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple([rps] * 24) for _ in range(7))


def office_week(peak: float, quiet: float) -> tuple[tuple[float, ...], ...]:
    """Weekdays: `peak` from 08:00 to 20:00, `quiet` otherwise; weekends quiet."""
    weekday = tuple(peak if 8 <= h < 20 else quiet for h in range(24))
    weekend = tuple([quiet] * 24)
    return (weekday,) * 5 + (weekend,) * 2


def example_a(
    bandwidth_efficiency: float = 0.70,
    compute_efficiency: float = 0.57,
    flops_per_second: float = 989e12,
    input_p95: float = 2000,
    output_max: float = 400,
    rps: float = 5.0,
) -> Plan:
    """The 70B assistant: INT8 weights, FP16 KV, TP 2 of 80 GB / 2 TB/s GPUs, 2000 in / 400 out, 5 rps."""
    return Plan(
        name="assistant-70b",
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
            flops_per_second=flops_per_second,
            price_per_hour=2.5,
        ),
        replica=Replica(
            tensor_parallel=2,
            usable_memory_share=0.90,
            bandwidth_efficiency=bandwidth_efficiency,
            compute_efficiency=compute_efficiency,
            max_num_seqs=256,
            block_size=16,
        ),
        workloads=(
            Workload(
                "assistant",
                "interactive",
                flat_week(rps),
                TokenStats(2000, input_p95, 400, output_max),
                Targets(ttft_p95_seconds=1.5, tpot_p95_seconds=0.040),
            ),
        ),
        capacity=Capacity(rps_per_replica=5.0, source="manual"),
    )


def office_assistant(rps_peak: float = 18.0, capacity: float = 5.0) -> Plan:
    """Example B's shape (METHOD §6): one GPU per replica, weekday peak 18 rps, nights and weekends 2 rps.

    The seed names no model or GPU. A 14B-class model (Qwen2.5-14B's shape) in INT8 (W8A16) on one
    H100 SXM, with the lengths and targets of plans/internal-assistant-18rps.yaml, is a choice
    whose simulated replica holds 99 % goodput to about 5-6 rps, as the seed's replica does.
    """
    return Plan(
        name="internal-assistant",
        model=Model(
            "qwen2.5-14b-class",
            14.7e9,
            layers=48,
            kv_heads=8,
            head_dim=128,
            weight_precision="int8",
            kv_precision="fp16",
            max_model_len=8192,
        ),
        gpu=Gpu(
            "H100-80GB-SXM",
            memory_bytes=80 * GB,
            bandwidth_bytes_per_second=3.35e12,
            flops_per_second=989e12,
            price_per_hour=3.0,
        ),
        replica=Replica(tensor_parallel=1, max_num_seqs=128, block_size=16),
        workloads=(
            Workload(
                "assistant",
                "interactive",
                office_week(rps_peak, 2.0),
                TokenStats(1200, 4000, 350, 1024),
                Targets(ttft_p95_seconds=1.0, tpot_p95_seconds=0.040, goodput_share=0.99),
            ),
        ),
        capacity=Capacity(rps_per_replica=capacity, source="manual"),
    )
