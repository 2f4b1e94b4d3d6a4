"""The real `capcon watch` in tmux: what a person sees on the screen, read with capture-pane.

One replica serves a real vLLM /metrics page over loopback; a second target has
nothing listening, so the console shows a replica down next to the plan.
"""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from .tmux import Tmux

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "vllm" / "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed: the console's terminal test needs it", allow_module_level=True)


@pytest.fixture
def metrics_server():
    page = SAMPLE.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def tmux_console(metrics_server):
    down = closed_port()
    command = (
        f"{sys.executable} -m console watch --target 127.0.0.1:{metrics_server} --target 127.0.0.1:{down} "
        f"--interval 1 {PLAN}; echo CAPCON-EXIT=$?; sleep 60"
    )
    tmux = Tmux(command)
    try:
        yield tmux, metrics_server, down
    finally:
        tmux.close()


def table_lines(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if line.startswith(("✓", "✖", "▲", "●", "?"))]


def replica_lines(screen: str, port: int) -> list[str]:
    """Table rows of the replica on `port` (names are cut in the middle, so match the port's tail)."""
    return [line for line in table_lines(screen) if "127.0" in line and str(port)[-4:] in line]


def test_watch_in_tmux_shows_the_fleet_the_plan_and_a_replica_down(tmux_console):
    tmux, up_port, down_port = tmux_console
    screen = tmux.wait_until(
        lambda s: "FLEET 1/2" in s and replica_lines(s, up_port) and replica_lines(s, down_port), "both replicas"
    )
    assert "internal-assistant-18rps" in screen.splitlines()[0]  # the header names fleet and plan
    assert "● live" in screen
    assert any("DOWN" in line for line in replica_lines(screen, down_port)), screen
    assert any(" up " in line for line in replica_lines(screen, up_port)), screen
    assert "plan beside actual" in screen and "load/sched cap" in screen
    # The down replica passes its 10 s minimum duration and is flagged with what to do.
    # (Before that it reads "… pending: replica down", which carries no advice.)
    screen = tmux.wait_until(lambda s: "do:" in s and "replica down since" in s, "the replica-down flag", seconds=30)
    assert "within its plan" not in screen

    tmux.keys("p")
    tmux.wait_for("PAUSED")
    tmux.keys("p")
    tmux.wait_for("● live")

    tmux.keys("/", "state=down", "Enter")
    screen = tmux.wait_until(lambda s: not replica_lines(s, up_port), "the up replica to be filtered out")
    assert [line for line in replica_lines(screen, down_port) if "DOWN" in line]  # the down one stays
    tmux.keys("Escape")
    tmux.wait_until(lambda s: replica_lines(s, up_port), "the filter to clear")

    tmux.keys("?")
    tmux.wait_for("capcon console: keys")
    tmux.keys("Escape")

    tmux.keys("q")
    tmux.wait_for("CAPCON-EXIT=0", seconds=10)


def test_watch_leaves_cleanly_when_the_terminal_hangs_up(tmux_console):
    tmux, up_port, _ = tmux_console
    tmux.wait_until(lambda s: replica_lines(s, up_port), "the console")
    shell = subprocess.run(
        ["tmux", "list-panes", "-t", tmux.session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", shell], capture_output=True, text=True).stdout.split()
    assert len(children) == 1, f"expected the console as the shell's only child, found {children}"
    os.kill(int(children[0]), signal.SIGHUP)  # what an SSH session going away sends
    screen = tmux.wait_for("CAPCON-EXIT=", seconds=10)
    assert "CAPCON-EXIT=0" in screen
    assert "Traceback" not in screen
