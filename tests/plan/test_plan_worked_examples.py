"""METHOD.md §3 (weights), §4 (example A) and §6 (example B), through `capcon plan --json`.

Tolerances follow the seeds' rounding: "about" figures are checked to about 10 %,
exact ones (KV bytes per token, 1.4 PFLOP/s, $10/h) exactly. The seed's
Little's-law figures are one pass of the method's loop; the planner solves the loop
to its fixed point (13.2 s, 66 requests), which the seed rounds to 14 s and 70.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from console.plan.report import to_json
from console.plan.schema import load_plan
from console.plan.sizing import size

PLANS = Path(__file__).resolve().parents[2] / "plans"
GB = 1e9


# METHOD §3 weights table: parameters -> {precision: (low, high) in GB}.
WEIGHTS = {
    "8B": {"fp16": (16, 16), "bf16": (16, 16), "int8": (8, 8), "fp8": (8, 8), "int4": (4, 5)},
    "70B": {"fp16": (140, 140), "int8": (70, 70), "int4": (35, 40)},
    "400B": {"fp16": (800, 800), "int8": (400, 400), "int4": (200, 230)},
}


@pytest.mark.parametrize(
    "parameters,precision,low,high",
    [(p, q, lo, hi) for p, table in WEIGHTS.items() for q, (lo, hi) in table.items()],
)
def test_weight_bytes_match_the_method_table(write_plan, plan_json, parameters, precision, low, high):
    path = write_plan(
        {"model": {"parameters": parameters, "weight_precision": precision}, "gpu": {"preset": "H200-141GB"}}
    )
    weight_gb = plan_json(path)["weight_bytes"] / GB
    assert low - 1e-9 <= weight_gb <= high + 1e-9


def test_400b_needs_a_multi_gpu_replica_even_quantised(write_plan, plan_json):
    path = write_plan({"model": {"parameters": "400B", "weight_precision": "int4"}, "gpu": {"preset": "H100-80GB-SXM"}})
    assert plan_json(path)["gpus_per_replica"] >= 4


def test_example_a_cli_matches_the_pure_core(plan_json):
    assert plan_json(PLANS / "assistant-70b.yaml") == to_json(size(load_plan(PLANS / "assistant-70b.yaml")))


def test_example_a_memory(plan_json):
    f = plan_json(PLANS / "assistant-70b.yaml")
    assert f["kv_bytes_per_token"] == 327_680  # 2 x 80 x 8 x 128 x 2 B
    assert 4000 * f["kv_bytes_per_token"] / GB == pytest.approx(1.3, abs=0.05)  # one 4,000-token request
    assert 50 * 4000 * f["kv_bytes_per_token"] / GB == pytest.approx(65, abs=1)  # fifty of them
    assert f["weight_bytes"] == pytest.approx(70 * GB)
    assert f["gpus_per_replica"] == 2  # one 80 GB GPU cannot hold 70 GB with useful cache
    assert f["usable_bytes_per_replica"] == pytest.approx(144 * GB)
    assert f["kv_budget_bytes"] == pytest.approx(74 * GB)


def test_example_a_littles_law_and_kv(plan_json):
    f = plan_json(PLANS / "assistant-70b.yaml")
    assert f["queue_and_prefill_seconds"] == pytest.approx(1.0, rel=0.05)  # "about 1 s queue + prefill"
    assert f["time_in_system_seconds"] == pytest.approx(14, rel=0.10)
    assert f["concurrency"] == pytest.approx(70, rel=0.10)
    assert f["concurrency"] == pytest.approx(5 * f["time_in_system_seconds"])  # Little's law, exactly
    assert f["tokens_held_per_request"] == 2400
    assert 2400 * f["kv_bytes_per_token"] / GB == pytest.approx(0.8, abs=0.05)  # about 0.8 GB each
    assert f["kv_needed_bytes"] / GB == pytest.approx(55, rel=0.10)
    assert f["kv_needed_bytes"] < f["kv_budget_bytes"]  # fits
    assert f["kv_margin_share"] == pytest.approx(0.25, abs=0.06)


def test_example_a_decode_and_prefill(plan_json):
    f = plan_json(PLANS / "assistant-70b.yaml")
    assert f["decode_step_seconds"] == pytest.approx(0.031, rel=0.05)
    assert f["stream_tokens_per_second"] == pytest.approx(30, rel=0.10)
    assert f["aggregate_decode_tokens_per_second"] == pytest.approx(2000, rel=0.10)
    assert f["required_decode_tokens_per_second"] == pytest.approx(2000)
    assert f["prefill_flops_per_second"] == pytest.approx(1.4e15)
    assert f["single_stream_ceiling_tokens_per_second"] == pytest.approx(57, abs=0.5)


def test_example_a_fleet_and_cost(plan_json):
    f = plan_json(PLANS / "assistant-70b.yaml")
    assert f["replicas_for_peak"] == 1
    assert f["replicas_with_redundancy"] == 2  # 4 GPUs behind a load balancer
    assert f["fleet_cost_per_hour"] == pytest.approx(10.0)
    assert f["output_tokens_per_hour_peak"] == pytest.approx(7.2e6)
    assert f["cost_per_million_tokens_peak"] == pytest.approx(1.40, abs=0.02)
    assert f["mean_rps"] == pytest.approx(0.3 * f["peak_rps"])  # the seed's 30 % mean load
    assert f["output_tokens_per_hour_mean"] / 1e6 == pytest.approx(2.2, abs=0.05)
    assert f["cost_per_million_tokens_mean"] == pytest.approx(4.60, abs=0.05)


def test_example_a_expected_figures_follow_the_calibration(write_plan, plan_json):
    """METHOD §4: at 0.67 of bandwidth the seed's 62 GB step takes about 46 ms (22 tok/s), under 25 tok/s."""
    f = plan_json(PLANS / "assistant-70b.yaml")
    assert f["expected_decode_step_seconds"] > f["decode_step_seconds"]
    assert f["expected_stream_tokens_per_second"] < 25 < f["stream_tokens_per_second"]
    # With the live KV held at the seed's figure, the step scales by exactly 1 / efficiency.
    per_gpu_bytes = 35 * GB + 27 * GB
    assert per_gpu_bytes / (2e12 * 0.67) == pytest.approx(0.046, abs=0.001)
    assert any(w.startswith("streaming under target") for w in f["warnings"])
    assert any(w.startswith("prefill will push streaming under target") for w in f["warnings"])


