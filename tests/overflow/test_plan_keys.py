"""The plan keys behind a switch: fleet.gateways, overflow.admin_token_env, overflow.actuators."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from console.plan.model import Actuator, GatewayAddress
from console.plan.schema import PlanError, parse_plan

REPO = Path(__file__).resolve().parents[2]
BASE = (REPO / "plans" / "internal-assistant-18rps.yaml").read_text()


def plan(fleet: str = "", overflow: str = ""):
    text = BASE.replace("  max_wait_seconds: 3\n", "  max_wait_seconds: 3\n" + overflow, 1)
    return parse_plan(text + "\n" + fleet, "p.yaml")


def refused(fleet: str = "", overflow: str = "") -> str:
    with pytest.raises(PlanError) as error:
        plan(fleet, overflow)
    return str(error.value)


def test_gateways_beside_targets_and_beside_prometheus():
    p = plan(
        "fleet:\n  targets: [http://10.0.0.11:8000]\n  gateways:\n"
        "    - http://10.0.0.5:8080\n    - {url: http://10.0.0.6:8080, admin_url: http://10.0.0.6:8081}\n"
    )
    assert p.fleet.gateways == (
        GatewayAddress("http://10.0.0.5:8080"),
        GatewayAddress("http://10.0.0.6:8080", "http://10.0.0.6:8081"),
    )
    q = plan("fleet:\n  prometheus_url: http://prom:9090\n  gateways: [http://gw:8080]\n")
    assert q.fleet.prometheus_url and q.fleet.gateways == (GatewayAddress("http://gw:8080"),)
    assert plan("fleet:\n  targets: [http://10.0.0.11:8000]\n").fleet.gateways == ()


@pytest.mark.parametrize(
    "gateways, words",
    [
        ("[]", "fleet.gateways: an empty list"),
        ("http://gw:8080", "a list of gateways"),
        ("[gw:8080]", "fleet.gateways[0]: got 'gw:8080'; expected a URL"),
        ("[http://gw:8080, http://gw:8080]", "fleet.gateways[1]: 'http://gw:8080' listed twice"),
        ("[{admin_url: http://gw:8081}]", "missing key 'url'"),
        ("[{url: http://gw:8080, admin: http://gw:8081}]", "fleet.gateways[0].admin: unknown key"),
        ("[{url: http://gw:8080, admin_url: 'http://u:hunter2@gw:8081/x y'}]", "fleet.gateways[0].admin_url"),
        ("[[http://gw:8080]]", "fleet.gateways[0]: got a list"),
        ("[" + ", ".join(f"http://g{i}:1" for i in range(65)) + "]", "at most 64"),
    ],
)
def test_bad_gateways_say_where(gateways, words):
    message = refused(f"fleet:\n  targets: [http://10.0.0.11:8000]\n  gateways: {gateways}\n")
    assert words in message and "hunter2" not in message


def test_gateways_alone_are_not_a_fleet_source():
    assert "needs exactly one source" in refused("fleet:\n  gateways: [http://gw:8080]\n")


def test_admin_token_env_and_actuators():
    p = plan(
        overflow="  admin_token_env: CAPCON_ADMIN_TOKEN\n  actuators:\n    - gateway\n"
        "    - webhook: {url: 'https://hooks.example.com/capcon', secret_env: CAPCON_WEBHOOK_SECRET}\n"
        "    - command: {argv: [/usr/local/bin/apply-policy, --env, prod], timeout_seconds: 30}\n"
    )
    assert p.overflow.admin_token_env == "CAPCON_ADMIN_TOKEN"
    assert p.overflow.actuators == (
        Actuator("gateway"),
        Actuator(
            "webhook", url="https://hooks.example.com/capcon", secret_env="CAPCON_WEBHOOK_SECRET", timeout_seconds=5.0
        ),
        Actuator("command", argv=("/usr/local/bin/apply-policy", "--env", "prod"), timeout_seconds=30.0),
    )
    assert plan().overflow.actuators is None and plan().overflow.admin_token_env is None


@pytest.mark.parametrize(
    "overflow, words",
    [
        ("  admin_token_env: sk-live-0123456789abcdef\n", "looks like an API key (not shown)"),
        ("  admin_token_env: 'two words'\n", "not a variable name"),
        ("  actuators: []\n", "overflow.actuators: an empty list"),
        ("  actuators: gateway\n", "a list of actuators"),
        ("  actuators: [slack]\n", "overflow.actuators[0]: got 'slack'"),
        ("  actuators: [gateway, gateway]\n", "gateway listed twice"),
        ("  actuators: [{gateway: {url: x}}]\n", "settings for gateway"),
        ("  actuators: [{webhook: {url: 'https://h/x'}, command: {argv: [x]}}]\n", "not one actuator"),
        ("  actuators: [{webhook: {url: 'https://h/x'}}]\n", "missing key 'secret_env'"),
        ("  actuators: [{webhook: {url: 'https://h/x', secret_env: sk-abcdef0123456789}}]\n", "not shown"),
        ("  actuators: [{webhook: {url: 'ftp://h/x', secret_env: S}}]\n", "webhook.url"),
        ("  actuators: [{webhook: {url: 'https://h/x', secret_env: S, timeout_seconds: 0}}]\n", "timeout_seconds"),
        ("  actuators: [{webhook: {url: 'https://h/x', secret_env: S, timeout_seconds: 301}}]\n", "at most 300"),
        ("  actuators: [{command: {argv: []}}]\n", "argv: an empty list"),
        ("  actuators: [{command: {argv: /bin/true}}]\n", "a list of words"),
        ('  actuators: [{command: {argv: ["a\\x1bb"]}}]\n', "printable text"),
        ("  actuators: [{command: {program: x}}]\n", "unknown key"),
    ],
)
def test_bad_overflow_keys_say_where(overflow, words):
    message = refused(overflow=overflow)
    assert words in message, message
    assert "sk-live-0123456789abcdef" not in message and "sk-abcdef0123456789" not in message
    assert re.match(r"^p\.yaml:\d+: overflow\.", message), message


def test_the_reference_plan_documents_the_keys_and_they_load():
    reference = (REPO / "plans" / "assistant-70b.yaml").read_text()
    for key in ("gateways:", "admin_url:", "admin_token_env:", "actuators:", "webhook:", "command:"):
        assert key in reference, key
    # The commented examples, uncommented, are a valid plan.
    lines = reference.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#   admin_token_env"))
    block = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        block.append(line[2:].split("  #")[0].rstrip())
    text = reference.replace("  max_wait_seconds: 5\n", "  max_wait_seconds: 5\n" + "\n".join(block) + "\n", 1)
    loaded = parse_plan(text, "assistant-70b.yaml")
    assert loaded.overflow.admin_token_env and loaded.overflow.actuators
