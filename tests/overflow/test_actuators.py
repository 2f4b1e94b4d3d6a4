"""The actuators against real parts: capcon gateways on loopback, a webhook receiver, commands in a shell."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import sys
import time
from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from console.errors import UserError
from console.live.actuators import (
    DETAIL,
    ActuatorAnswer,
    CommandActuator,
    GatewayActuator,
    WebhookActuator,
    actuators_for,
    apply_all,
    bounded,
    read_status,
)
from console.overflow.switch import request
from console.plan.model import Actuator, FleetSource, GatewayAddress
from tests.gateway.conftest import TOKEN, gateway, sim_fleet
from tests.gateway.plans import gateway_plan

pytestmark = pytest.mark.timeout(60)

SECRET = "webhook-secret-5f0c2a9d81e3"
BODY = request("bounded_queue", "spike, scale-up coming", "alice", "30m", max_queue=16).body()


class Receiver:
    """A webhook endpoint on loopback that checks the signature as a receiving team would."""

    def __init__(self, status: int = 200, answer: bytes = b'{"ok": true}', delay: float = 0.0, expect: int = 1):
        self.status, self.answer, self.delay = status, answer, delay
        self.bodies: list[dict] = []
        self.bad_signatures = 0
        self.expect = expect
        self.all_arrived = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        stamp = request.headers.get("X-Capcon-Timestamp", "")
        signature = request.headers.get("X-Capcon-Signature", "")
        expected = "sha256=" + hmac.new(SECRET.encode(), f"{stamp}.".encode() + raw, hashlib.sha256).hexdigest()
        if not stamp.isdigit() or abs(int(stamp) - time.time()) > 300 or not hmac.compare_digest(signature, expected):
            self.bad_signatures += 1
            return web.Response(status=401, text="bad signature")
        self.bodies.append(json.loads(raw))
        if len(self.bodies) >= self.expect:
            self.all_arrived.set()
        if self.delay < 0:  # wait for every expected call: proves they were sent together
            await asyncio.wait_for(self.all_arrived.wait(), 5)
        elif self.delay:
            await asyncio.sleep(self.delay)
        return web.Response(status=self.status, body=self.answer)


class Receiving:
    def __init__(self, receiver: Receiver):
        self.receiver = receiver

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self.receiver.handle)
        self.runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.receiver.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/hook"
        return self.receiver

    async def __aexit__(self, *_):
        await self.runner.cleanup()


def no_secret_in(answer: ActuatorAnswer, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in answer.name and secret not in answer.detail


# --- webhook ----------------------------------------------------------------------


async def test_webhook_is_signed_and_its_answer_reported():
    async with Receiving(Receiver(answer=b'{"applied": "litellm router"}')) as hook:
        answer = await WebhookActuator(hook.url, SECRET, timeout=5).apply(BODY)
    assert hook.bad_signatures == 0 and hook.bodies == [BODY]
    assert answer.ok and answer.detail.startswith("applied (200)") and "litellm router" in answer.detail
    no_secret_in(answer, SECRET)


async def test_webhook_with_the_wrong_secret_is_refused_by_the_receiver():
    async with Receiving(Receiver()) as hook:
        answer = await WebhookActuator(hook.url, "another-secret-entirely", timeout=5).apply(BODY)
    assert hook.bad_signatures == 1 and not hook.bodies
    assert not answer.ok and answer.detail.startswith("refused (401)") and "bad signature" in answer.detail


async def test_webhook_failure_is_reported_with_its_status():
    async with Receiving(Receiver(status=500, answer=b"envoy config push failed")) as hook:
        answer = await WebhookActuator(hook.url, SECRET, timeout=5).apply(BODY)
    assert not answer.ok and answer.detail == "refused (500): envoy config push failed"


async def test_webhook_timeout_is_an_answer():
    async with Receiving(Receiver(delay=30)) as hook:
        answer = await WebhookActuator(hook.url, SECRET, timeout=0.3).apply(BODY)
    assert not answer.ok and answer.detail == "no answer within 0.3 s"


async def test_webhook_not_listening():
    async with Receiving(Receiver()) as hook:
        url = hook.url
    answer = await WebhookActuator(url, SECRET, timeout=2).apply(BODY)
    assert not answer.ok and answer.detail.startswith("not answering")


@pytest.mark.parametrize(
    "answer",
    [
        b"x" * (10 * 1024 * 1024),
        b"\x1b[2J\x1b]0;owned\x07 done\r\nsecond line",
        b"\xff\xfe\x00garbage",
        SECRET.encode() + b" echoed back",
    ],
)
async def test_hostile_webhook_answers_are_bounded_printable_and_masked(answer):
    async with Receiving(Receiver(answer=answer)) as hook:
        result = await WebhookActuator(hook.url + "?token=query-secret-abc", SECRET, timeout=10).apply(BODY)
    assert result.ok
    assert len(result.detail) <= DETAIL + 20 and result.detail.isprintable()
    assert "\x1b" not in result.detail and "\n" not in result.detail
    no_secret_in(result, SECRET, "query-secret-abc")


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=5000),
    secret=st.text(alphabet="abcdefx0123456789_-", min_size=8, max_size=40),
)
def test_bounded_is_one_printable_line_without_the_secret(text, secret):
    shown = bounded(text + secret + text, [secret])
    assert shown.isprintable() and len(shown) <= DETAIL and "\n" not in shown
    assert secret not in shown


# --- command ----------------------------------------------------------------------

CHECKER = """\
import json, sys
body = json.load(sys.stdin)
if body.get("mode") != "bounded_queue" or not body.get("reason"):
    print("unexpected body", body.get("mode"), file=sys.stderr)
    sys.exit(1)
