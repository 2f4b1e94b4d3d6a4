"""A gateway's window figures from two samples: rates, the queue wait p95, restarts, several gateways as one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.metrics.gateway import (
    MIXED,
    GatewaySample,
    PolicyInForce,
    WindowDeltas,
    combined,
    gateway_figures,
    window_deltas,
)
from console.metrics.vllm import Histogram

BOUNDS = (0.1, 0.5, 1.0, float("inf"))


def sample(at, local=0.0, rejected=0.0, timed_out=0.0, hosted=0.0, waits=(0, 0, 0, 0), cost=0.0, mode="pass", **more):
    counts = tuple(float(c) for c in waits)
    ttft = more.pop("ttft", None)
    e2e = more.pop("e2e", None)
    return GatewaySample(
        at=at,
        outcomes={"local": local, "rejected": rejected, "timed_out": timed_out, "hosted": hosted, "deferred": 0.0},
        queue={"interactive": more.pop("queue", 0.0), "batch": 0.0},
        wait=Histogram(BOUNDS, counts, None, counts[-1]),
        hosted_tokens=more.pop("tokens", 0.0),
        hosted_cost_dollars=cost,
        switches=more.pop("switches", 0.0),
        policy=PolicyInForce(
            mode, more.pop("actor", "plan"), more.pop("from_plan", True), more.pop("set_at", 10.0), None
        ),
        started_at=more.pop("started_at", 1.0),
        client_ttft=None if ttft is None else Histogram(BOUNDS, tuple(map(float, ttft)), None, float(ttft[-1])),
        client_e2e=None if e2e is None else Histogram(BOUNDS, tuple(map(float, e2e)), None, float(e2e[-1])),
    )


def test_rates_over_the_window_and_the_wait_p95_from_bucket_deltas():
    older = sample(100.0, local=10, rejected=0, waits=(0, 0, 0, 0))
    newer = sample(110.0, local=60, rejected=20, timed_out=5, hosted=10, waits=(0, 10, 20, 20), cost=0.5, queue=7)
    f = gateway_figures("g", older, newer)
    assert f.admitted_per_second == pytest.approx(5.0)
    assert f.rejected_per_second == pytest.approx(2.0) and f.timed_out_per_second == pytest.approx(0.5)
    assert f.hosted_per_second == pytest.approx(1.0)
    assert f.hosted_dollars_per_hour == pytest.approx(0.5 / 10 * 3600)
    assert f.queue_length == 7
    assert 0.5 < f.queue_wait_p95_seconds <= 1.0  # the 95th of 20 waits lies in the (0.5, 1] bucket


def test_nothing_waited_is_an_unknown_wait_not_zero():
    f = gateway_figures("g", sample(0.0), sample(10.0, local=5))
    assert f.admitted_per_second == pytest.approx(0.5)
    assert f.queue_wait_p95_seconds is None


@pytest.mark.parametrize(
    "newer",
    [
        sample(10.0, local=3),  # a counter went down
        sample(10.0, local=50, started_at=2.0),  # another process behind the address
    ],
)
def test_a_restarted_gateway_gives_no_rates(newer):
    f = gateway_figures("g", sample(0.0, local=40), newer)
    assert f.admitted_per_second is None and f.rejected_per_second is None
    assert f.policy is not None and f.answering == 1  # what it says now still counts


def test_a_gateway_that_did_not_answer_is_unknown_and_says_why():
    f = gateway_figures("g", sample(0.0), None, error="cannot connect")
    assert f.answering == 0 and f.admitted_per_second is None and f.error == "cannot connect"


def test_several_gateways_add_up_and_agree_on_the_mode_of_the_latest_switch():
    a = gateway_figures("a", sample(0.0), sample(10.0, local=10, mode="hosted", actor="bob", from_plan=False, set_at=5))
    b = gateway_figures(
        "b", sample(0.0), sample(10.0, local=30, mode="hosted", actor="alice", from_plan=False, set_at=9)
    )
    both = combined("2 gateways", [a, b])
    assert both.admitted_per_second == pytest.approx(4.0)
    assert both.policy.mode == "hosted" and both.policy.actor == "alice"
    assert both.answering == 2 and both.gateways == 2


def test_gateways_that_disagree_are_mixed_and_one_down_makes_totals_unknown():
    a = gateway_figures("a", sample(0.0), sample(10.0, mode="hosted"))
    b = gateway_figures("b", sample(0.0), sample(10.0, mode="pass"))
    assert combined("x", [a, b]).policy.mode == MIXED
    down = gateway_figures("c", None, None, error="timeout")
    partial = combined("x", [a, down])
    assert partial.admitted_per_second is None  # a missing part would read as a smaller total
    assert partial.answering == 1 and "c: timeout" in partial.error
    assert partial.policy.mode == MIXED  # one of two said its mode: not "the" mode


def test_the_merged_wait_quantile_comes_from_summed_buckets():
    o, n = sample(0.0), sample(10.0, waits=(10, 10, 10, 10))
    o2, n2 = sample(0.0), sample(10.0, waits=(0, 0, 10, 10))
    parts = [gateway_figures("a", o, n), gateway_figures("b", o2, n2)]
    merged = combined("x", parts, [window_deltas(o, n), window_deltas(o2, n2)])
    assert 0.5 < merged.queue_wait_p95_seconds <= 1.0


counts = st.floats(min_value=0, max_value=1e9, allow_nan=False)


@given(st.lists(counts, min_size=4, max_size=4), st.lists(counts, min_size=4, max_size=4), counts, counts)
def test_any_two_samples_give_figures_or_unknowns_never_an_error(w1, w2, l1, l2):
    f = gateway_figures("g", sample(0.0, local=l1, waits=sorted(w1)), sample(5.0, local=l2, waits=sorted(w2)))
    for value in (f.admitted_per_second, f.queue_wait_p95_seconds):
        assert value is None or value >= 0


def test_answers_broken_off_upstream_count_as_errors_the_clients_saw():
    older, newer = sample(100.0, local=10), sample(110.0, local=30)
    older.outcomes.update(error=0.0, upstream_error=0.0)
    newer.outcomes.update(error=10.0, upstream_error=20.0)
    f = gateway_figures("g", older, newer)
    assert f.errors_per_second == pytest.approx(3.0)  # 10 refused before a byte, 20 broken off mid-answer
    before = sample(100.0, local=10)  # a gateway older than the outcome: nothing to count, never a negative rate
    assert gateway_figures("g", before, sample(110.0, local=20)).errors_per_second == pytest.approx(0.0)


def test_what_the_clients_saw_their_p95s_and_the_shares_of_every_arrival():
    # 20 answered (10 within 0.1 s, 10 between 0.5 and 1 s: they waited in the queue), 5 refused at once,
    # 3 at the deadline, 2 sent to the hosted endpoint: 30 arrivals in 10 s.
    older = sample(0.0, ttft=(0, 0, 0, 0), e2e=(0, 0, 0, 0))
    newer = sample(10.0, local=18, hosted=2, rejected=5, timed_out=3, ttft=(10, 10, 20, 20), e2e=(0, 0, 0, 20))
    f = gateway_figures("g", older, newer)
    assert f.arrivals_per_second == pytest.approx(2.8)
    assert 0.5 < f.client_ttft_p95_seconds <= 1.0
    assert f.client_e2e_p95_seconds == pytest.approx(1.0)  # all past the last bound: its value, as Prometheus says
    assert f.share(f.refused_per_second) == pytest.approx(8 / 28)
    assert f.share(f.hosted_per_second) == pytest.approx(2 / 28)


def test_a_gateway_without_the_client_histograms_or_without_answers_leaves_them_unknown():
    older, newer = sample(0.0), sample(10.0, local=5)
    assert gateway_figures("g", older, newer).client_ttft_p95_seconds is None  # an older gateway
    idle = gateway_figures("g", sample(0.0, ttft=(0, 0, 0, 0)), sample(10.0, ttft=(0, 0, 0, 0)))
    assert idle.client_ttft_p95_seconds is None  # no answer in the window is not a 0 s TTFT
    assert idle.arrivals_per_second == 0 and idle.share(idle.refused_per_second) is None


def test_several_gateways_client_p95_comes_from_their_merged_buckets():
    o, n = sample(0.0, ttft=(0, 0, 0, 0)), sample(10.0, local=20, ttft=(20, 20, 20, 20))
    o2, n2 = sample(0.0, ttft=(0, 0, 0, 0)), sample(10.0, local=20, ttft=(0, 0, 0, 20))
    parts = [gateway_figures("a", o, n), gateway_figures("b", o2, n2)]
    merged = combined("x", parts, [window_deltas(o, n), window_deltas(o2, n2)])
    assert merged.client_ttft_p95_seconds == pytest.approx(1.0)  # b's slow half decides the p95 (a alone: 0.1)
    assert parts[0].client_ttft_p95_seconds <= 0.1
    assert merged.arrivals_per_second == pytest.approx(4.0)
    assert combined("x", parts, [WindowDeltas(), WindowDeltas()]).client_ttft_p95_seconds is None