def test_example_b_replicas(plan_json):
    f = plan_json(PLANS / "internal-assistant-18rps.yaml", "--schedule")
    assert f["peak_rps"] == 18
    assert f["replicas_for_peak"] == 4  # 18 / 5 = 3.6
    assert f["replicas_with_redundancy"] == 5
    assert f["gpus_per_replica"] == 1
    table = f["replicas_by_hour"]
    assert len(table) == 7 and all(len(day) == 24 for day in table)
    assert max(map(max, table)) == 5
    assert min(map(min, table)) == 2  # 2 rps: 1 replica + 1 spare
    assert sum(day.count(5) for day in table[:5]) == 5 * 12  # 5 for 12 h on working days
    assert all(n == 2 for day in table[5:] for n in day)


def test_example_b_month(plan_json):
    f = plan_json(PLANS / "internal-assistant-18rps.yaml", "--schedule")
    assert f["gpu_hours_month_always_on"] == pytest.approx(3650)  # 5 x 730 h
    assert f["gpu_hours_month_schedule"] == pytest.approx(2250, rel=0.01)
    assert f["saving_share"] == pytest.approx(0.38, abs=0.01)
    # The 10-minute lead time costs 3 replicas x 1/6 h on each of 22 mornings over the seed's figure.
    seed_arithmetic = 22 * (5 * 12 + 2 * 12) + (730 - 22 * 24) * 2
    assert f["gpu_hours_month_schedule"] == pytest.approx(seed_arithmetic + 3 * 22 / 6)
