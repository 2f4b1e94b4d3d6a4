"""`capcon demo` in a real terminal: the fleet appears, the demo keys act on it, Ctrl+C leaves nothing behind."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from .tmux import Tmux

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed: the demo's terminal test needs it", allow_module_level=True)


def listening_ports(pid: int) -> set[int]:
    """TCP ports process `pid` listens on, read from `ss` (iproute2)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    ports = set()
    for line in out.splitlines():
        if f"pid={pid}," in line:
            ports.add(int(line.split()[3].rsplit(":", 1)[1]))
    return ports


def refused(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def row_of(screen: str, name: str) -> str:
    """The fleet table's line for replica `name` (after the severity word), or ''."""
    return next((line for line in screen.splitlines() if f" {name} " in line[:30]), "")


def console_pid(tmux: Tmux) -> int:
    children = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(tmux.pane_pid())], capture_output=True, text=True
    ).stdout.split()
    assert len(children) == 1, f"expected the demo as the shell's only child, found {children}"
    return int(children[0])


@pytest.mark.skipif(shutil.which("ss") is None, reason="`ss` (iproute2) is needed to see which ports the demo holds")
def test_demo_runs_the_fleet_reacts_to_keys_and_ctrl_c_frees_every_port():
    tmux = Tmux(f"{sys.executable} -m console demo --seed 3; echo CAPCON-EXIT=$?; sleep 60", width=120, height=40)
    try:
        screen = tmux.wait_for("FLEET 5/5", seconds=40)
        assert "internal-assistant-18rps" in screen.splitlines()[0]
        pid = console_pid(tmux)
        ports = listening_ports(pid)
        assert len(ports) >= 5, f"expected five simulated replicas listening, found {sorted(ports)}"

        # Traffic flows: the fleet row shows generated tokens.
        tmux.wait_until(
            lambda s: any(row.split()[-1] != "–" for row in s.splitlines() if "FLEET 5/5" in row), "traffic"
        )

        tmux.keys("x")
        tmux.wait_for("traffic x3")
        tmux.keys("Down", "Down", "f")  # the fault menu, for the second replica
        tmux.wait_for("faults on replica-1 (replica 2 of 5)")
        tmux.keys("g")  # its /metrics returns garbage
        screen = tmux.wait_until(
            lambda s: "BAD PAGE" in row_of(s, "replica-1"), "replica-1 showing a bad page", seconds=20
        )
        assert "FAULT" in screen.splitlines()[0]
        assert all("BAD PAGE" not in row_of(screen, f"replica-{i}") for i in (0, 2, 3, 4))
        tmux.keys("f")
        screen = tmux.wait_for("on now: replica-1 metrics garbage")
        tmux.keys("g")  # the same key clears it
        tmux.wait_until(lambda s: "BAD PAGE" not in s and "FLEET 5/5" in s, "replica-1 back", seconds=20)

        tmux.keys("f", "d")  # the whole replica stops
        tmux.wait_for("FLEET 4/5", seconds=20)
        tmux.keys("f", "a")  # clear all: it starts again
        tmux.wait_for("FLEET 5/5", seconds=20)

        tmux.keys("C-c")
        screen = tmux.wait_for("CAPCON-EXIT=", seconds=15)
        assert "CAPCON-EXIT=0" in screen
        assert "Traceback" not in screen
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert all(refused(port) for port in ports), "a simulated replica still listens after Ctrl+C"
    finally:
        tmux.close()


TABLE_ROW = re.compile(r"^(✖ CRIT|▲ WARN|● info|… pend|! over|✓ ok|\? ----) ")


def table_rows(screen: str) -> list[str]:
    return [line for line in screen.splitlines() if TABLE_ROW.match(line)]


@pytest.mark.slow
def test_a_demo_spike_at_80x24_never_leaves_a_row_reading_ok_with_a_cell_over_its_limit():
    tmux = Tmux(f"{sys.executable} -m console demo --seed 3; echo CAPCON-EXIT=$?; sleep 60", width=80, height=24)
    try:
        tmux.wait_for("FLEET 5/5", seconds=40)
        tmux.keys("x")
        tmux.wait_for("traffic x3")
        seen_over = 0
        deadline = time.monotonic() + 75
        while time.monotonic() < deadline:
            screen = tmux.screen()
            for line in table_rows(screen):
                # A cell over its limit is marked "!" in the gap after it: that row is never "ok".
                if "!" in line[7:]:
                    seen_over += 1
                    assert not line.startswith("✓ ok"), f"a row reads ok with a cell over its limit:\n{screen}"
            if seen_over and any(line.startswith(("▲ WARN", "✖ CRIT")) for line in table_rows(screen)[:-1]):
                break
            time.sleep(0.3)
        assert seen_over, f"the spike never took a cell over its limit:\n{screen}"
        assert any(line.startswith(("▲ WARN", "✖ CRIT")) for line in table_rows(screen)), screen
        # The replica names differ at the port or the number; all five read apart at 80 columns.
        names = [line[7:].split()[0] for line in table_rows(screen)[:-1]]
        assert len(set(names)) == 5, names
        tmux.keys("C-c")
        assert "CAPCON-EXIT=0" in tmux.wait_for("CAPCON-EXIT=", seconds=15)
    finally:
        tmux.close()
