"""`capcon sim` as a user runs it: a real process, real ports, Ctrl+C, nothing left behind."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.sim.running import start_sim

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"

pytestmark = pytest.mark.timeout(90)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(p) for p in task.read_text().split()]
    return found


def _start(*args: str) -> tuple[subprocess.Popen, list[str], list[str]]:
    """Start `capcon sim`, wait until it prints its targets; returns (process, urls, stdout lines so far)."""
    return start_sim(*args)


def _refused(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) != 0


@pytest.mark.skipif(not PLAN.exists(), reason=f"{PLAN.name} not in plans/")
def test_demo_style_fleet_stops_on_ctrl_c_and_leaves_no_process_or_port():
    process, urls, _ = _start(str(PLAN), "--replicas", "5", "--time-scale", "2000", "--status-every", "0")
    try:
        assert len(urls) == 5
        assert _children(process.pid) == []  # one process: nothing to orphan
        deadline = time.monotonic() + 20
        generated = 0.0
        while generated == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            for url in urls:
                page = httpx.get(f"{url}/metrics", timeout=5).text
                match = re.search(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)", page, re.M)
                generated += float(match.group(1))
        assert generated > 0, "the plan's traffic reached no replica"
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=20)
    stderr = process.stderr.read()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert all(_refused(url) for url in urls)


@pytest.mark.skipif(not PLAN.exists(), reason=f"{PLAN.name} not in plans/")
def test_sigterm_stops_it_too():
    process, urls, _ = _start(str(PLAN), "--replicas", "2", "--traffic", "off", "--status-every", "0")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert all(_refused(url) for url in urls)


def test_taken_port_is_a_one_line_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "console", "sim", str(PLAN), "--replicas", "1", "--port", str(port)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and f"--port {port}" in result.stderr


def test_missing_plan_is_a_one_line_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "console", "sim", str(tmp_path / "none.yaml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "none.yaml" in result.stderr


@pytest.mark.skipif(not PLAN.exists(), reason=f"{PLAN.name} not in plans/")
def test_with_traffic_off_the_status_line_offers_nothing():
    """`--traffic off` once printed `offered 1.9 rps`: the plan's rate at that hour, which nothing sent."""
    process, _, lines = _start(str(PLAN), "--replicas", "1", "--traffic", "off", "--status-every", "0.1")
    try:
        deadline = time.monotonic() + 20
        while sum(line.startswith("traffic off") for line in lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        process.reader.join(timeout=10)
    assert "traffic off (it offers nothing: drive it with your own load)" in lines[0]
    status = [line for line in lines if "[0]" in line]
    assert len(status) >= 2 and all(line.startswith("traffic off: 0 rps offered  [0] up") for line in status)
    assert not any(re.search(r"offered [1-9]", line) for line in lines)