print("noise on stderr", file=sys.stderr)
print("envoy runtime updated: max_queue=%d" % body["max_queue"], file=sys.stderr)
"""


async def test_command_gets_the_json_on_stdin_and_exit_zero_is_applied(tmp_path):
    script = tmp_path / "apply.py"
    script.write_text(CHECKER)
    answer = await CommandActuator([sys.executable, str(script)], timeout=20).apply(BODY)
    assert answer.ok and answer.detail == "applied (exit 0): envoy runtime updated: max_queue=16"


async def test_command_exit_one_is_refused_with_its_last_stderr_line(tmp_path):
    script = tmp_path / "apply.py"
    script.write_text(CHECKER)
    answer = await CommandActuator([sys.executable, str(script)], timeout=20).apply({**BODY, "mode": "pass"})
    assert not answer.ok and answer.detail == "refused (exit 1): unexpected body pass"


async def test_command_past_its_timeout_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child-alive"
    child = tmp_path / "child.py"
    child.write_text(f"import pathlib, time\ntime.sleep(2)\npathlib.Path({str(marker)!r}).write_text('alive')\n")
    script = tmp_path / "slow.py"
    script.write_text(
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(child)!r}])\ntime.sleep(60)\n"
    )
    answer = await CommandActuator([sys.executable, str(script)], timeout=0.8).apply(BODY)
    assert not answer.ok and answer.detail == "no answer within 0.8 s: killed"
    await asyncio.sleep(3)
    assert not marker.exists()  # the whole process group went


async def test_command_that_cannot_start(tmp_path):
    missing = await CommandActuator([str(tmp_path / "nowhere")], timeout=5).apply(BODY)
    assert not missing.ok and missing.detail == "cannot start: no such program"
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    denied = await CommandActuator([str(script)], timeout=5).apply(BODY)
    assert not denied.ok and denied.detail == "cannot start: not executable"


async def test_command_flooding_stderr_keeps_a_bounded_last_line(tmp_path):
    script = tmp_path / "loud.py"
    script.write_text(
        "import sys\nsys.stdin.read()\nsys.stderr.write(('\\x1b[31m' + 'x' * 100000 + '\\n') * 100)\n"
        "sys.stderr.write('\\x1b]0;title\\x07 the end\\n')\nsys.exit(3)\n"
    )
    answer = await CommandActuator([sys.executable, str(script)], timeout=20).apply(BODY)
    assert not answer.ok and answer.detail.startswith("refused (exit 3): ")
    assert answer.detail.endswith("the end") and answer.detail.isprintable() and len(answer.detail) <= DETAIL + 30


# --- gateway ----------------------------------------------------------------------


async def test_gateway_actuator_applies_and_reports_the_mode_before():
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        answer = await GatewayActuator(server.admin_url, TOKEN).apply(request("pass", "test", "pytest").body())
        assert server.policy().mode == "pass" and server.policy().actor == "pytest"
    assert answer.ok and answer.previous_mode == "bounded_queue"
    assert answer.detail == "applied: bounded_queue -> pass"
    no_secret_in(answer, TOKEN)


async def test_gateway_actuator_wrong_token_refused_and_bad_body_named():
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        refused = await GatewayActuator(server.admin_url, "wrong-token-0123456789").apply(BODY)
        bad = await GatewayActuator(server.admin_url, TOKEN).apply({**BODY, "max_queue": -1})
        assert server.switches == 0
    assert not refused.ok and refused.detail == "token refused (401)"
    assert not bad.ok and bad.detail.startswith("refused (400): max_queue: got -1")
    no_secret_in(bad, TOKEN)


async def test_gateway_actuator_to_a_stopped_gateway_is_not_answering():
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        url = server.admin_url
    answer = await GatewayActuator(url, TOKEN).apply(BODY)
    assert not answer.ok and answer.detail.startswith("not answering")


async def test_read_status_gives_policy_and_state():
    async with sim_fleet(2) as fleet, gateway(fleet.urls) as server:
        status = await read_status(server.admin_url, TOKEN)
        wrong = await read_status(server.admin_url, "wrong-token-0123456789")
    assert status.ok and status.policy["mode"] == "bounded_queue" and len(status.state["replicas"]) == 2
    assert not wrong.ok and wrong.detail == "token refused (401)"


async def test_apply_all_asks_concurrently_and_keeps_the_order(tmp_path):
    # The receiver answers only once both calls arrived: asked one after the other, the first would time out.
    async with Receiving(Receiver(delay=-1, expect=2)) as hook, sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        script = tmp_path / "ok.py"
        script.write_text("import sys; sys.stdin.read()\n")
        actuators = [
            WebhookActuator(hook.url, SECRET, timeout=10),
            GatewayActuator(server.admin_url, TOKEN),
            WebhookActuator(hook.url, SECRET, timeout=10),
            CommandActuator([sys.executable, str(script)], timeout=20),
        ]
        answers = await apply_all(actuators, BODY)
    assert [a.name for a in answers] == [a.name for a in actuators]
    assert all(a.ok for a in answers), answers


async def test_apply_all_bounds_each_actuator():
    class Stuck:
        name = "stuck"

        async def apply(self, body):
            await asyncio.sleep(60)

    class Broken:
        name = "broken"

        async def apply(self, body):
            raise RuntimeError("boom")

    answers = await apply_all([Stuck(), Broken()], BODY, timeout=0.2)
    assert [(a.name, a.ok) for a in answers] == [("stuck", False), ("broken", False)]
    assert answers[0].detail == "no answer within 0.2 s" and answers[1].detail == "failed: boom"


# --- building them from the plan ----------------------------------------------------


def plan_with(actuators=None, gateways=(), token_env="CAPCON_TEST_ADMIN"):
    plan = gateway_plan()
    overflow = replace(plan.overflow, admin_token_env=token_env, actuators=actuators)
    return replace(plan, overflow=overflow, fleet=FleetSource(targets=("http://r:8000",), gateways=gateways))


def test_default_actuators_are_the_fleet_gateways_with_an_admin_url():
    plan = plan_with(gateways=(GatewayAddress("http://g1:8080", "http://g1:8081"), GatewayAddress("http://g2:8080")))
    built = actuators_for(plan, None, None, {"CAPCON_TEST_ADMIN": TOKEN})
    assert [a.name for a in built] == ["gateway http://g1:8081"]
    override = actuators_for(plan, ["http://a:1", "http://b:2"], None, {"CAPCON_TEST_ADMIN": TOKEN})
    assert [a.name for a in override] == ["gateway http://a:1", "gateway http://b:2"]


def test_plan_actuators_in_order_with_their_secrets_from_the_environment():
    plan = plan_with(
        actuators=(
            Actuator("webhook", url="https://hooks.example/x?key=inurl", secret_env="HOOK_SECRET", timeout_seconds=3),
            Actuator("gateway"),
            Actuator("command", argv=("/usr/local/bin/apply", "--prod"), timeout_seconds=7),
        ),
        gateways=(GatewayAddress("http://g1:8080", "http://g1:8081"),),
    )
    built = actuators_for(plan, None, None, {"CAPCON_TEST_ADMIN": TOKEN, "HOOK_SECRET": SECRET})
    assert [a.name for a in built] == [
        "webhook https://hooks.example/x?key=***",
        "gateway http://g1:8081",
        "command /usr/local/bin/apply --prod",
    ]
    assert built[0].timeout == 3 and built[2].timeout == 7
    for actuator in built:
        assert SECRET not in repr(actuator) and TOKEN not in repr(actuator)


@pytest.mark.parametrize(
    "environ, words",
    [
        ({}, "CAPCON_TEST_ADMIN: the variable is not set or empty"),
        ({"CAPCON_TEST_ADMIN": "   "}, "CAPCON_TEST_ADMIN: the variable is not set or empty"),
        ({"CAPCON_TEST_ADMIN": "short"}, "CAPCON_TEST_ADMIN: shorter than 16 characters"),
        ({"CAPCON_TEST_ADMIN": TOKEN}, "HOOK_SECRET: the variable is not set or empty"),
    ],
)
def test_a_missing_variable_is_named_never_shown(environ, words):
    plan = plan_with(
        actuators=(Actuator("gateway"), Actuator("webhook", url="https://h/x", secret_env="HOOK_SECRET")),
        gateways=(GatewayAddress("http://g1:8080", "http://g1:8081"),),
    )
    with pytest.raises(UserError) as refused:
        actuators_for(plan, None, None, environ)
    assert words in str(refused.value) and "short" not in str(refused.value).replace("shorter", "")


def test_nothing_to_switch_is_said():
    with pytest.raises(UserError, match="nothing to switch"):
        actuators_for(None, None, None, {})
    with pytest.raises(UserError, match="has no gateway"):
        actuators_for(plan_with(actuators=(Actuator("gateway"),)), None, None, {"CAPCON_TEST_ADMIN": TOKEN})
    with pytest.raises(UserError, match="--admin-token-env VAR"):
        actuators_for(plan_with(token_env=None), ["http://g:1"], None, {})


async def test_no_token_or_secret_reaches_the_log(caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    async with Receiving(Receiver()) as hook, sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        await apply_all([GatewayActuator(server.admin_url, TOKEN), WebhookActuator(hook.url, SECRET, 5)], BODY)
    assert TOKEN not in caplog.text and SECRET not in caplog.text


def test_session_type_is_aiohttp():
    # The actuators speak HTTP through aiohttp, as the gateway does: one client library in the tree.
    assert aiohttp.ClientSession
