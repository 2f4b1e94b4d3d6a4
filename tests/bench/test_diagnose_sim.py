"""`--diagnose` on two simulated replicas known to be memory-bound and compute-bound, in simulated time.

The same sweep `capcon bench` runs finds each plan's capacity on the simulator's engine; the reruns
where the limit binds, at the first rate that fell just above it (concurrency halved and at the batch
size, lengths halved and doubled), must name
memory for long contexts on a small KV budget and compute for long prompts on a small GPU, and show
the knob that moved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from console.bench.diagnosis import limit_rate
from console.bench.measure import targets_from
from console.bench.runner import StepSettings
from console.bench.simulated import plan_lengths, simulated_sweep
from console.bench.simulated_diagnose import scaled_lengths, simulated_diagnosis, simulated_rerun
from console.bench.sweep import Sweep
from console.plan.schema import load_plan

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SETTINGS = StepSettings(seconds=5, min_requests=60, burstiness=1.0)


def diagnosed(name: str):
    plan = load_plan(str(FIXTURES / name))
    targets = targets_from(plan.interactive[0])
    lengths = plan_lengths(plan, 400)
    sweep = Sweep(start=1.0, factor=1.5, precision=0.05)
    simulated_sweep(plan, lengths, targets, SETTINGS, sweep)
    assert sweep.capacity is not None and sweep.converged
    rate = limit_rate(sweep.capacity, sweep.fell)
    assert rate == sweep.fell > sweep.capacity  # where the limit binds
    return plan, simulated_diagnosis(plan, lengths[: SETTINGS.count(rate)], rate, SETTINGS, targets)


def rows(conclusion):
    return {r.change: r for r in conclusion.reruns}


def test_long_contexts_on_a_small_kv_budget_are_memory_bound():
    _, conclusion = diagnosed("memory-bound.yaml")
    assert conclusion.limit == "memory", conclusion.reasons
    by = rows(conclusion)
    assert "lengths_double" in conclusion.moved_by
    # The evidence: KV full and preemptions at baseline and double length, gone at half length.
    assert by["baseline"].kv_usage_max >= 0.9 and by["baseline"].preemptions > 0
    assert by["lengths_double"].preemptions > by["baseline"].preemptions
    assert by["lengths_half"].preemptions == 0 and by["lengths_half"].kv_usage_max < 0.9
    # The GPU's own counters are there, from the simulated steps.
    assert by["baseline"].gpu.dram_active is not None and by["baseline"].gpu.readings > 0


def test_long_prompts_on_a_small_gpu_are_compute_bound():
    _, conclusion = diagnosed("compute-bound.yaml")
    assert conclusion.limit == "compute", conclusion.reasons
    by = rows(conclusion)
    assert "lengths_double" in conclusion.moved_by
    # KV stays free throughout: it is not memory.
    assert all(r.kv_usage_max < 0.5 and r.preemptions == 0 for r in conclusion.reruns if not r.skipped)
    # Doubling the prompts doubles the prefill: tensor active rises, TTFT explodes.
    assert by["lengths_double"].gpu.tensor_active > by["baseline"].gpu.tensor_active
    assert by["lengths_double"].ttft_p95 > 2 * by["baseline"].ttft_p95


def test_a_concurrency_cap_is_held_by_the_client():
    plan = load_plan(str(FIXTURES / "compute-bound.yaml"))
    targets = targets_from(plan.interactive[0])
    lengths = plan_lengths(plan, 40)
    capped = simulated_rerun(plan, lengths, 4.0, StepSettings(max_concurrency=2), targets)
    free = simulated_rerun(plan, lengths, 4.0, StepSettings(), targets)
    assert capped.running_max <= 2 < free.running_max
    assert capped.achieved_rate < free.achieved_rate


def test_scaled_lengths_keep_at_least_one_token():
    assert scaled_lengths([(3, 1, 1), (100, 40, 50)], 0.5) == [(2, 1, 1), (50, 20, 25)]
    assert scaled_lengths([(100, 40, 50)], 2.0) == [(200, 80, 100)]


@pytest.mark.parametrize("name", ["memory-bound.yaml", "compute-bound.yaml"])
def test_the_plans_load(name):
    assert load_plan(str(FIXTURES / name)).replica.max_num_seqs == 64


def test_a_cap_counts_its_wait_and_is_named_a_lever_only_where_it_carries_the_load_better():
    # Memory-bound: at most 12 in flight ends the preemptions and carries as much as the baseline: a lever.
    _, memory = diagnosed("memory-bound.yaml")
    by = rows(memory)
    assert by["concurrency_half"].goodput_share > by["baseline"].goodput_share + 0.05
    assert by["concurrency_half"].preemptions == 0 < by["baseline"].preemptions
    assert any("is a lever too" in reason for reason in memory.reasons), memory.reasons
    # Compute-bound: one in flight makes the clients wait their turn, and their TTFT says so: no lever.
    _, compute = diagnosed("compute-bound.yaml")
    by = rows(compute)
    assert by["concurrency_half"].goodput_share < by["baseline"].goodput_share
    assert by["concurrency_half"].ttft_p95 > 2 * by["baseline"].ttft_p95
    assert not any("is a lever too" in reason for reason in compute.reasons), compute.reasons
