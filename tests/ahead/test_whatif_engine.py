"""The striding engine gives the step-by-step engine's results: the same first tokens, finishes and TPOT."""

import random

import pytest

from console.ahead.whatif_engine import StridingEngine
from console.sim import offline
from console.sim.engine import Engine
from console.sim.shape import replica_shape
from console.sim.traffic import LengthSampler
from tests.sim.sim_plans import office_assistant


def _run(engine_class, rate: float, seconds: float, seed: int):
    plan = office_assistant()
    shape = replica_shape(plan)
    sampler = LengthSampler(plan.interactive[0].tokens, shape.max_model_len)
    engine = engine_class(shape)
    run = offline.run(engine, offline.arrivals(rate, seconds, sampler, random.Random(seed)), seconds)
    finished = sorted(run.finished, key=lambda r: r.request_id)
    return engine, [(r.request_id, r.first_token, r.finished_at, r.tpot, r.preemptions) for r in finished]


@pytest.mark.parametrize("rate, seed", [(2.0, 1), (5.0, 2), (9.0, 3)])  # light, at capacity, over it
def test_same_requests_same_times(rate, seed):
    plain, expected = _run(Engine, rate, 40.0, seed)
    striding, got = _run(StridingEngine, rate, 40.0, seed)
    assert len(got) == len(expected) > 20
    for (rid, first, end, tpot, pre), (rid2, first2, end2, tpot2, pre2) in zip(expected, got):
        assert (rid, pre) == (rid2, pre2)
        assert first2 == pytest.approx(first, abs=1e-9)
        assert end2 == pytest.approx(end, abs=1e-9)
        assert tpot2 == pytest.approx(tpot, abs=1e-9)
    assert striding.steps == plain.steps
    assert striding.pool.used == plain.pool.used


def test_a_tight_kv_cache_preempts_as_the_engine_does():
    """Few blocks: the strides must stop where a request needs a block that is not free."""
    plan = office_assistant()
    shape = replica_shape(plan)
    from dataclasses import replace

    small = replace(shape, num_blocks=400)
    sampler = LengthSampler(plan.interactive[0].tokens, 4000)
    results = []
    for engine_class in (Engine, StridingEngine):
        engine = engine_class(small)
        run = offline.run(engine, offline.arrivals(4.0, 30.0, sampler, random.Random(7)), 30.0)
        results.append((engine.preemptions, sorted((r.request_id, round(r.finished_at, 9)) for r in run.finished)))
    assert results[0][0] > 0
    assert results[1] == results[0]
