"""Which limit a falling step hit, from the server's view of it; and that view, from real simulator pages."""

from __future__ import annotations

import random

from console.bench.client import RequestResult
from console.bench.limits import diagnose
from console.bench.measure import BenchTargets, step_figures
from console.bench.server_view import ServerStep, server_step
from console.metrics.exposition import parse
from console.metrics.vllm import FAMILIES, sample_from_page
from console.sim.engine import Engine, SimRequest
from console.sim.metrics import VllmMetrics
from console.sim.shape import replica_shape
from tests.sim.sim_plans import example_a

TARGETS = BenchTargets(ttft=1.0, tpot=0.04, share=0.99)


def request(ttft: float, tpot: float, tokens: int = 11, ok: bool = True) -> RequestResult:
    latency = ttft + tpot * (tokens - 1)
    return RequestResult(
        ok=ok,
        started=0.0,
        e2e_seconds=latency,
        ttft_seconds=ttft if ok else None,
        chunk_gaps_seconds=(tpot,) * (tokens - 1),
        output_tokens=tokens,
        last_token_seconds=latency if ok else None,
    )


def step(results):
    return step_figures(5.0, results, TARGETS, duration_seconds=10.0)


LATE_FIRST = [request(0.2, 0.02)] * 80 + [request(3.0, 0.02)] * 20
SLOW_DECODE = [request(0.2, 0.02)] * 80 + [request(0.2, 0.06)] * 20
BOTH = [request(0.2, 0.02)] * 60 + [request(3.0, 0.02)] * 20 + [request(0.2, 0.06)] * 20


def test_queueing_with_kv_nearly_full_points_at_memory():
    server = ServerStep(scrapes=10, kv_usage_max=0.97, kv_usage_mean=0.9, waiting_mean=12.0, waiting_max=30.0)
    found = diagnose(step(LATE_FIRST), server, TARGETS)
    assert found.limit == "memory"
    assert any("20 missed TTFT" in r for r in found.reasons)
    assert any("97%" in r for r in found.reasons)


def test_preemptions_point_at_memory_even_before_kv_reads_full():
    server = ServerStep(scrapes=10, kv_usage_max=0.8, waiting_mean=0.5, waiting_max=2.0, preemptions=7.0)
    found = diagnose(step(LATE_FIRST), server, TARGETS)
    assert found.limit == "memory" and any("7 preemptions" in r for r in found.reasons)


def test_slow_decode_with_free_kv_points_at_compute():
    server = ServerStep(scrapes=10, kv_usage_max=0.35, waiting_mean=0.1, waiting_max=1.0, preemptions=0.0)
    found = diagnose(step(SLOW_DECODE), server, TARGETS)
    assert found.limit == "compute"
    assert any("KV free (at most 35%)" in r for r in found.reasons)


def test_both_moving_is_said_with_what_to_try():
    server = ServerStep(scrapes=10, kv_usage_max=0.5, waiting_mean=4.0, waiting_max=9.0, preemptions=3.0)
    found = diagnose(step(BOTH), server, TARGETS)
    assert found.limit == "memory and compute"
    assert any("--max-concurrency" in r for r in found.reasons)


def test_errors_and_no_metrics_are_named_as_such():
    failing = [request(0.2, 0.02)] * 70 + [request(0.0, 0.0, ok=False)] * 30
    assert diagnose(step(failing), ServerStep(scrapes=5), TARGETS).limit == "errors"
    assert diagnose(step(LATE_FIRST), ServerStep(scrapes=0), TARGETS).limit == "unknown"


def test_the_server_view_reads_real_pages_of_a_replica_under_overload():
    """Scrapes of the simulator's exposition while a 70B replica is pushed past its KV cache."""
    plan = example_a(bandwidth_efficiency=1.0, compute_efficiency=1.0, flops_per_second=float("inf"))
    shape = replica_shape(plan)
    metrics = VllmMetrics(plan.model.name, shape, 8192, created=0.0)
    engine = Engine(shape, observer=metrics)
    rng = random.Random(3)
    samples, preempted = [], []
    at = 0.0
    for index in range(3600):  # 12 rps for 300 s: far past capacity
        at += rng.expovariate(12.0)
        engine.advance(at)
        engine.submit(SimRequest(f"r{index}", 2000, 400, 400, at))
        if index % 120 == 0:
            page = parse(metrics.render(engine), FAMILIES)
            samples.append(sample_from_page(page, at))
            preempted.append(engine.preemptions)
    view = server_step(samples)
    assert view.scrapes == len(samples)
    assert view.kv_usage_max > 0.95 and view.waiting_max > 100
    assert view.preemptions == preempted[-1] - preempted[0] > 0
    assert view.finished is not None and view.finished > 0
    assert view.ttft_p95 is not None and view.ttft_p95 > view.ttft_p50
    found = diagnose(step(LATE_FIRST), view, TARGETS)
    assert found.limit == "memory"


def test_one_scrape_gives_gauges_but_no_differences():
    plan = example_a()
    shape = replica_shape(plan)
    metrics = VllmMetrics(plan.model.name, shape, 8192, created=0.0)
    engine = Engine(shape, observer=metrics)
    (sample,) = [sample_from_page(parse(metrics.render(engine), FAMILIES), 0.0)]
    view = server_step([sample])
    assert view.kv_usage_max == 0.0 and view.preemptions is None and view.ttft_p95 is None
