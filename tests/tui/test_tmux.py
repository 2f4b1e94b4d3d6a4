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
        def do_GET(self):  # http.server's name for the GET handler
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
    return [
        line
        for line in screen.splitlines()
        if line.startswith(("✓ ok", "✖ CRIT", "▲ WARN", "● info", "? ---", "… pend", "! over"))
    ]


def replica_lines(screen: str, port: int) -> list[str]:
    """Table rows of the replica on `port` (the name column keeps what differs between names: the port)."""
    return [line for line in table_lines(screen) if str(port) in line[7:30]]


@pytest.mark.slow  # a long tmux story; other tmux tests stay
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
    assert "filter state=down · 1 of 2 shown, 1 hidden · Esc clears" in screen  # the filter says what it hides
    tmux.keys("Escape")
    screen = tmux.wait_until(lambda s: replica_lines(s, up_port), "the filter to clear")
    assert "hidden" not in screen

    # The sort menu: one key per column; the state column sorted A-Z puts DOWN before up.
    tmux.keys("s")
    tmux.wait_for("sort by")
    tmux.keys("s")
    screen = tmux.wait_until(lambda s: "state▲" in s, "the table sorted on state")
    rows = [line for line in table_lines(screen) if str(up_port) in line[7:30] or str(down_port) in line[7:30]]
    assert "DOWN" in rows[0], screen

    # Tab reaches the flags panel; its title says which keys scroll it; Esc goes back to the table.
    tmux.keys("Tab")
    tmux.wait_for("Esc back")
    tmux.keys("End")
    tmux.wait_for("do:")
    tmux.keys("Escape")
    tmux.wait_for("Tab to scroll")
    tmux.keys("j")
    screen = tmux.wait_until(lambda s: any("DOWN" in line for line in table_lines(s)), "the table again")

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
