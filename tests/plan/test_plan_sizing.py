"""The sizing loop itself: the fixed point, the batch limit, TP choice, efficiencies, mixed workloads."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from console.plan.catalog import PRESETS, find_preset
from console.plan.schema import parse_plan
from console.plan.sizing import size

from conftest import BASE_PLAN, changed


def _plan(changes: dict | None = None, workloads: list[dict] | None = None):
    data = changed(BASE_PLAN, changes or {})
    if workloads is not None:
        data["workloads"] = workloads
    return parse_plan(yaml.safe_dump(data), "test.yaml")


def _flat(rps: float, **tokens) -> dict:
    workload = changed(BASE_PLAN["workloads"][0], {"arrivals": {"weekday": [rps] * 24, "weekend": [rps] * 24}})
    workload["tokens"].update(tokens)
    return workload


def test_the_solution_is_a_fixed_point_of_the_method_loop():
    s = size(_plan())
    per_request_kv_per_gpu = s.tokens_held_per_request * s.kv_bytes_per_token / s.gpus_per_replica
    step = (
        s.weight_bytes / s.gpus_per_replica + s.concurrency * per_request_kv_per_gpu
    ) / s.gpu_bandwidth_bytes_per_second
    assert s.decode_step_seconds == pytest.approx(step, rel=1e-9)
    time_in_system = s.queue_and_prefill_seconds + s.output_tokens_mean * step
    assert s.time_in_system_seconds == pytest.approx(time_in_system, rel=1e-9)
    assert s.concurrency == pytest.approx(s.per_replica_peak_rps * time_in_system, rel=1e-9)
    assert s.aggregate_decode_tokens_per_second == pytest.approx(s.concurrency / step, rel=1e-9)


def test_prefill_time_is_two_flop_per_parameter_per_token_at_the_replica_compute():
    s = size(_plan())
    assert s.prefill_seconds == pytest.approx(1000 * 2 * 8e9 / 989e12)
    assert s.expected_prefill_seconds == pytest.approx(s.prefill_seconds / 0.57)
    assert s.queue_and_prefill_seconds == pytest.approx(0.5 + s.prefill_seconds)  # default queue allowance


def test_the_batch_is_capped_by_the_kv_budget_and_max_num_seqs():
    s = size(_plan({"replica": {"max_num_seqs": 8}}))
    assert s.batch_limit == 8
    capped = size(_plan({"replica": {"max_num_seqs": 8}}, workloads=[_flat(4.0)]))
    assert capped.aggregate_decode_tokens_per_second == pytest.approx(8 / capped.decode_step_seconds)


def test_expected_figures_are_the_ideal_ones_at_the_efficiencies():
    ideal = size(_plan({"replica": {"bandwidth_efficiency": 1.0, "compute_efficiency": 1.0}}))
    assert ideal.expected_decode_step_seconds == pytest.approx(ideal.decode_step_seconds)
    assert ideal.expected_concurrency == pytest.approx(ideal.concurrency)
    slower = size(_plan({"replica": {"bandwidth_efficiency": 0.5}}))
    assert slower.expected_decode_step_seconds > slower.decode_step_seconds
    assert slower.expected_stream_tokens_per_second < slower.stream_tokens_per_second
    assert slower.expected_concurrency > slower.concurrency


@settings(max_examples=40, deadline=None)
@given(low=st.floats(0.1, 20), high=st.floats(0.1, 20))
def test_more_traffic_never_means_faster_streams(low, high):
    low, high = sorted((low, high))
    a = size(_plan({"capacity": {"rps_per_replica": 100}}, workloads=[_flat(low)]))
    b = size(_plan({"capacity": {"rps_per_replica": 100}}, workloads=[_flat(high)]))
    assert b.concurrency >= a.concurrency
    assert b.stream_tokens_per_second <= a.stream_tokens_per_second
    assert b.expected_stream_tokens_per_second <= a.expected_stream_tokens_per_second
    assert math.isfinite(b.expected_time_in_system_seconds)


def test_auto_tensor_parallel_takes_the_smallest_size_whose_kv_budget_holds_the_peak():
    assert size(_plan()).gpus_per_replica == 1
    seventy = {"model": {"parameters": "70B"}}
    # 140 GB of BF16 weights: 2 x 80 GB x 0.9 leaves 4 GB of KV, under the peak's need, so 4 GPUs.
    four = size(_plan(seventy))
    assert four.gpus_per_replica == 4
    two = size(_plan({**seventy, "replica": {"tensor_parallel": 2}}))
    assert two.kv_budget_bytes == pytest.approx(4e9) and two.kv_needed_bytes > two.kv_budget_bytes
    assert any(w.startswith("KV cache short") for w in two.warnings)
    light = _flat(0.05, input_mean=500, input_p95=1000, output_mean=100, output_max=200)
    assert size(_plan(seventy, workloads=[light])).gpus_per_replica == 2  # a light load fits in 4 GB
    assert size(_plan({**seventy, "replica": {"tensor_parallel": 8}})).gpus_per_replica == 8


def test_peak_load_is_spread_over_the_replicas_the_peak_needs():
    s = size(_plan(workloads=[_flat(18.0)]))  # 5 rps per replica
    assert (s.replicas_for_peak, s.replicas_with_redundancy) == (4, 5)
    assert s.per_replica_peak_rps == pytest.approx(4.5)
    assert s.required_decode_tokens_per_second == pytest.approx(4.5 * 300)


def test_mixed_interactive_workloads_are_sized_together():
    long = _flat(2.0, input_mean=3000, input_p95=6000, output_mean=100, output_max=400)
    long["name"] = "rag"
    long["targets"] = {"ttft_p95_seconds": 2.0, "tpot_p95_seconds": 0.03}
    s = size(_plan(workloads=[_flat(6.0), long]))
    assert s.peak_rps == pytest.approx(8.0)
    assert s.input_tokens_mean == pytest.approx((6 * 1000 + 2 * 3000) / 8)
    assert s.output_tokens_mean == pytest.approx((6 * 300 + 2 * 100) / 8)
    assert s.tpot_target_seconds == 0.03 and s.ttft_target_seconds == 1.0  # the strictest
    assert s.long_request_tokens == 6400


def test_cost_per_million_at_mean_counts_the_whole_week():
    weekday = [1.0] * 12 + [9.0] * 12
    workload = changed(BASE_PLAN["workloads"][0], {"arrivals": {"weekday": weekday, "weekend": [1.0] * 24}})
    s = size(_plan(workloads=[workload]))
    mean = (5 * (12 + 108) + 2 * 24) / 168
    assert s.mean_rps == pytest.approx(mean)
    assert s.cost_per_million_tokens_mean == pytest.approx(s.fleet_cost_per_hour / (mean * 300 * 3600 / 1e6))


def test_presets_are_found_whatever_the_spelling():
    assert find_preset("h100-80gb-sxm") is PRESETS["H100-80GB-SXM"]
    assert find_preset("L40S 48GB") is PRESETS["L40S-48GB"]
    assert find_preset("l4_24gb") is PRESETS["L4-24GB"]
    assert find_preset("H100") is None
    plan = _plan({"gpu": {"preset": "a100-80gb", "price_per_hour": 1.2}})
    assert plan.gpu.name == "A100-80GB" and plan.gpu.price_per_hour == 1.2
    assert plan.gpu.bandwidth_bytes_per_second == pytest.approx(2.039e12)


def test_plan_units_become_si():
    plan = _plan(
        {
            "gpu": {"preset": None, "memory_gb": 80, "bandwidth_tb_s": 2, "tflops_bf16": 756, "price_per_hour": 2.5},
            "replica": {"overhead_gb_per_gpu": 1.5},
            "lead_time_minutes": 12,
            "model": {"parameters": "70e9"},
        }
    )
    assert (plan.gpu.memory_bytes, plan.gpu.bandwidth_bytes_per_second, plan.gpu.flops_per_second) == (
        80e9,
        2e12,
        756e12,
    )
    assert plan.replica.overhead_bytes_per_gpu == 1.5e9
    assert plan.lead_time_seconds == 720
    assert plan.model.parameters == 70e9


def test_a_full_week_table_is_monday_first():
    week = {day: [float(i)] * 24 for i, day in enumerate(("mon", "tue", "wed", "thu", "fri", "sat", "sun"), start=1)}
    workload = changed(BASE_PLAN["workloads"][0], {"arrivals": {"weekday": None, "weekend": None, "week": week}})
    plan = _plan(workloads=[workload])
    assert [day[0] for day in plan.workloads[0].rps_by_hour] == [1, 2, 3, 4, 5, 6, 7]
    rows = changed(workload, {"arrivals": {"week": [[float(i)] * 24 for i in range(7)]}})
    assert [day[5] for day in _plan(workloads=[rows]).workloads[0].rps_by_hour] == [0, 1, 2, 3, 4, 5, 6]
