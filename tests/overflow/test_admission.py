"""The admission decision, table by table: forward, wait, hosted or refuse, with Retry-After from the drain rate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.overflow.admission import (
    Forward,
    Hosted,
    Load,
    Refuse,
    ReplicaLoad,
    Wait,
    admit,
    cap_of,
    least_loaded,
    retry_after,
    shutting_down,
    timed_out,
)
from console.overflow.policy import MODES, Policy

NOW = 1000.0
BOUNDED = Policy(mode="bounded_queue", max_queue=4, max_wait_seconds=5.0, max_inflight_per_replica=2)


def load(*in_flight: int, queued: int = 0, down: tuple[int, ...] = (), rate: float | None = 2.0, **more) -> Load:
    replicas = tuple(ReplicaLoad(f"r{i}", n, healthy=i not in down) for i, n in enumerate(in_flight))
    return Load(replicas, queued=queued, completions_per_second=rate, **more)


@pytest.mark.parametrize(
    "policy, state, expected",
    [
        pytest.param(BOUNDED, load(1, 0), Forward("r1"), id="least outstanding"),
        pytest.param(BOUNDED, load(1, 1), Forward("r0"), id="ties go to the first listed"),
        pytest.param(BOUNDED, load(0, 0, down=(0,)), Forward("r1"), id="an unhealthy replica is skipped"),
        pytest.param(BOUNDED, load(2, 2), Wait("interactive", NOW + 5.0), id="all at the cap: wait with a deadline"),
        pytest.param(
            BOUNDED,
            load(0, 2, queued=1),
            Wait("interactive", NOW + 5.0),
            id="first come first served: no overtaking the queue",
        ),
        pytest.param(BOUNDED, load(2, 2, queued=3), Wait("interactive", NOW + 5.0), id="one place left"),
        pytest.param(
            BOUNDED,
            load(2, 2, queued=4),
            Refuse(429, "queue_full", "the fleet is over its capacity: 4 requests are queued, the bound is 4", 3),
            id="queue full: refused at once, Retry-After from the drain",
        ),
        pytest.param(Policy(mode="pass"), load(50, 70), Forward("r0"), id="pass: no cap unless set"),
        pytest.param(
            Policy(mode="pass", max_inflight_per_replica=2),
            load(2, 2, queued=500),
            Wait("interactive", None),
            id="pass with a cap: waits without bound",
        ),
        pytest.param(
            Policy(mode="hosted", hosted_allowed=True, hosted_after_queue=2, max_inflight_per_replica=1),
            load(1, 1, queued=2),
            Hosted(),
            id="hosted past its threshold",
        ),
        pytest.param(
            Policy(mode="hosted", hosted_allowed=True, hosted_after_queue=2, max_inflight_per_replica=1),
            load(1, 1, queued=1),
            Wait("interactive", NOW + 5.0),
            id="hosted: queue below its threshold",
        ),
        pytest.param(
            Policy(mode="hosted", hosted_allowed=False, hosted_after_queue=0, max_inflight_per_replica=1, max_queue=1),
            load(1, queued=1),
            Refuse(429, "queue_full", "the fleet is over its capacity: 1 requests are queued, the bound is 1", 1),
            id="hosted not allowed: the bounded queue",
        ),
        pytest.param(
            BOUNDED,
            load(0, 0, down=(0, 1)),
            Refuse(503, "no_replica_available", "no replica of the fleet is answering", 10),
            id="every replica down",
        ),
        pytest.param(
            Policy(mode="hosted", hosted_allowed=True),
            load(0, down=(0,)),
            Hosted(),
            id="every replica down, hosted allowed",
        ),
    ],
)
def test_interactive_arrivals(policy, state, expected):
    assert admit(policy, state, "interactive", NOW) == expected


def test_deferrable_work_is_refused_until_off_peak_or_held():
    reject = Policy(mode="defer", defer_action="reject")
    refused = admit(reject, load(0, seconds_to_off_peak=7200.0), "deferrable", NOW)
    assert isinstance(refused, Refuse) and refused.status == 429 and refused.retry_after == 7200
    assert admit(reject, load(0, seconds_to_off_peak=None), "deferrable", NOW).retry_after == 6 * 3600
    assert admit(reject, load(0, seconds_to_off_peak=5.0), "deferrable", NOW).retry_after == 60
    hold = Policy(mode="defer", defer_action="hold", max_batch_queue=2)
    assert admit(hold, load(0, batch_queued=1), "deferrable", NOW) == Wait("batch", None)
    assert admit(hold, load(0, batch_queued=2), "deferrable", NOW).code == "batch_queue_full"
    # Interactive traffic keeps the bounded queue in defer mode; deferrable work outside it is served as any.
    assert admit(hold, load(0), "interactive", NOW) == Forward("r0")
    assert admit(BOUNDED, load(0), "deferrable", NOW) == Forward("r0")


@pytest.mark.parametrize(
    "queued, rate, fallback, seconds",
    [
        (0, 2.0, 5.0, 1),
        (9, 2.0, 5.0, 5),
        (10, 2.0, 5.0, 6),
        (1000, 2.0, 5.0, 60),
        (5, None, 5.0, 5),
        (5, 0.0, 7.2, 8),
        (5, float("inf"), 5.0, 5),
        (5, float("nan"), 5.0, 5),
        (0, 1e-12, 5.0, 60),  # an impossible rate: the fallback
    ],
)
def test_retry_after_is_the_drain_time_from_1_to_60_s(queued, rate, fallback, seconds):
    assert retry_after(queued, rate, fallback) == seconds


def test_the_planners_cap_applies_except_in_pass():
    assert cap_of(Policy(mode="bounded_queue"), 12) == 12
    assert cap_of(Policy(mode="pass"), 12) is None
    assert cap_of(Policy(mode="pass", max_inflight_per_replica=3), 12) == 3


def test_timeouts_and_shutdown_are_503_with_retry_after_and_words():
    late, gone = timed_out(BOUNDED, load(2, queued=3)), shutting_down(load(2, queued=3))
    assert (late.status, late.code) == (503, "queue_timeout") and "5 s" in late.message and late.retry_after == 2
    assert (gone.status, gone.code) == (503, "shutting_down") and 1 <= gone.retry_after <= 60


states = st.builds(
    Load,
    # Replica names are unique in a gateway (its targets are deduplicated): the decision names one replica.
    replicas=st.lists(
        st.builds(ReplicaLoad, st.text(min_size=1, max_size=5), st.integers(0, 500), st.booleans()),
        max_size=6,
        unique_by=lambda r: r.name,
    ).map(tuple),
    queued=st.integers(0, 10_000),
    batch_queued=st.integers(0, 10_000),
    completions_per_second=st.none() | st.floats(allow_nan=True, allow_infinity=True),
    seconds_to_off_peak=st.none() | st.floats(allow_nan=True, allow_infinity=True),
)
policies = st.builds(
    Policy,
    mode=st.sampled_from(MODES),
    max_queue=st.integers(0, 100),
    max_wait_seconds=st.floats(0.1, 600),
    max_inflight_per_replica=st.none() | st.integers(1, 50),
    hosted_after_queue=st.integers(0, 100),
    defer_action=st.sampled_from(["reject", "hold"]),
    max_batch_queue=st.integers(0, 100),
    hosted_allowed=st.booleans(),
)


@given(policies, states, st.sampled_from(["interactive", "deferrable"]), st.none() | st.integers(1, 50))
def test_every_arrival_gets_one_decision_that_keeps_the_bounds(policy, state, request_class, planned_cap):
    decision = admit(policy, state, request_class, NOW, planned_cap)
    cap = cap_of(policy, planned_cap)
    if isinstance(decision, Forward):
        chosen = next(r for r in state.replicas if r.name == decision.replica)
        assert chosen.healthy and (cap is None or chosen.in_flight < cap)
    elif isinstance(decision, Wait) and decision.queue == "interactive" and policy.mode != "pass":
        assert state.queued < policy.max_queue  # never past the bound
        assert decision.deadline == NOW + policy.max_wait_seconds
    elif isinstance(decision, Hosted):
        assert policy.mode == "hosted" and policy.hosted_allowed
    elif isinstance(decision, Refuse):
        assert decision.status in (429, 503) and decision.message and 1 <= decision.retry_after <= 6 * 3600
    assert least_loaded(state, cap) is None or any(r.healthy for r in state.replicas)
