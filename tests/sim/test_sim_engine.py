"""The engine schedules like vLLM V1 and steps at the roofline the plan describes."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from console.sim.engine import Engine, SimRequest
from console.sim.shape import replica_shape

from .sim_plans import example_a


@pytest.fixture
def shape():
    return replica_shape(example_a())


def formula_step(shape, kv_tokens: int, tokens: int, overhead: float) -> float:
    """METHOD §3 step time written out independently of the engine: the weights or the GEMMs, whichever is
    longer, then the KV read."""
    tp = shape.tensor_parallel
    bandwidth = shape.bandwidth_bytes_per_second * shape.bandwidth_efficiency
    weights = shape.weight_bytes / tp / bandwidth
    kv = kv_tokens * shape.kv_bytes_per_token / tp / bandwidth
    compute = tokens * 2 * shape.parameters / tp / (shape.flops_per_second * shape.compute_efficiency)
    return overhead + max(weights, compute) + kv


def test_a_large_decode_batch_waits_on_the_tensor_cores_not_the_weights(shape):
    # 1,024 decode tokens of a 70B model: the GEMMs take longer than reading the weights once.
    engine = Engine(shape, step_overhead_seconds=0.0)
    small = engine.decode_step_seconds(0, decode_tokens=1)
    large = engine.decode_step_seconds(0, decode_tokens=1024)
    assert small == pytest.approx(formula_step(shape, 0, 1, 0.0))
    assert large == pytest.approx(formula_step(shape, 0, 1024, 0.0))
    assert large > 2 * small


def test_shape_of_example_a_follows_method(shape):
    assert shape.tensor_parallel == 2
    assert shape.weight_bytes == pytest.approx(70e9)
    assert shape.kv_bytes_per_token == 327_680
    # 2 x 80 GB x 0.9 - 70 GB = 74 GB of KV budget, in 16-token blocks.
    assert shape.kv_budget_bytes == pytest.approx(74e9)
    assert shape.num_blocks == int(74e9 // (327_680 * 16))


def test_lone_request_timing_is_the_roofline(shape):
    overhead = 0.001
    engine = Engine(shape, step_overhead_seconds=overhead)
    request = SimRequest("a", prompt_tokens=1000, output_tokens=3, max_tokens=10, arrival=5.0)
    engine.submit(request)
    engine.advance(1000.0)
    prefill = formula_step(shape, 1000, 1000, overhead)
    assert request.first_scheduled == 5.0
    assert request.ttft == pytest.approx(prefill)
    # Two decode steps follow, reading the context so far (1001, then 1002 tokens).
    decodes = formula_step(shape, 1001, 1, overhead) + formula_step(shape, 1002, 1, overhead)
    assert request.e2e == pytest.approx(prefill + decodes)
    assert request.tpot == pytest.approx(decodes / 2)
    assert request.finished_reason == "stop"
    assert engine.pool.used == 0


def test_long_prompt_is_prefilled_in_chunks_of_the_token_budget():
    plan = example_a()
    plan = dataclasses.replace(plan, model=dataclasses.replace(plan.model, max_model_len=32768))
    shape = replica_shape(plan)
    engine = Engine(shape)
    prompt = 3 * shape.max_num_batched_tokens - 100
    request = SimRequest("long", prompt_tokens=prompt, output_tokens=1, max_tokens=1, arrival=0.0)
    engine.submit(request)
    engine.advance(1000.0)
    assert engine.steps == 3
    assert request.generated == 1 and request.finished_reason == "length"


def test_running_batch_never_exceeds_max_num_seqs():
    plan = example_a()
    plan = dataclasses.replace(plan, replica=dataclasses.replace(plan.replica, max_num_seqs=8))
    engine = Engine(replica_shape(plan))
    for i in range(20):
        engine.submit(SimRequest(f"r{i}", 100, 50, 50, arrival=0.0))
    peak = 0
    t = 0.0
    while not engine.idle:
        t += 0.01
        engine.advance(t)
        peak = max(peak, engine.num_running)
    assert peak == 8


def test_first_come_first_served(shape):
    engine = Engine(shape)
    requests = [SimRequest(f"r{i}", 500, 5, 5, arrival=i * 1e-6) for i in range(5)]
    for r in requests:
        engine.submit(r)
    engine.advance(1000.0)
    starts = [r.first_scheduled for r in requests]
    assert starts == sorted(starts)


def test_kv_exhaustion_preempts_the_newest_and_recomputes_it():
    plan = example_a()
    shape = dataclasses.replace(replica_shape(plan), num_blocks=200)  # 3,200 tokens of KV
    engine = Engine(shape)
    requests = [SimRequest(f"r{i}", 1000, 600, 600, arrival=0.0) for i in range(3)]
    for r in requests:
        engine.submit(r)
    t = 0.0
    peak_usage = 0.0
    while not engine.idle and t < 600:
        t += 0.05
        engine.advance(t)
        peak_usage = max(peak_usage, engine.kv_usage)
        assert engine.pool.used == sum(r.blocks for r in engine.running)
    assert engine.preemptions >= 1
    assert peak_usage > 0.95
    assert all(r.finished_reason == "length" and r.generated == 600 for r in requests)
    # FCFS: the first request is never the victim; a later one is, and pays its prefill again.
    assert requests[0].preemptions == 0
    assert sum(r.preemptions for r in requests[1:]) == engine.preemptions
    assert engine.pool.used == 0


def test_abort_frees_blocks_and_counts_once(shape):
    engine = Engine(shape)
    request = SimRequest("gone", 2000, 400, 400, arrival=0.0)
    engine.submit(request)
    engine.advance(0.5)
    assert engine.pool.used > 0
    engine.abort(request, 0.5)
    engine.abort(request, 0.6)
    assert request.finished_reason == "abort"
    assert engine.pool.used == 0
    generated = request.generated
    engine.advance(10.0)  # the step in flight ends without it
    assert request.generated == generated and engine.idle


def test_requests_over_the_context_are_refused(shape):
    engine = Engine(shape)
    assert "maximum context length" in engine.validate(8000, 400)
    with pytest.raises(ValueError):
        engine.submit(SimRequest("big", 8000, 400, 400, arrival=0.0))
    assert engine.validate(1000, 400) is None


def test_slowdown_stretches_steps(shape):
    fast, slow = Engine(shape), Engine(shape)
    slow.slowdown = 3.0
    for engine in (fast, slow):
        engine.submit(SimRequest("x", 1000, 20, 20, arrival=0.0))
        engine.advance(1000.0)
    assert slow.clock == pytest.approx(3 * fast.clock)


def test_steady_load_conserves_requests(shape):
    """Everything submitted is either finished or still in the engine (nothing lost or duplicated)."""
    engine = Engine(shape)
    rng = random.Random(3)
    finished = set()
    t, submitted = 0.0, 0
    while t < 120:
        t += rng.expovariate(4.0)
        finished.update(r.request_id for r in engine.advance(t) if r.finished)
        engine.submit(SimRequest(f"r{submitted}", rng.randint(10, 4000), rng.randint(1, 800), 800, t))
        submitted += 1
    inside = {r.request_id for r in engine.running} | {r.request_id for r in engine.waiting}
    assert not finished & inside
    assert len(finished) + len(inside) == submitted
    assert math.isclose(engine.pool.used, sum(r.blocks for r in engine.running))


def test_a_resumed_request_decodes_on_from_its_context_with_no_prefill(shape):
    """A what-if carries a live batch in: a request 10 tokens into a 13-token answer takes three decode steps."""
    overhead = 0.001
    engine = Engine(shape, step_overhead_seconds=overhead)
    request = SimRequest("c", prompt_tokens=1000, output_tokens=13, max_tokens=20, arrival=0.0)
    request.generated = 10
    engine.resume(request)
    assert engine.running == [request] and engine.pool.used == -(-1009 // shape.block_size)
    engine.advance(1000.0)
    # Each step reads the context so far: 1010, 1011, 1012 tokens; nothing is prefilled again.
    steps = sum(formula_step(shape, kv, 0, overhead) for kv in (1010, 1011, 1012))
    assert request.finished_reason == "stop" and request.generated == 13
    assert request.finished_at == pytest.approx(steps)
    assert engine.pool.used == 0


def test_a_resumed_request_without_room_waits_and_is_recomputed(shape):
    small = dataclasses.replace(shape, max_num_seqs=1)
    engine = Engine(small, step_overhead_seconds=0.0)
    first = SimRequest("a", prompt_tokens=100, output_tokens=5, max_tokens=10, arrival=0.0, generated=2)
    second = SimRequest("b", prompt_tokens=100, output_tokens=5, max_tokens=10, arrival=0.0, generated=2)
    engine.resume(first)
    engine.resume(second)  # the batch of one is full: it waits, its cache gone
    assert engine.running == [first] and list(engine.waiting) == [second]
    assert second.generated == 0 and second.computed == 0 and second.blocks == 0
    engine.advance(1000.0)
    assert first.finished and second.finished and second.generated == 5
    assert second.first_scheduled > 0  # prefilled again once the first had finished
