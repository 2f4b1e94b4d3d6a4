"""The terminal goes away during a heavy refresh: the console is gone within seconds, not minutes.

The real `capcon watch` runs in tmux against the benchmark's fake Prometheus
(benchmarks/bench_fleet_scale.py) holding 10,000 replicas, every one of them
waiting on requests: each refresh reads ~38 MB of answers and flags every row.
Once the fake has seen a refresh begin (its query count moves), `tmux
kill-session` hangs the terminal up, as a dropped SSH session does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .tmux import REPO, Tmux

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed: the hang-up test needs it", allow_module_level=True)

pytestmark = pytest.mark.timeout(240)

BENCH = REPO / "benchmarks" / "bench_fleet_scale.py"
REPLICAS = 10_000
# The console arms a 1.5 s deadline at SIGHUP (console.tui.app.HANGUP_GRACE_SECONDS); this bound leaves
# room for a loaded machine and is still far from the minutes the console used to take.
GONE_WITHIN_SECONDS = 4.0


@pytest.fixture
def fake_prometheus():
    process = subprocess.Popen(
        [sys.executable, str(BENCH), "--serve", str(REPLICAS), "--flagged"], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.strip().isdigit(), f"the fake Prometheus did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        process.kill()
        process.wait()


def queries_seen(url: str) -> int:
    with urllib.request.urlopen(url + "/stats", timeout=10) as answer:
        return int(json.loads(answer.read())["queries"])


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def test_the_console_is_gone_soon_after_the_terminal_hangs_up_mid_refresh(fake_prometheus, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))  # Tmux hands it to the session: the history stays here
    tmux = Tmux(
        f"{sys.executable} -m console watch --source prometheus --prometheus {fake_prometheus} "
        f"--selector 'job=\"vllm\"' --interval 1 --timeout 10",
        width=120,
        height=40,
    )
    pid = None
    try:
        pid = console_pid(tmux)
        tmux.wait_until(lambda s: "10.0.0." in s, "the first refresh's rows", seconds=120)
        # Wait for a refresh to begin (the fake counts its queries), then hang up while it is being read.
        seen = queries_seen(fake_prometheus)
        deadline = time.monotonic() + 60
        while queries_seen(fake_prometheus) == seen:
            assert time.monotonic() < deadline, "no further refresh began"
            time.sleep(0.05)
        subprocess.run(["tmux", "kill-session", "-t", tmux.session], check=True)
        hung_up = time.monotonic()
        while alive(pid) and time.monotonic() - hung_up < 60:
            time.sleep(0.05)
        took = time.monotonic() - hung_up
        print(f"gone {took:.2f} s after the hang-up")
        assert not alive(pid), "the console still runs a minute after its terminal went away"
        assert took < GONE_WITHIN_SECONDS, f"the console took {took:.1f} s to leave after SIGHUP"
    finally:
        tmux.close()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)  # the process this test started, by its id


def console_pid(tmux: Tmux) -> int:
    """The console's pid: the pane's own process when the shell exec'd it, else the shell's child."""
    shell = tmux.pane_pid()
    for _ in range(200):
        if "console" in Path(f"/proc/{shell}/cmdline").read_bytes().decode(errors="replace"):
            return shell
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(shell)], capture_output=True, text=True)
        if children.stdout.split():
            return int(children.stdout.split()[0])
        time.sleep(0.05)
    raise AssertionError("the console did not start in tmux")
