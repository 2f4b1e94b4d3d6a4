"""PUT /admin/policy with any JSON at all: 200, or 400 naming the field; never a 500, never half a switch."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.overflow.policy import MODES
from console.overflow.switch import PARAMETERS

from .conftest import auth, gateway
from .fake_upstreams import scripted

pytestmark = pytest.mark.timeout(120)

FIELDS = (*PARAMETERS, "actor", "for")  # the switch's parameters, and who asks for how long
KNOWN = {"mode", "reason", *FIELDS}
HUGE = 10**400


async def put(session: aiohttp.ClientSession, url: str, data: bytes) -> tuple[int, dict]:
    async with session.put(
        url + "/admin/policy", data=data, headers={**auth(), "Content-Type": "application/json"}
    ) as response:
        return response.status, await response.json(content_type=None)


def check_answer(body: object, status: int, answer: dict) -> None:
    assert status in (200, 400), (status, answer)
    if status == 400:
        param = answer["error"]["param"]
        assert isinstance(param, str) and param and answer["error"]["message"]
        named = set(body) if isinstance(body, dict) else set()
        assert param == "body" or param in KNOWN or param in named or param == '""', param
    else:
        assert answer["policy"]["mode"] in MODES


@pytest.mark.parametrize(
    "body, field",
    [
        ({"mode": "pass", "reason": "x", "max_wait_seconds": HUGE}, "max_wait_seconds"),
        ({"mode": "pass", "reason": "x", "max_wait_seconds": -HUGE}, "max_wait_seconds"),
        ({"mode": "pass", "reason": "x", "for": HUGE}, "for"),
        ({"mode": "pass", "reason": "x", "for": -HUGE}, "for"),
        ({"mode": "pass", "reason": "x", "for": "9" * 400}, "for"),
        ({"mode": "pass", "reason": "x", "for": "9" * 400 + "d"}, "for"),
        ({"mode": "pass", "reason": "x", "max_queue": HUGE}, "max_queue"),
        ({"mode": "pass", "reason": "x", "max_inflight_per_replica": HUGE}, "max_inflight_per_replica"),
        ({"mode": "pass", "reason": "x", "colour": HUGE}, "colour"),
        ({"mode": "pass", "reason": "x", "max_wait_seconds": [[[1]]]}, "max_wait_seconds"),
        ({"mode": {"pass": [1, {"x": None}]}, "reason": "x"}, "mode"),
        ({"mode": "pass", "reason": ["x"]}, "reason"),
        ({"mode": "pass", "reason": "x", "actor": {"a": [[["b"]]]}}, "actor"),
        ({"mode": "pass", "reason": "x", "defer_action": ["hold"]}, "defer_action"),
        ({"mode": "pass", "reason": "x", "for": {"h": 1}}, "for"),
        ({"mode": "pass", "reason": "x", "for": True}, "for"),
        ({"mode": "bounded_queue", "reason": "x", "max_queue": 1.5}, "max_queue"),
        ({"mode": HUGE, "reason": "x"}, "mode"),
        ({"mode": "pass", "reason": HUGE}, "reason"),
        (HUGE, "body"),
        ("pass", "body"),
        (None, "body"),
        ([{"mode": "pass", "reason": "x"}], "body"),
    ],
)
async def test_junk_in_any_field_is_a_400_naming_it_and_nothing_changes(session, body, field):
    async with scripted() as replica, gateway([replica.url]) as server:
        status, answer = await put(session, server.admin_url, json.dumps(body).encode())
        assert status == 400 and answer["error"]["param"] == field, answer
        assert server.policy() == server.plan_policy and server.switches == 0


@pytest.mark.parametrize(
    "data",
    [
        b'{"mode": "pass", "reason": "x", "max_wait_seconds": 1e400}',  # Infinity once read
        b'{"mode": "pass", "reason": "x", "max_wait_seconds": NaN}',
        b'{"mode": "pass", "reason": "x", "for": -Infinity}',
        b'{"mode": "pass", "reason": "x", "for": ' + b"[" * 200 + b"]" * 200 + b"}",  # nested past the bound
        b"[" * 60_000,
        b'{"mode": "pass", "reason": "x", "max_queue": ' + b"9" * 5000 + b"}",  # past Python's own digit limit
    ],
)
async def test_json_only_a_parser_reads_strangely_is_a_400_too(session, data):
    async with scripted() as replica, gateway([replica.url]) as server:
        status, answer = await put(session, server.admin_url, data)
        assert status == 400 and answer["error"]["param"] in ("max_wait_seconds", "for", "body"), answer
        assert server.switches == 0


async def test_sane_switches_still_apply_after_junk(session):
    async with scripted() as replica, gateway([replica.url]) as server:
        await put(session, server.admin_url, json.dumps({"mode": "pass", "reason": "x", "for": HUGE}).encode())
        body = {"mode": "pass", "reason": "x", "for": "30m", "max_wait_seconds": 2}
        status, answer = await put(session, server.admin_url, json.dumps(body).encode())
        assert status == 200 and answer["policy"]["mode"] == "pass" and answer["policy"]["expires_at"]
        assert server.switches == 1


# Any JSON value: what a client can send. Numbers far past every bound and both of JSON's extremes included.
NUMBERS = (
    st.integers()
    | st.integers(min_value=-(10**450), max_value=10**450)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([HUGE, -HUGE, 2**63, 2**53 + 1, 1e308, -0.0, 600, 600.0001, 604_800, 604_801])
)
LEAVES = st.none() | st.booleans() | NUMBERS | st.text(max_size=12)
JSON_VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
SPECIAL = st.sampled_from(["30m", "2h", "1d", "8d", "9" * 400, "1e400", "-5", "reject", "hold", "anyone"])
FIELD_VALUES = NUMBERS | SPECIAL | JSON_VALUES
# A switch the policy reads to its end (mode and reason as expected), its other fields anything: where a
# number past every float used to become a 500. Then switches with junk anywhere, then any JSON at all.
READ_THROUGH = st.fixed_dictionaries(
    {"mode": st.sampled_from(["pass", "bounded_queue", "defer"]), "reason": st.text(min_size=1, max_size=20)},
    optional=dict.fromkeys(FIELDS, FIELD_VALUES),
)
SWITCHES = st.fixed_dictionaries(
    {"mode": st.sampled_from(MODES) | JSON_VALUES, "reason": st.text(min_size=1, max_size=20) | JSON_VALUES},
    optional=dict.fromkeys(FIELDS, FIELD_VALUES) | {"extra": JSON_VALUES},
)
BODIES = READ_THROUGH | SWITCHES | JSON_VALUES


def test_any_json_body_is_a_200_or_a_400_naming_the_field():
    """One gateway for every example (a real listener); hypothesis drives it from a loop of the test's own."""
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()

    async def start():
        replica = await stack.enter_async_context(scripted())
        server = await stack.enter_async_context(gateway([replica.url]))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        return server, session

    try:
        server, session = loop.run_until_complete(start())

        statuses = []

        @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(BODIES)
        def check(body):
            status, answer = loop.run_until_complete(put(session, server.admin_url, json.dumps(body).encode()))
            check_answer(body, status, answer)
            statuses.append(status)

        check()
        assert {200, 400} <= set(statuses)  # both reached: switches applied and switches refused
        # After all of it the gateway answers and reports its state.
        status, _ = loop.run_until_complete(put(session, server.admin_url, b'{"mode": "pass", "reason": "x"}'))
        assert status == 200
        assert server.state()["policy"]["mode"] == "pass"
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()
