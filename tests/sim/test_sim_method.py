"""The simulator agrees with the capacity method (METHOD §3-6), run in simulated time.

Worked example A (70B, TP 2, 5 rps, 2,000 in / 400 out) and a single replica of
the 18 rps fleet, swept in rate. The seed's decode figures leave prefill out
("before overheads"; prefill is "competing with decode"), so the runs that
reproduce them give the GPU unbounded FLOP/s; a separate test shows prefill
taking its share when it is costed.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from console.plan.schema import load_plan
from console.plan.sizing import size
from console.sim import offline
from console.sim.engine import Engine
from console.sim.metrics import VllmMetrics
from console.sim.shape import replica_shape
from console.sim.traffic import LengthSampler

from .sim_plans import example_a, office_assistant

SHIPPED_18RPS = Path(__file__).resolve().parents[2] / "plans" / "internal-assistant-18rps.yaml"
SHIPPED_8B = Path(__file__).resolve().parents[2] / "plans" / "chat-8b-l40s.yaml"
WARMUP = 120.0
DURATION = 600.0


def simulate(plan, rate, duration=DURATION, seed=1, observer=None):
    shape = replica_shape(plan)
    engine = Engine(shape, observer=observer)
    sampler = LengthSampler(plan.workloads[0].tokens, engine.max_model_len)
    stream = offline.arrivals(rate, duration, sampler, random.Random(seed), plan.workloads[0].burstiness)
    return offline.run(engine, stream, until=duration)


def mean_kv_tokens_running(run, shape):
    samples = run.steady(WARMUP)
    return sum(s.kv_usage for s in samples) / len(samples) * shape.kv_capacity_tokens


def test_ideal_efficiency_settles_where_example_a_says():
    plan = example_a(bandwidth_efficiency=1.0, compute_efficiency=1.0, flops_per_second=math.inf)
    run = simulate(plan, 5.0)
    in_flight = run.mean_in_flight(WARMUP)
    stream = run.mean_stream_tokens_per_second(WARMUP)
    print(f"example A ideal: {in_flight:.1f} in flight, {stream:.1f} tok/s per stream")
    # The seed: about 70 requests in flight, about 30 tokens/s per stream.
    assert in_flight == pytest.approx(70, rel=0.20)
    assert stream == pytest.approx(30, rel=0.20)
    assert run.engine.preemptions == 0


def test_the_run_obeys_littles_law_and_the_step_formula():
    plan = example_a(bandwidth_efficiency=1.0, compute_efficiency=1.0, flops_per_second=math.inf)
    shape = replica_shape(plan)
    run = simulate(plan, 5.0)
    done = [r for r in run.after(WARMUP) if r.arrival < DURATION - 60]
    time_in_system = sum(r.e2e for r in done) / len(done)
    assert run.mean_in_flight(WARMUP) == pytest.approx(5.0 * time_in_system, rel=0.07)
    # Per-stream speed is one token per step; the step reads weights plus the live KV (blocks, as vLLM holds it).
    kv_tokens = mean_kv_tokens_running(run, shape)
    step = run.engine.decode_step_seconds(round(kv_tokens))
    assert run.mean_stream_tokens_per_second(WARMUP) == pytest.approx(1 / step, rel=0.05)


def planner_expected_stream_rate(plan) -> float:
    """The planner's expected per-stream rate."""
    return size(plan).expected_stream_tokens_per_second


def test_default_efficiencies_match_the_planners_expected_rate():
    plan = example_a(flops_per_second=math.inf)
    run = simulate(plan, 5.0)
    stream = run.mean_stream_tokens_per_second(WARMUP)
    expected = planner_expected_stream_rate(plan)
    print(
        f"example A expected: sim {stream:.1f} tok/s, planner {expected:.1f} tok/s, "
        f"{run.mean_in_flight(WARMUP):.0f} in flight"
    )
    assert stream == pytest.approx(expected, rel=0.20)
    # Under the seed's 25 tokens/s target, as METHOD §4 warns for the expected figure.
    assert stream < 25


@pytest.mark.parametrize("rate", [1.0, 2.0])
def test_prefill_takes_its_share_of_the_gpu(rate):
    """With prefill costed at the GPU's FLOP/s, streams slow by about the share of time spent prefilling."""
    free = simulate(example_a(1.0, 1.0, flops_per_second=math.inf), rate)
    plan = example_a(1.0, 1.0, flops_per_second=989e12)
    costed = simulate(plan, rate)
    busy = rate * 2000 * 2 * plan.model.parameters / 2 / plan.gpu.flops_per_second
    predicted = free.mean_stream_tokens_per_second(WARMUP) * (1 - busy)
    assert costed.mean_stream_tokens_per_second(WARMUP) == pytest.approx(predicted, rel=0.10)


def test_load_past_capacity_queues_fills_kv_and_preempts_in_the_metrics():
    from prometheus_client.parser import text_string_to_metric_families

    plan = example_a(bandwidth_efficiency=1.0, compute_efficiency=1.0, flops_per_second=math.inf)
    shape = replica_shape(plan)
    metrics = VllmMetrics(plan.model.name, shape, 8192, created=0.0)
    run = simulate(plan, 12.0, duration=300, observer=metrics)
    early = [s.waiting for s in run.samples if 60 <= s.at < 120]
    late = [s.waiting for s in run.samples if 240 <= s.at < 300]
    assert sum(late) / len(late) > 2 * max(1.0, sum(early) / len(early))
    assert max(s.kv_usage for s in run.samples) > 0.95
    assert run.engine.preemptions > 0
    values = {}
    for family in text_string_to_metric_families(metrics.render(run.engine)):
        for sample in family.samples:
            values.setdefault(sample.name, sample.value)
    assert values["vllm:num_requests_waiting"] == run.engine.num_waiting > 100
    assert values["vllm:kv_cache_usage_perc"] > 0.9
    assert values["vllm:num_preemptions_total"] == run.engine.preemptions


def _single_replica_plans():
    plans = [pytest.param(office_assistant(), id="built-in")]
    if SHIPPED_18RPS.exists():
        plans.append(pytest.param(load_plan(SHIPPED_18RPS), id="plans/internal-assistant-18rps.yaml"))
    if SHIPPED_8B.exists():
        plans.append(pytest.param(load_plan(SHIPPED_8B), id="plans/chat-8b-l40s.yaml"))
    return plans


@pytest.mark.parametrize("plan", _single_replica_plans())
def test_one_replica_holds_its_targets_up_to_capacity_then_queues(plan):
    capacity = plan.capacity.rps_per_replica
    workload = plan.workloads[0]
    goodput, queue = {}, {}
    for share in (0.6, 1.0, 1.6, 2.0):
        run = simulate(plan, capacity * share, duration=400, seed=2)
        goodput[share] = run.goodput_share(workload.targets, WARMUP, 340)
        waited = [r.first_scheduled - r.arrival for r in run.finished if r.arrival >= WARMUP]
        queue[share] = sum(waited) / len(waited)
    print(
        "goodput by share of capacity:",
        {k: round(v, 3) for k, v in goodput.items()},
        "mean queue seconds:",
        {k: round(v, 3) for k, v in queue.items()},
    )
    required = workload.targets.goodput_share
    assert goodput[0.6] >= required
    assert goodput[1.0] >= required - 0.01
    assert goodput[1.6] < required - 0.05
    assert goodput[2.0] < goodput[1.6]
    # Far past capacity the loss is queueing: the wait grows by orders of magnitude.
    assert queue[2.0] > 100 * queue[1.0]
