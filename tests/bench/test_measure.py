"""Targets from plan and flags, arrivals as vLLM's benchmark draws them, per-request figures, goodput, the sweep."""

from __future__ import annotations

import random
import statistics

import pytest

from console.bench.arrivals import arrival_offsets
from console.bench.client import RequestResult
from console.bench.measure import BenchTargets, figures, is_good, step_figures, targets_from, wilson_interval
from console.bench.sweep import Sweep
from console.errors import UserError
from console.plan.model import Targets, TokenStats, Workload

WEEK = tuple(tuple([1.0] * 24) for _ in range(7))


def workload(e2e=None) -> Workload:
    return Workload("chat", "interactive", WEEK, TokenStats(10, 10, 10, 10), Targets(1.5, 0.04, e2e, 0.95))


def test_targets_come_from_the_plan_and_each_flag_wins():
    assert targets_from(workload()) == BenchTargets(1.5, 0.04, None, 0.95)
    assert targets_from(workload(30.0), tpot=0.05, share=0.9) == BenchTargets(1.5, 0.05, 30.0, 0.9)
    assert targets_from(None, ttft=1.0, tpot=0.1) == BenchTargets(1.0, 0.1, None, 0.99)


def test_no_targets_anywhere_is_one_clear_line():
    with pytest.raises(UserError, match=r"no latency target for --ttft and --tpot; expected --plan PLAN"):
        targets_from(None)
    with pytest.raises(UserError, match=r"no latency target for --tpot;"):
        targets_from(None, ttft=1.0)


@pytest.mark.parametrize("burstiness", [1.0, 0.5, 4.0])
def test_arrivals_offer_the_rate_exactly_and_burstiness_spreads_the_gaps(burstiness):
    offsets = arrival_offsets(2000, 5.0, burstiness, random.Random(1))
    assert offsets == sorted(offsets)
    assert offsets[-1] == pytest.approx(2000 / 5.0)  # scaled as vllm bench serve does
    gaps = [b - a for a, b in zip([0.0, *offsets], offsets)]
    # Gamma(k, 1/(rate k)): the coefficient of variation is 1/sqrt(k).
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert cv == pytest.approx(burstiness**-0.5, rel=0.1)


def test_arrivals_refuse_what_is_no_rate():
    assert arrival_offsets(0, 1.0, 1.0, random.Random(0)) == []
    assert arrival_offsets(3, float("inf"), 1.0, random.Random(0)) == [0.0, 0.0, 0.0]  # all at once
    assert arrival_offsets(4, 2.0, float("inf"), random.Random(0)) == [0.5, 1.0, 1.5, 2.0]  # evenly spaced
    for rate, k in ((0.0, 1.0), (float("nan"), 1.0), (1.0, 0.0), (1.0, float("nan"))):
        with pytest.raises(ValueError):
            arrival_offsets(3, rate, k, random.Random(0))


def result(ttft=0.1, gaps=(0.02, 0.02, 0.02), tokens=4, ok=True, last=None) -> RequestResult:
    latency = last if last is not None else ttft + sum(gaps)
    return RequestResult(
        ok=ok,
        started=0.0,
        e2e_seconds=latency + 0.001,
        ttft_seconds=ttft if ok else None,
        chunk_gaps_seconds=gaps,
        output_tokens=tokens,
        last_token_seconds=latency if ok else None,
        error="" if ok else "HTTP 500",
    )


def test_figures_follow_vllm_bench_serve():
    f = figures(result(ttft=0.1, gaps=(0.02, 0.04, 0.06), tokens=4))
    assert f.e2e == pytest.approx(0.22)  # to the last token chunk, not the stream's end
    assert f.tpot == pytest.approx((0.22 - 0.1) / 3)
    assert f.itl == (0.02, 0.04, 0.06)
    # More tokens than chunks (a server that batches tokens in a chunk): TPOT divides by tokens.
    assert figures(result(ttft=0.1, gaps=(0.1,), tokens=11)).tpot == pytest.approx(0.01)
    # One token: TPOT 0, as vLLM counts it for goodput.
    assert figures(result(ttft=0.3, gaps=(), tokens=1)).tpot == 0.0
    # No usage chunk: the chunks seen are the tokens.
    assert figures(result(ttft=0.1, gaps=(0.02, 0.02), tokens=None)).output_tokens == 3


def test_goodput_counts_every_target_and_failures_as_misses():
    targets = BenchTargets(ttft=0.2, tpot=0.03, e2e=0.5, share=0.9)
    good = result(ttft=0.1, gaps=(0.02, 0.02, 0.02))
    slow_first = result(ttft=0.25)
    slow_decode = result(gaps=(0.05, 0.05, 0.05))
    long = result(ttft=0.1, gaps=(0.02,) * 30, tokens=31)  # TPOT 0.02 but E2E 0.7
    failed = result(ok=False)
    assert is_good(figures(good), targets)
    for r in (slow_first, slow_decode, long, failed):
        assert not is_good(figures(r), targets)
    step = step_figures(2.0, [good, good, slow_first, failed], targets, duration_seconds=2.0)
    assert (step.sent, step.completed, step.failed, step.good) == (4, 3, 1, 2)
    assert step.goodput_share == 0.5
    low, high = step.interval
    assert low < 0.5 < high


def test_the_wilson_interval_narrows_with_more_requests():
    few, many = wilson_interval(19, 20), wilson_interval(950, 1000)
    assert few[0] < many[0] and few[1] >= many[1] - 0.01
    assert wilson_interval(0, 0) == (0.0, 1.0)


def drive(sweep: Sweep, capacity: float) -> list[float]:
    rates = []
    while (rate := sweep.next_rate()) is not None:
        rates.append(rate)
        sweep.record(rate, rate <= capacity)
    return rates


@pytest.mark.parametrize("capacity", [0.3, 1.0, 4.2, 17.0, 333.0])
def test_the_sweep_steps_up_then_bisects_to_the_edge(capacity):
    sweep = Sweep(start=1.0, factor=1.5, precision=0.05)
    rates = drive(sweep, capacity)
    assert sweep.converged
    assert sweep.capacity <= capacity < sweep.capacity * 1.05 + 1e-9
    assert len(rates) < 30


def test_a_sweep_where_nothing_holds_ends_without_a_capacity():
    sweep = Sweep(start=1.0, floor=0.01)
    drive(sweep, 0.0)
    assert sweep.capacity is None and not sweep.converged
    assert min(rate for rate, _ in sweep.history) >= 0.01
