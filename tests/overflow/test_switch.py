"""The switch an operator asks for: checked by the gateway's rules, its PUT body, and its one-line summary."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.live.switch import default_actor
from console.overflow.policy import MAX_ACTOR, MAX_REASON, Policy, PolicyError, parse_switch
from console.overflow.switch import (
    LINE,
    NO_REASON,
    SwitchRequest,
    check_allowed,
    describe,
    prefilled,
    request,
)
from tests.gateway.plans import gateway_plan


def test_body_is_what_the_gateway_parses_back():
    req = request("bounded_queue", "spike", "alice", "30m", max_queue=64, max_wait_seconds=2)
    assert req.body() == {
        "mode": "bounded_queue",
        "reason": "spike",
        "actor": "alice",
        "for": 1800.0,
        "max_queue": 64,
        "max_wait_seconds": 2.0,
    }
    policy = parse_switch(req.body(), Policy(), now=100.0)
    assert (policy.mode, policy.max_queue, policy.max_wait_seconds, policy.expires_at) == (
        "bounded_queue",
        64,
        2.0,
        1900.0,
    )


def test_parameters_left_out_are_left_out_of_the_body():
    body = request("pass", "capacity is back", "bob").body()
    assert body == {"mode": "pass", "reason": "capacity is back", "actor": "bob"}


@pytest.mark.parametrize(
    "mode, reason, actor, duration, parameters, field",
    [
        ("fast", "r", "a", None, {}, "mode"),
        (None, "r", "a", None, {}, "mode"),
        ("pass", "", "a", None, {}, "reason"),
        ("pass", "   ", "a", None, {}, "reason"),
        ("pass", NO_REASON, "a", None, {}, "reason"),
        ("pass", None, "a", None, {}, "reason"),
        ("pass", "r", "", None, {}, "actor"),
        ("pass", "r", "a", "0m", {}, "for"),
        ("pass", "r", "a", "8d", {}, "for"),
        ("pass", "r", "a", "soon", {}, "for"),
        ("bounded_queue", "r", "a", None, {"max_queue": -1}, "max_queue"),
        ("bounded_queue", "r", "a", None, {"max_queue": 10**9}, "max_queue"),
        ("bounded_queue", "r", "a", None, {"max_queue": True}, "max_queue"),
        ("bounded_queue", "r", "a", None, {"max_wait_seconds": 0}, "max_wait_seconds"),
        ("bounded_queue", "r", "a", None, {"max_wait_seconds": float("nan")}, "max_wait_seconds"),
        ("bounded_queue", "r", "a", None, {"max_inflight_per_replica": 0}, "max_inflight_per_replica"),
        ("hosted", "r", "a", None, {"hosted_after_queue": -3}, "hosted_after_queue"),
        ("defer", "r", "a", None, {"defer_action": "drop"}, "defer_action"),
        ("defer", "r", "a", None, {"max_batch_queue": 1.5}, "max_batch_queue"),
        ("defer", "r", "a", None, {"speed": 3}, "speed"),
    ],
)
def test_a_bad_value_names_its_field(mode, reason, actor, duration, parameters, field):
    with pytest.raises(PolicyError) as refused:
        request(mode, reason, actor, duration, **parameters)
    assert refused.value.field == field


def test_hosted_is_refused_when_the_plan_keeps_prompts_in():
    req = request("hosted", "spike", "alice")
    with pytest.raises(PolicyError) as refused:
        check_allowed(req, Policy(hosted_allowed=False))
    assert refused.value.field == "mode"
    check_allowed(req, Policy(hosted_allowed=True))


def test_prefilled_from_a_plan_is_per_replica_times_replicas():
    plan = gateway_plan()
    draft = prefilled(plan, replicas=4, instances=2)
    assert draft.mode == plan.overflow.mode
    assert draft.max_queue == plan.overflow.max_queue * 4 // 2
    assert draft.max_wait_seconds == plan.overflow.max_wait_seconds
    assert draft.reason == NO_REASON  # the operator must write one: `request` refuses it
    from_policy = prefilled(Policy(max_queue=7, hosted_after_queue=3), mode="hosted")
    assert (from_policy.mode, from_policy.max_queue, from_policy.hosted_after_queue) == ("hosted", 7, 3)


@pytest.mark.parametrize(
    "req, current, words",
    [
        (
            dict(mode="bounded_queue", max_queue=64),
            Policy(mode="pass"),
            "new requests past 64 queued get 429 with Retry-After",
        ),
        (dict(mode="bounded_queue"), Policy(max_queue=12, max_wait_seconds=3), "past 12 queued get 429"),
        (dict(mode="bounded_queue"), Policy(max_queue=12, max_wait_seconds=3), "503 after 3 s"),
        (dict(mode="hosted", hosted_after_queue=8), Policy(), "past 8 queued, new requests go to the hosted endpoint"),
        (dict(mode="defer"), Policy(), "deferrable requests get 429 until off-peak; interactive keep the queue"),
        (dict(mode="defer", defer_action="hold", max_batch_queue=500), Policy(), "batch queue of 500"),
        (dict(mode="pass"), Policy(mode="bounded_queue"), "every request is forwarded; the queue is released"),
        (dict(mode="pass"), Policy(mode="pass"), "every request is forwarded"),
        (dict(mode="pass", max_inflight_per_replica=16), Policy(mode="pass"), "at most 16 in flight on each of 3"),
        (dict(mode="pass", for_text="30m"), Policy(mode="pass"), "for 30m"),
    ],
)
def test_describe_says_what_changes_for_clients(req, current, words):
    duration = req.pop("for_text", None)
    line = describe(request(req.pop("mode"), "why", "who", duration, **req), current, replicas=3)
    assert words in line
    assert len(line) <= LINE and "\n" not in line


def test_describe_without_a_known_policy_uses_the_defaults():
    line = describe(request("bounded_queue", "why", "who"), None, replicas=2)
    assert line.startswith(f"new requests past {Policy().max_queue} queued")


@settings(max_examples=200, deadline=None)
@given(
    mode=st.sampled_from(["pass", "bounded_queue", "hosted", "defer"]),
    reason=st.text(min_size=1, max_size=2000),
    actor=st.text(min_size=1, max_size=500),
    queue=st.one_of(st.none(), st.integers(0, 100_000)),
    after=st.one_of(st.none(), st.integers(0, 100_000)),
    batch=st.one_of(st.none(), st.integers(0, 100_000)),
    cap=st.one_of(st.none(), st.integers(1, 10_000)),
    hold=st.booleans(),
    duration=st.one_of(st.none(), st.floats(1, 7 * 86_400)),
)
def test_any_accepted_request_is_a_clean_body_and_one_short_line(
    mode, reason, actor, queue, after, batch, cap, hold, duration
):
    try:
        req = request(
            mode,
            reason,
            actor,
            duration,
            max_queue=queue,
            hosted_after_queue=after,
            max_batch_queue=batch,
            max_inflight_per_replica=cap,
            defer_action="hold" if hold else None,
        )
    except PolicyError as refused:
        assert refused.field in ("reason", "actor")  # only blank (or unprintable-only) text is refused here
        return
    assert req.reason.isprintable() and 0 < len(req.reason) <= MAX_REASON
    assert req.actor.isprintable() and 0 < len(req.actor) <= MAX_ACTOR
    parse_switch(req.body(), Policy(hosted_allowed=True), 0.0)  # the gateway takes what was accepted
    line = describe(req, Policy(), replicas=5)
    assert 0 < len(line) <= LINE and line.isprintable()


@settings(max_examples=200, deadline=None)
@given(
    body=st.dictionaries(
        st.sampled_from(["max_queue", "max_wait_seconds", "max_inflight_per_replica", "hosted_after_queue"]),
        st.one_of(
            st.integers(), st.floats(allow_nan=True), st.text(max_size=20), st.booleans(), st.lists(st.integers())
        ),
    )
)
def test_hostile_parameters_are_refused_by_name_or_accepted_within_bounds(body):
    try:
        req = request("bounded_queue", "why", "who", **body)
    except PolicyError as refused:
        assert refused.field in body
        return
    for name, value in req.parameters().items():
        assert not isinstance(value, bool) and isinstance(value, (int, float)), (name, value)


def test_direct_construction_is_checked_too():
    with pytest.raises(PolicyError):
        SwitchRequest(mode="bounded_queue", reason="r", actor="a", max_queue=-5)


def test_default_actor_is_user_at_host_printable_and_bounded():
    actor = default_actor()
    assert actor and actor.isprintable() and len(actor) <= MAX_ACTOR
    assert "@" in actor or actor == "unknown"
