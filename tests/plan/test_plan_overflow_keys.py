"""The overflow section's gateway keys: variable names (never keys) and the hosted price, refused in one line."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.plan.schema import PlanError, load_plan, parse_plan

from conftest import BASE_PLAN, changed

HOSTED = {"hosted_url": "https://api.example.com/v1", "hosted_model": "big"}
KEY = "sk-proj-0123456789abcdefABCDEF0123456789"  # the shape of a hosted API key


def _text(overflow: dict) -> str:
    return yaml.safe_dump(changed(BASE_PLAN, {"overflow": overflow}), default_flow_style=None, width=1000)


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_the_keys_load_and_default_to_none(write_plan):
    plan = load_plan(
        write_plan(
            {
                "data": {"prompts_may_leave": True},
                "overflow": {
                    **HOSTED,
                    "mode": "hosted",
                    "hosted_key_env": "HOSTED_API_KEY",
                    "hosted_price_per_million": 2.5,
                    "deferrable_keys_env": "_batch_keys2",
                },
            }
        )
    )
    assert plan.overflow.hosted_key_env == "HOSTED_API_KEY"
    assert plan.overflow.hosted_price_per_million == 2.5
    assert plan.overflow.deferrable_keys_env == "_batch_keys2"
    plain = load_plan(write_plan({"overflow": {"mode": "defer"}}))
    assert (plain.overflow.hosted_key_env, plain.overflow.hosted_price_per_million) == (None, None)
    assert plain.overflow.deferrable_keys_env is None
    assert load_plan(write_plan({"overflow": {"deferrable_keys_env": "SK_BATCH"}})).overflow.deferrable_keys_env
    # Deferrable keys need no hosted endpoint; a price of 0 is a free endpoint.
    assert load_plan(write_plan({"overflow": {"deferrable_keys_env": "K"}})).overflow.deferrable_keys_env == "K"
    assert (
        load_plan(write_plan({"overflow": {**HOSTED, "hosted_price_per_million": 0}})).overflow.hosted_price_per_million
        == 0
    )


@pytest.mark.parametrize("key", ["hosted_key_env", "deferrable_keys_env"])
@pytest.mark.parametrize(
    "value, problem",
    [
        (KEY, "the value looks like an API key (not shown)"),
        ("sk-short", "the value looks like an API key (not shown)"),
        ("sk_live_0123456789abcdef", "the value looks like an API key (not shown)"),
        ("Bearer abcdef0123456789", "the value looks like an API key (not shown)"),
        ("A" * 65, "65 characters, longer than a variable name (not shown)"),
        ("abcdef0123456789" * 8, "128 characters, longer than a variable name (not shown)"),
        ("MY-VARIABLE", "not a variable name (11 characters, not shown)"),
        ("1HOSTED_KEY", "not a variable name (11 characters, not shown)"),
        ("HOSTED KEY", "not a variable name (10 characters, not shown)"),
        ("$HOSTED_KEY", "not a variable name (11 characters, not shown)"),
        ("KEY\u00e9", "not a variable name (4 characters, not shown)"),
        ("a,b", "not a variable name (3 characters, not shown)"),
        ("", "not text (not shown)"),
        (["HOSTED_KEY"], "not text (not shown)"),
        ({"name": "HOSTED_KEY"}, "not text (not shown)"),
    ],
)
def test_a_value_that_is_not_a_variable_name_is_refused_without_showing_it(key, value, problem):
    text = _text({**HOSTED, key: value})
    with pytest.raises(PlanError) as refused:
        parse_plan(text, "plan.yaml")
    message = str(refused.value)
    line = _line_of(text, f"{key}:")
    assert message.startswith(f"plan.yaml:{line}: overflow.{key}: {problem}; expected the NAME of an environment")
    assert "put the key itself in the environment, never in the plan" in message
    if isinstance(value, str) and len(value) > 3:
        assert value not in message


def test_the_plan_shows_the_refusal_in_one_line_and_exits_2(write_plan, capcon):
    path = write_plan({"overflow": {**HOSTED, "hosted_key_env": KEY}})
    code, out, err = capcon("plan", path)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "overflow.hosted_key_env: the value looks like an API key" in err
    assert KEY not in err and "sk-proj" not in err


@pytest.mark.parametrize(
    "value, wanted",
    [
        (-1, "got -1; expected a number >= 0 and <= 1000000 dollars per million tokens"),
        (1e7, "got 10000000.0; expected at most 1000000 dollars per million tokens"),
        (".nan", "got .nan; expected a number >= 0"),
        ("cheap", "got cheap; expected a number >= 0"),
        (True, "got true; expected a number >= 0"),
    ],
)
def test_the_hosted_price_is_bounded(value, wanted):
    text = _text({**HOSTED, "hosted_price_per_million": value})
    if value == ".nan":
        text = text.replace("'.nan'", ".nan")
    with pytest.raises(PlanError, match=re.escape(f"overflow.hosted_price_per_million: {wanted}")):
        parse_plan(text, "plan.yaml")


@pytest.mark.parametrize("key, value", [("hosted_key_env", "HOSTED_API_KEY"), ("hosted_price_per_million", 2.0)])
def test_hosted_keys_need_a_hosted_url(key, value):
    text = _text({key: value})
    with pytest.raises(PlanError) as refused:
        parse_plan(text, "plan.yaml")
    assert str(refused.value) == (
        f"plan.yaml:{_line_of(text, key)}: overflow.{key}: {key} without hosted_url; "
        "expected hosted_url for the hosted endpoint as well"
    )


_ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
_SECRETS = st.one_of(
    st.from_regex(r"sk-[A-Za-z0-9_-]{20,80}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_+/=-]{65,200}", fullmatch=True),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(["hosted_key_env", "deferrable_keys_env"]), value=_ANY_TEXT)
def test_any_text_is_a_variable_name_or_one_line_that_does_not_echo_it(key, value):
    try:
        plan = parse_plan(_text({**HOSTED, key: value}), "plan.yaml")
    except PlanError as refused:
        message = str(refused)
        assert "\n" not in message and message.startswith("plan.yaml:")
        assert f"overflow.{key}: " in message
        if len(value.strip()) >= 12:
            assert value.strip() not in message
        return
    name = getattr(plan.overflow, key)
    assert name == value and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name)


@settings(max_examples=100, deadline=None)
@given(key=st.sampled_from(["hosted_key_env", "deferrable_keys_env"]), secret=_SECRETS)
def test_a_key_pasted_in_is_refused_and_never_shown(key, secret):
    with pytest.raises(PlanError) as refused:
        parse_plan(_text({**HOSTED, key: secret}), "plan.yaml")
    assert secret not in str(refused.value) and secret[:12] not in str(refused.value)
    assert "put the key itself in the environment" in str(refused.value)


@settings(max_examples=100, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), _ANY_TEXT))
def test_any_price_loads_within_the_bound_or_is_one_line(value):
    try:
        plan = parse_plan(_text({**HOSTED, "hosted_price_per_million": value}), "plan.yaml")
    except PlanError as refused:
        assert "\n" not in str(refused) and "overflow.hosted_price_per_million: " in str(refused)
        return
    assert 0 <= plan.overflow.hosted_price_per_million <= 1e6
