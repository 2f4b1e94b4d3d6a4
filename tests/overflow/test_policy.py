"""The overflow policy: switches checked field by field, expiry back to the plan's policy, one-line summaries."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.overflow.policy import MODES, Policy, PolicyError, as_json, in_force, parse_duration, parse_switch, summary

PLAN = Policy(mode="bounded_queue", max_queue=64, max_wait_seconds=5.0, hosted_allowed=False)
HOSTED_OK = Policy(mode="bounded_queue", hosted_allowed=True)
NOW = 1_000_000.0


def test_a_switch_keeps_the_plans_parameters_it_does_not_name_and_says_who_and_why():
    switched = parse_switch({"mode": "pass", "reason": "spike is a load test", "actor": "ana"}, PLAN, NOW)
    assert (switched.mode, switched.max_queue, switched.max_wait_seconds) == ("pass", 64, 5.0)
    assert (switched.actor, switched.reason, switched.set_at, switched.expires_at) == (
        "ana",
        "spike is a load test",
        NOW,
        None,
    )
    assert not switched.from_plan and PLAN.from_plan


@pytest.mark.parametrize(
    "body, field, words",
    [
        pytest.param([], "body", "expected a JSON object", id="not an object"),
        pytest.param({"reason": "x"}, "mode", "expected one of pass, bounded_queue, hosted, defer", id="no mode"),
        pytest.param({"mode": "drop", "reason": "x"}, "mode", "expected one of", id="unknown mode"),
        pytest.param({"mode": "pass"}, "reason", "required", id="no reason"),
        pytest.param({"mode": "pass", "reason": "   "}, "reason", "required", id="blank reason"),
        pytest.param(
            {"mode": "pass", "reason": "x", "max_queue": -1}, "max_queue", "from 0 to 100000", id="negative queue"
        ),
        pytest.param(
            {"mode": "pass", "reason": "x", "max_queue": 1.5}, "max_queue", "whole number", id="fractional queue"
        ),
        pytest.param({"mode": "pass", "reason": "x", "max_queue": True}, "max_queue", "whole number", id="bool queue"),
        pytest.param(
            {"mode": "pass", "reason": "x", "max_wait_seconds": 0}, "max_wait_seconds", "over 0", id="no wait"
        ),
        pytest.param(
            {"mode": "pass", "reason": "x", "max_wait_seconds": float("nan")},
            "max_wait_seconds",
            "over 0",
            id="nan wait",
        ),
        pytest.param({"mode": "pass", "reason": "x", "for": "30x"}, "for", "30m, 2h", id="bad expiry"),
        pytest.param({"mode": "pass", "reason": "x", "for": "30d"}, "for", "at most 7d", id="expiry too long"),
        pytest.param({"mode": "pass", "reason": "x", "for": 0}, "for", "longer than zero", id="zero expiry"),
        pytest.param({"mode": "pass", "reason": "x", "colour": "red"}, "colour", "unknown field", id="unknown field"),
        pytest.param({"mode": "pass", "reason": "x", "": None}, '""', "unknown field", id="unknown field, empty name"),
        pytest.param(
            {"mode": "defer", "reason": "x", "defer_action": "drop"},
            "defer_action",
            "reject or hold",
            id="bad defer action",
        ),
        pytest.param({"mode": "hosted", "reason": "x"}, "mode", "prompts_may_leave is false", id="hosted not allowed"),
    ],
)
def test_a_bad_switch_names_its_field_and_what_was_expected(body, field, words):
    with pytest.raises(PolicyError) as raised:
        parse_switch(body, PLAN, NOW)
    assert raised.value.field == field and words in str(raised.value)


def test_hosted_is_accepted_when_prompts_may_leave():
    assert (
        parse_switch({"mode": "hosted", "reason": "spike", "hosted_after_queue": 8}, HOSTED_OK, NOW).hosted_after_queue
        == 8
    )


def test_an_expired_switch_gives_way_to_the_plans_policy():
    switched = parse_switch({"mode": "pass", "reason": "drill", "for": "30m"}, PLAN, NOW)
    assert switched.expires_at == NOW + 1800
    assert in_force(switched, PLAN, NOW + 1799.9) is switched
    assert in_force(switched, PLAN, NOW + 1800) is PLAN
    assert in_force(PLAN, PLAN, NOW + 10**9) is PLAN


@pytest.mark.parametrize(
    "text, seconds",
    [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), (45, 45), (2.5, 2.5), (" 1.5h ", 5400)],
)
def test_durations(text, seconds):
    assert parse_duration(text, "for") == seconds


def test_text_from_a_switch_is_one_printable_line():
    switched = parse_switch({"mode": "pass", "reason": "a\x1b[2Jb\nc", "actor": "x" * 500}, PLAN, NOW)
    assert switched.reason == "a [2Jb c" and len(switched.actor) == 100


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_has_a_summary_in_words(mode):
    policy = Policy(mode=mode, hosted_allowed=True)
    words = summary(policy)
    assert words and "\n" not in words
    assert as_json(policy)["summary"] == words


def test_the_bounded_queue_summary_says_what_clients_get():
    assert summary(PLAN).startswith("new requests past 64 queued get 429 with Retry-After")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)
bodies = st.dictionaries(
    st.sampled_from(
        [
            "mode",
            "max_queue",
            "max_wait_seconds",
            "max_inflight_per_replica",
            "hosted_after_queue",
            "defer_action",
            "max_batch_queue",
            "reason",
            "actor",
            "for",
            "other",
        ]
    ),
    json_values | st.sampled_from(list(MODES)),
    max_size=8,
)


@given(bodies | json_values)
def test_any_body_gives_a_valid_policy_or_a_policy_error(body):
    try:
        policy = parse_switch(body, HOSTED_OK, NOW)
    except PolicyError as error:
        assert error.field and str(error).startswith(error.field)
        return
    assert policy.mode in MODES and policy.reason.strip()
    assert 0 <= policy.max_queue <= 100_000 and 0 < policy.max_wait_seconds <= 600
    assert policy.expires_at is None or (math.isfinite(policy.expires_at) and policy.expires_at > NOW)
