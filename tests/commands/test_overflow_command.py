"""`capcon overflow` as a runbook runs it: the real program against real gateways on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from console.cli import main
from console.gateway.history import SwitchHistory
from console.store.database import Store
from tests.gateway.conftest import TOKEN, gateway, sim_fleet

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"
VAR = "CAPCON_TEST_ADMIN_TOKEN"
SECRET = "hook-secret-9a8b7c6d5e4f"

pytestmark = pytest.mark.timeout(120)


async def capcon(*argv: str, env: dict | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "console",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, VAR: TOKEN, **(env or {})},
        cwd=REPO,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out.decode(), err.decode()


def plan_file(tmp_path: Path, fleet: str, overflow_more: str = "") -> Path:
    text = PLAN.read_text()
    text = text.replace(
        "  max_wait_seconds: 3\n", f"  max_wait_seconds: 3\n  admin_token_env: {VAR}\n{overflow_more}", 1
    )
    path = tmp_path / "plan.yaml"
    path.write_text(text + "\n" + fleet)
    return path


async def test_set_against_two_gateways_one_stopped(tmp_path):
    db = tmp_path / "history.sqlite"
    history = SwitchHistory(str(db), "internal-assistant-18rps")
    history.open()
    async with sim_fleet(2) as fleet, gateway(fleet.urls, history=history) as up:
        async with gateway(fleet.urls) as down:
            down_url = down.admin_url
        plan = plan_file(
            tmp_path,
            "fleet:\n  targets: [" + ", ".join(fleet.urls) + "]\n  gateways:\n"
            f"    - {{url: {up.url}, admin_url: {up.admin_url}}}\n"
            f"    - {{url: http://127.0.0.1:1, admin_url: {down_url}}}\n",
        )
        code, out, err = await capcon(
            "overflow", "set", "bounded_queue", str(plan), "--max-queue", "12", "--for", "30m",
            "--reason", "spike, scale-up coming", "--actor", "alice", "--db", str(db),
        )  # fmt: skip
        assert code == 1, (out, err)
        assert f"applied by gateway {up.admin_url}: applied: bounded_queue -> bounded_queue" in out
        # --for 30m says when it runs out, for the gateways that took it.
        assert "the switch expires at " in out and " local (in 30 min); then the plan's policy is back" in out
        assert f"NOT applied by gateway {down_url}: not answering" in err
        assert "1 of 2 actuators applied bounded_queue" in err
        policy = up.policy()
        assert (policy.mode, policy.max_queue, policy.actor, policy.reason) == (
            "bounded_queue",
            12,
            "alice",
            "spike, scale-up coming",
        )
        # A second attempt, to the live gateway alone: applied, exit 0.
        code, out, err = await capcon(
            "overflow", "set", "pass", "--gateway", up.admin_url, "--admin-token-env", VAR,
            "--reason", "capacity is back", "--actor", "bob", "--db", str(db),
        )  # fmt: skip
        assert code == 0, err
        assert "pass applied by all 1 actuator(s)" in out
        assert up.policy().mode == "pass"
        status_code, status_out, _ = await capcon("overflow", "status", str(plan), "--json")
    assert status_code == 1  # one gateway does not answer
    status = json.loads(status_out)["gateways"]
    assert [g["ok"] for g in status] == [True, False]
    assert status[0]["policy"]["mode"] == "pass" and status[0]["policy"]["actor"] == "bob"
    assert status[0]["state"]["replicas"] == 2 and status[1]["detail"].startswith("not answering")

    store = Store.open(db, read_only=True)
    try:
        events = store.events()
    finally:
        store.close()
    attempts = [e for e in events if e.kind == "overflow_attempt"]
    assert len(attempts) == 2
    first, second = attempts
    assert first.fleet == "internal-assistant-18rps" and second.fleet == "gateway"
    assert first.detail["actor"] == "alice" and first.detail["to"] == "bounded_queue"
    assert first.detail["parameters"] == {"max_queue": 12} and first.detail["for_seconds"] == 1800
    assert first.detail["reason"] == "spike, scale-up coming"
    assert [(a["name"], a["ok"]) for a in first.detail["answers"]] == [
        (f"gateway {up.admin_url}", True),
        (f"gateway {down_url}", False),
    ]
    assert first.detail["from"] == {f"gateway {up.admin_url}": "bounded_queue", f"gateway {down_url}": None}
    assert (first.detail["applied"], first.detail["failed"]) == (1, 1)
    assert second.detail["from"] == {f"gateway {up.admin_url}": "bounded_queue"} and second.detail["failed"] == 0
    # The applied gateway wrote its own side of each switch to the same file.
    assert [e.subject for e in events if e.kind == "overflow_switch"] == [
        "bounded_queue -> bounded_queue",
        "bounded_queue -> pass",
    ]
    # `capcon export --what events` shows them.
    code, exported, err = await capcon(
        "export", "--what", "events", "--format", "jsonl", "--db", str(db), "--from", "-1h", "--to", "now"
    )
    assert code == 0, err
    kinds = [json.loads(line)["kind"] for line in exported.splitlines() if line.strip()]
    assert kinds.count("overflow_attempt") == 2
    # The token is nowhere: not in the output, not in the file.
    for text in (out, err, status_out, exported):
        assert TOKEN not in text
    assert TOKEN.encode() not in db.read_bytes()
    for wal in tmp_path.glob("history.sqlite*"):
        assert TOKEN.encode() not in wal.read_bytes()


async def test_webhook_and_command_actuators_from_the_plan(tmp_path):
    from tests.overflow.test_actuators import SECRET as HOOK_SECRET
    from tests.overflow.test_actuators import Receiver, Receiving

    script = tmp_path / "apply.py"
    script.write_text("import json, sys\nbody = json.load(sys.stdin)\nprint('set', body['mode'], file=sys.stderr)\n")
    async with Receiving(Receiver()) as hook:
        plan = plan_file(
            tmp_path,
            "fleet:\n  targets: [http://127.0.0.1:9]\n",
            "  actuators:\n"
            f"    - webhook: {{url: {hook.url}, secret_env: HOOK_SECRET, timeout_seconds: 5}}\n"
            f"    - command: {{argv: [{sys.executable}, {script}], timeout_seconds: 20}}\n",
        )
        code, out, err = await capcon(
            "overflow", "set", "defer", str(plan), "--defer-action", "hold", "--reason", "batch out of the peak",
            "--db", str(tmp_path / "h.sqlite"), env={"HOOK_SECRET": HOOK_SECRET},
        )  # fmt: skip
    assert code == 0, err
    assert hook.bodies and hook.bodies[0]["mode"] == "defer" and hook.bodies[0]["defer_action"] == "hold"
    assert f"applied by webhook {hook.url}: applied (200)" in out
    assert "applied (exit 0): set defer" in out
    assert HOOK_SECRET not in out + err
    store = Store.open(tmp_path / "h.sqlite", read_only=True)
    try:
        (attempt,) = [e for e in store.events() if e.kind == "overflow_attempt"]
    finally:
        store.close()
    assert attempt.detail["actor"] and "@" in attempt.detail["actor"]  # user@host by default
    assert HOOK_SECRET not in json.dumps(attempt.detail)


@pytest.mark.parametrize(
    "argv, words",
    [
        (("set", "fast", "--gateway", "http://127.0.0.1:1", "--reason", "x"), "invalid choice"),
        (("set", "pass", "--gateway", "http://127.0.0.1:1"), "--reason"),
        (("set", "pass", "--gateway", "http://127.0.0.1:1", "--reason", "  "), "--reason: required"),
        (("set", "pass", "--gateway", "http://127.0.0.1:1", "--reason", "\x1b"), "--reason"),
        (
            ("set", "bounded_queue", "--gateway", "http://127.0.0.1:1", "--reason", "x", "--max-queue", "-1"),
            "--max-queue: got -1",
        ),
        (
            ("set", "bounded_queue", "--gateway", "http://127.0.0.1:1", "--reason", "x", "--max-wait", "0"),
            "--max-wait: got 0",
        ),
        (
            ("set", "pass", "--gateway", "http://127.0.0.1:1", "--reason", "x", "--for", "forever"),
            "argument --for: 'forever': not a duration",
        ),
        (
            ("set", "pass", "--gateway", "http://127.0.0.1:1", "--reason", "x", "--for", "9d"),
            "argument --for: '9d': expected at most 7 d",
        ),
        (("set", "pass", "--gateway", "nowhere at all", "--reason", "x"), "--gateway"),
        (("set", "pass", "--reason", "x"), "nothing to switch"),
        (("set", "pass", "--gateway", "http://127.0.0.1:1", "--reason", "x"), "--admin-token-env VAR"),
        (
            ("set", "pass", "--gateway", "http://127.0.0.1:1", "--reason", "x", "--admin-token-env", "UNSET_VAR_X"),
            "UNSET_VAR_X: the variable is not set or empty",
        ),
        (("set", "hosted", str(PLAN), "--gateway", "http://127.0.0.1:1", "--reason", "x"), "prompts_may_leave"),
        (("status",), "no gateway"),
        (("status", "--gateway", "http://127.0.0.1:1"), "--admin-token-env VAR"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, monkeypatch, argv, words):
    monkeypatch.delenv("UNSET_VAR_X", raising=False)
    try:
        code = main(["overflow", *argv])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_history_that_cannot_be_written_stops_before_switching(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(VAR, TOKEN)
    code = main(
        ["overflow", "set", "pass", "--gateway", "http://127.0.0.1:1", "--admin-token-env", VAR, "--reason", "x",
         "--db", str(tmp_path)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "is a directory" in err


async def test_status_text_shows_policy_queue_and_counters(tmp_path):
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        code, out, err = await capcon("overflow", "status", "--gateway", server.admin_url, "--admin-token-env", VAR)
    assert code == 0, err
    first, summary, counters = out.splitlines()
    assert first.startswith(f"gateway {server.admin_url}: bounded_queue since ") and " by plan " in first
    assert "new requests past" in summary
    assert counters.startswith("  queue 0/") and "replicas 1/1 healthy" in counters and "rejected 0" in counters
    assert TOKEN not in out + err


async def test_ctrl_c_while_asking_still_records_the_attempt_and_ends_the_command(tmp_path):
    import signal

    started = tmp_path / "started"
    script = tmp_path / "slow.py"
    script.write_text(
        f"import pathlib, sys, time\nsys.stdin.read()\npathlib.Path({str(started)!r}).write_text('x')\ntime.sleep(60)\n"
    )
    plan = plan_file(
        tmp_path,
        "fleet:\n  targets: [http://127.0.0.1:9]\n",
        f"  actuators:\n    - command: {{argv: [{sys.executable}, {script}], timeout_seconds: 120}}\n",
    )
    db = tmp_path / "h.sqlite"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "console", "overflow", "set", "pass", str(plan), "--reason", "test", "--db", str(db),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    for _ in range(600):
        if started.exists():
            break
        await asyncio.sleep(0.05)
    assert started.exists()
    process.send_signal(signal.SIGINT)
    await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 130
    store = Store.open(db, read_only=True)
    try:
        (attempt,) = [e for e in store.events() if e.kind == "overflow_attempt"]
    finally:
        store.close()
    (answer,) = attempt.detail["answers"]
    assert not answer["ok"] and answer["detail"].startswith("interrupted before it answered")


async def test_status_from_a_hostile_gateway_reaches_the_terminal_escaped_and_bounded():
    from aiohttp import web

    async def policy(request):
        return web.json_response(
            {
                "policy": {
                    "mode": "\x1b[2J\x1b[H",
                    "actor": "\x1b]0;owned\x07" + TOKEN,
                    "reason": "r" * 100_000,
                    "summary": "\u202e\r\nfake line",
                    "set_at": "yesterday",
                    "expires_at": 1e308,
                }
            }
        )

    async def state(request):
        return web.json_response(
            {"queue": "full", "totals": [1, 2], "replicas": [{"healthy": "yes"}, 7], "in_flight": True}
        )

    app = web.Application()
    app.router.add_get("/admin/policy", policy)
    app.router.add_get("/admin/state", state)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        code, out, err = await capcon("overflow", "status", "--gateway", url, "--admin-token-env", VAR)
        json_code, json_out, json_err = await capcon(
            "overflow", "status", "--gateway", url, "--admin-token-env", VAR, "--json"
        )
    finally:
        await runner.cleanup()
    assert code == 0 and json_code == 0, (err, json_err)
    lines = out.splitlines()
    assert len(lines) == 3
    for line in lines:
        assert line.isprintable() and len(line) <= 700, line[:100]
    assert "\x1b" not in out and "\u202e" not in out and TOKEN not in out
    assert "in flight ?" in lines[2] and "replicas 0/2 healthy" in lines[2]
    assert json_out.isascii() and "\x1b" not in json_out and TOKEN not in json_out
    assert json.loads(json_out)["gateways"][0]["policy"]["mode"] == "\x1b[2J\x1b[H"  # escaped, not lost
