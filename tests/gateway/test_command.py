"""`capcon gateway` as a user runs it: options checked (one line, exit 2), and a real process stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from console.gateway.__main__ import main

from .conftest import TOKEN, auth, completion, send, sim_fleet, until

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"

pytestmark = pytest.mark.timeout(60)


def run_main(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [
        ((), "no replicas"),
        (("--target", "http//host:8000"), "mistyped scheme"),
        (("--target", "h:1", "--listen", "nowhere"), "expected HOST:PORT"),
        (("--target", "h:1", "--listen", "127.0.0.1:70000"), "0 to 65535"),
        (("--target", "h:1", "--max-queue", "-1"), "--max-queue"),
        (("--target", "h:1", "--max-wait", "0"), "--max-wait"),
        (("--target", "h:1", "--max-wait", "nan"), "--max-wait"),
        (("--target", "h:1", "--instances", "0"), "--instances"),
        (("--target", "h:1", "--mode", "bounded_queue"), "--max-inflight"),
        (
            ("--target", "h:1", "--mode", "hosted", "--max-inflight", "2", "--hosted-url", "http://h:2"),
            "prompts may not leave",
        ),
        (("--target", "h:1", "--mode", "hosted", "--max-inflight", "2", "--prompts-may-leave"), "no hosted endpoint"),
        (("--target", "h:1", "--admin", "127.0.0.1:9"), "--admin-token-env"),
        (("--target", "h:1", "--admin-token-env", "CAPCON_TEST_UNSET_VARIABLE"), "not set"),
        (("--target", "h:1", "--admin-token-env", "CAPCON_TEST_SHORT_TOKEN"), "shorter than 16"),
        (("--target", "h:1", "--hosted-key-env", "K"), "--hosted-url"),
        (("--target", "h:1", "--off-peak", "25:00"), "--off-peak"),
        (("--target", "h:1", "--hosted-url", "http://h:2/v1?key=secret"), "without a query"),
        (("no-such-plan.yaml",), "no-such-plan.yaml"),
        ((str(PLAN), "--prompts-may-leave"), "prompts_may_leave: false"),
        ((str(PLAN),), "no replicas"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(capsys, monkeypatch, argv, words):
    monkeypatch.setenv("CAPCON_TEST_SHORT_TOKEN", "short")
    monkeypatch.delenv("CAPCON_TEST_UNSET_VARIABLE", raising=False)
    code, err = run_main(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert "secret" not in err


def test_uvloop_asked_for_but_missing_is_refused(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed
    code, err = run_main(capsys, "--target", "127.0.0.1:9", "--loop", "uvloop")
    assert code == 2 and "uvloop is not installed" in err


def test_a_plan_sets_the_policy_and_the_cap(monkeypatch):
    import argparse

    from console.commands import gateway as verb
    from console.commands.gateway import build_config
    from console.gateway.__main__ import main as _  # noqa: F401 - the parser below is the verb's own

    parser = argparse.ArgumentParser()
    verb.add_parser(parser.add_subparsers())
    args = parser.parse_args(
        [
            "gateway",
            str(PLAN),
            "--target",
            "127.0.0.1:8001",
            "--target",
            "127.0.0.1:8002",
            "--instances",
            "2",
            "--admin-token-env",
            "CAPCON_TEST_TOKEN",
        ]
    )
    monkeypatch.setenv("CAPCON_TEST_TOKEN", TOKEN)
    config = build_config(args)
    assert config.targets == ("http://127.0.0.1:8001", "http://127.0.0.1:8002")
    assert config.plan_policy.from_plan and config.plan_policy.mode == "bounded_queue"
    assert config.planned_cap >= 1 and config.admin == ("127.0.0.1", 8081) and config.admin_token == TOKEN
    assert config.off_peak is not None and config.off_peak(0.0) is not None
    assert TOKEN not in repr(config)


async def test_sigterm_answers_queued_requests_503_lets_the_stream_finish_and_exits_0(session):
    async with sim_fleet(1) as fleet:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "CAPCON_TEST_TOKEN": TOKEN}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "console.gateway",
            "--target",
            fleet.urls[0],
            "--mode",
            "bounded_queue",
            "--max-inflight",
            "1",
            "--max-queue",
            "10",
            "--max-wait",
            "60",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--admin-token-env",
            "CAPCON_TEST_TOKEN",
            "--drain-timeout",
            "20",
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            lines = []
            url = admin = None
            while not (url and admin):
                line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
                assert line, f"the gateway ended: {(await process.stderr.read()).decode()}"
                lines.append(line)
                if match := re.search(r"listening on (http://\S+)", line):
                    url = match[1]
                if match := re.match(r"admin API on (http://\S+):", line):
                    admin = match[1]
            stream = asyncio.create_task(send(session, url, completion(max_tokens=40, stream=True)))
            assert await until(lambda: fleet.replicas[0].engine.num_running == 1)
            queued = [asyncio.create_task(send(session, url, completion())) for _ in range(5)]

            async def queue_length() -> int:
                async with session.get(admin + "/admin/state", headers=auth()) as response:
                    return (await response.json())["queue"]["interactive"]

            for _ in range(200):
                if await queue_length() == 5:
                    break
                await asyncio.sleep(0.05)
            assert await queue_length() == 5
            process.send_signal(signal.SIGTERM)
            answers = await asyncio.gather(*queued)
            for answer in answers:
                assert answer.status == 503 and answer.error["code"] == "shutting_down"
                assert int(answer.headers["Retry-After"]) >= 1
            finished = await stream
            assert finished.status == 200 and finished.done and finished.chunks == 40  # drained, not cut
            assert await asyncio.wait_for(process.wait(), 30) == 0
            out = (await process.stdout.read()).decode()
            err = (await process.stderr.read()).decode()
            assert "stopped." in out
            assert TOKEN not in out + err + "".join(lines)
            with pytest.raises(aiohttp.ClientConnectionError):
                async with session.get(url + "/health") as response:
                    await response.read()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
