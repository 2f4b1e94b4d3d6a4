"""Prefill at the rate the GEMMs really run: FP8 weights on Hopper at the FP8 rate (W8A8), 4-bit and (unless the plan
says otherwise) INT8 weights at 16 bits, a GPU without FP8 tensor cores at bf16; one rate for sizing and simulator."""

from __future__ import annotations

import pytest

from console.plan.sizing import compute_precision, flops_per_gpu, size
from console.sim.engine import Engine
from console.sim.shape import replica_shape


@pytest.mark.parametrize(
    "weights, gpu, compute, tflops",
    [
        ("fp8", "H100-80GB-SXM", "fp8", 1979),
        ("fp8", "H200-141GB", "fp8", 1979),
        ("fp8", "L40S-48GB", "fp8", 733),
        ("fp8", "A100-80GB", "bf16", 312),  # Ampere has no FP8: the weights are dequantised
        ("int8", "H100-80GB-SXM", "bf16", 989),  # W8A16 unless the plan says compute_precision: int8
        ("int4", "H100-80GB-SXM", "bf16", 989),
        ("bf16", "H100-80GB-PCIe", "bf16", 756),
    ],
)
def test_the_compute_precision_follows_the_weights_and_the_gpu(plan_json, write_plan, weights, gpu, compute, tflops):
    path = write_plan({"model": {"weight_precision": weights}, "gpu": {"preset": gpu}})
    figures = plan_json(path)
    assert figures["compute_precision"] == compute
    assert figures["gpu_flops_per_second"] == pytest.approx(tflops * 1e12)


def test_fp8_weights_prefill_twice_as_fast_on_hopper_in_the_report_and_the_simulator(write_plan):
    from console.plan.schema import load_plan

    fp8 = load_plan(write_plan({"model": {"weight_precision": "fp8"}}))
    weight_only = load_plan(write_plan({"model": {"weight_precision": "fp8", "compute_precision": "bf16"}}))
    assert compute_precision(fp8) == "fp8" and compute_precision(weight_only) == "bf16"
    assert flops_per_gpu(fp8) == pytest.approx(2 * flops_per_gpu(weight_only), rel=0.001)
    assert size(weight_only).expected_prefill_seconds > 1.9 * size(fp8).expected_prefill_seconds
    fast, slow = Engine(replica_shape(fp8)), Engine(replica_shape(weight_only))
    assert slow.decode_step_seconds(4096, prefill_tokens=4096) > 1.8 * fast.decode_step_seconds(
        4096, prefill_tokens=4096
    )


def test_int8_w8a8_is_said_in_the_plan(plan_json, write_plan):
    figures = plan_json(write_plan({"model": {"weight_precision": "int8", "compute_precision": "int8"}}))
    assert figures["compute_precision"] == "int8" and figures["gpu_flops_per_second"] == pytest.approx(1979e12)


def test_the_report_names_the_rate_and_why(capcon, write_plan):
    code, text, _ = capcon("plan", write_plan({"model": {"weight_precision": "fp8"}}))
    assert code == 0
    assert "1.98 PFLOP/s dense FP8 (W8A8: the fp8 weights' GEMMs run at 8 bits)" in text
    code, text, _ = capcon("plan", write_plan({"model": {"weight_precision": "int4"}}))
    assert "989.00 TFLOP/s dense BF16 (int4 weights dequantised: W4A16)" in text


@pytest.mark.parametrize(
    "changes, words",
    [
        (
            {"model": {"weight_precision": "fp8", "compute_precision": "fp8"}, "gpu": {"preset": "A100-80GB"}},
            "model.compute_precision: A100-80GB has no FP8 tensor cores in the catalog; expected bf16",
        ),
        (
            {"model": {"compute_precision": "fp8"}},
            "model.compute_precision: bf16 weights cannot run fp8 GEMMs; expected weight_precision: fp8",
        ),
        ({"model": {"compute_precision": "fp4"}}, "model.compute_precision: "),
    ],
)
def test_a_compute_precision_the_gpu_or_weights_cannot_run_is_refused(capcon, write_plan, changes, words):
    code, out, err = capcon("plan", write_plan(changes))
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


def test_a_custom_gpu_gives_its_8_bit_rates(plan_json, write_plan):
    gpu = {"preset": None, "memory_gb": 96, "bandwidth_tb_s": 4, "tflops_bf16": 1000, "tflops_fp8": 2000,
           "price_per_hour": 4}  # fmt: skip
    figures = plan_json(write_plan({"gpu": gpu, "model": {"weight_precision": "fp8"}}))
    assert figures["gpu_flops_per_second"] == pytest.approx(2000e12)
    figures = plan_json(write_plan({"gpu": gpu, "model": {"weight_precision": "int8", "compute_precision": "bf16"}}))
    assert figures["gpu_flops_per_second"] == pytest.approx(1000e12)


def test_vllm_batch_defaults_follow_the_gpu(write_plan):
    from console.plan.schema import load_plan

    h100 = load_plan(write_plan({"gpu": {"preset": "H100-80GB-SXM"}}))
    a100 = load_plan(write_plan({"gpu": {"preset": "A100-80GB"}}))
    l40s = load_plan(write_plan({"gpu": {"preset": "L40S-48GB"}}))
    assert (h100.replica.max_num_seqs, a100.replica.max_num_seqs, l40s.replica.max_num_seqs) == (1024, 256, 256)
    assert replica_shape(h100).max_num_batched_tokens == 8192 and replica_shape(a100).max_num_batched_tokens == 2048
    assert load_plan(write_plan({"replica": {"max_num_seqs": 64}})).replica.max_num_seqs == 64
