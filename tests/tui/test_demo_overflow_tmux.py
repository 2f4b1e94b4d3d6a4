"""The demo's whole overflow story in a real terminal, its figures checked on the gateway's own counters.

`capcon demo` sends its traffic through a real gateway (and a second simulator as the hosted endpoint). At
the morning peak a spike saturates the fleet in `pass`; the console suggests the plan's mode; the operator
switches to the bounded queue (refusals rise, TTFT comes back under the target), then to hosted (the excess
goes there, with its cost), then back to pass. Every switch is an event in the history file; Ctrl+C leaves
no port open.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from console.store.database import Store

from .test_demo_tmux import console_pid, listening_ports, refused
from .tmux import Tmux

if shutil.which("tmux") is None or shutil.which("ss") is None:
    pytest.skip("tmux and ss (iproute2) are needed for the demo's overflow story", allow_module_level=True)

pytestmark = pytest.mark.timeout(300)


def type_text(tmux: Tmux, text: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", tmux.session, "-l", text], check=True)
    time.sleep(0.3)


def gateway_page(ports: set[int]) -> tuple[int, str]:
    """The port whose /metrics is the gateway's, and the page."""
    for port in sorted(ports):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                page = answer.read().decode()
        except OSError:
            continue
        if "capcon_gateway_requests_total" in page:
            return port, page
    raise AssertionError(f"no gateway among the demo's ports {sorted(ports)}")


def counter(page: str, name: str, **labels: str) -> float:
    """The sum of a family's samples whose labels include `labels`."""
    total = 0.0
    for line in page.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def read(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def switch_to(tmux: Tmux, number: str, tabs: int, reason: str, in_force: str) -> None:
    """m, the mode's number, Tab to the reason, the reason, Enter to confirm, Enter to apply."""
    tmux.keys("m")
    tmux.wait_for(f"overflow switch · in force: {in_force}", seconds=20)
    tmux.wait_for("choose the mode")  # the mode has the focus: keys from now on reach the dialog
    tmux.keys(number, *["Tab"] * tabs)
    tmux.wait_for("the reason: Enter to confirm")
    type_text(tmux, reason)
    tmux.keys("Enter")
    tmux.wait_for("Enter applies to 1 target")
    tmux.keys("Enter")
    tmux.wait_for("✓ applied by every one (1)", seconds=20)
    tmux.keys("Escape")


@pytest.mark.slow
def test_the_demo_story_spike_suggestion_bounded_queue_hosted_and_back(tmp_path):
    history = tmp_path / "story.sqlite"
    tmux = Tmux(
        # The pane takes its 120x40 a moment after it starts (tmux started from a process without a
        # terminal): the console starts after that, so it reads the full width.
        f"sleep 1; {sys.executable} -m console demo --seed 3 --start 'mon 09:45' --time-scale 60 --db {history}; "
        "echo CAPCON-EXIT=$?; sleep 60",
        width=120,
        height=40,
    )
    try:
        tmux.wait_for("FLEET 5/5", seconds=40)
        tmux.wait_for("overflow pass by demo")  # the demo starts with no overflow control
        pid = console_pid(tmux)
        ports = listening_ports(pid)
        port, page = gateway_page(ports)

        # The spike: three times the peak, in pass. Kept up (x again) until the console suggests the plan's mode.
        tmux.keys("x")
        deadline = time.monotonic() + 150
        spiked = time.monotonic()
        while "plan says bounded queue: m to switch" not in tmux.screen():
            assert time.monotonic() < deadline, f"no suggestion during the spike:\n{tmux.screen()}"
            if time.monotonic() - spiked > 45:
                tmux.keys("x")
                spiked = time.monotonic()
            time.sleep(0.5)
        # The critical flag follows within its hold (30 s): the suggestion can come first.
        deadline = time.monotonic() + 45
        while not re.search(r"✖ CRIT\s*(saturated|SLO breach)", screen := tmux.screen()):
            assert time.monotonic() < deadline, screen
            time.sleep(0.5)

        # Bounded queue: the gateway refuses the excess; what it admits meets the TTFT target again.
        before = read(port)
        switch_to(tmux, "2", 4, "spike: shed the excess", "pass")
        tmux.keys("x")
        # The header's mode, whole or abbreviated as 120 columns allow beside who switched it.
        tmux.wait_until(lambda s: re.search(r"overflow (bounded queue|bq)\b", s) is not None, "bounded queue in force")
        deadline = time.monotonic() + 60
        while True:
            page = read(port)
            refused_now = counter(page, "capcon_gateway_requests_total", outcome="rejected") + counter(
                page, "capcon_gateway_requests_total", outcome="timed_out"
            )
            refused_before = counter(before, "capcon_gateway_requests_total", outcome="rejected") + counter(
                before, "capcon_gateway_requests_total", outcome="timed_out"
            )
            if refused_now > refused_before:
                break
            assert time.monotonic() < deadline, "the bounded queue refused nothing during the spike"
            time.sleep(1.0)
        assert counter(page, "capcon_gateway_mode", mode="bounded_queue") == 1.0
        tmux.wait_until(lambda s: re.search(r"✓ TTFT p95\s+\d+ms", s) is not None, "TTFT back under 1 s", 60)
        tmux.wait_until(lambda s: re.search(r"(429|503) [1-9][\d.]*/s", s) is not None, "refusals on the panel", 30)

        # Hosted: the excess goes to the hosted endpoint, priced.
        switch_to(tmux, "3", 5, "overflow to hosted", "bounded queue")
        tmux.keys("x")
        deadline = time.monotonic() + 60
        while counter(read(port), "capcon_gateway_requests_total", outcome="hosted") == 0:
            assert time.monotonic() < deadline, "nothing went to the hosted endpoint"
            time.sleep(1.0)
        page = read(port)
        assert counter(page, "capcon_gateway_hosted_cost_dollars_total") > 0
        assert counter(page, "capcon_gateway_hosted_tokens_total", kind="completion") > 0
        tmux.wait_until(lambda s: re.search(r"hosted [1-9][\d.]*/s \$[1-9]", s) is not None, "hosted $ on screen", 30)

        # Back to pass.
        switch_to(tmux, "1", 2, "spike over", "hosted")
        tmux.wait_until(lambda s: re.search(r"· overflow pass\b", s) is not None, "pass in force")
        assert counter(read(port), "capcon_gateway_mode", mode="pass") == 1.0
        screen = tmux.screen()
        for words in ("pass by", "hosted by", "bounded queue by"):
            assert f"{words}" in screen, screen  # the flags panel's timeline

        tmux.keys("C-c")
        screen = tmux.wait_for("CAPCON-EXIT=", seconds=20)
        assert "CAPCON-EXIT=0" in screen and "Traceback" not in screen
        assert all(refused(p) for p in ports), "a port of the demo still listens after Ctrl+C"
    finally:
        tmux.close()
    store = Store.open(history, read_only=True)
    try:
        events = store.events()
    finally:
        store.close()
    attempts = [e for e in events if e.kind == "overflow_attempt"]
    # The gateway's own record of the same switches (its start in pass, then the operator's three).
    switched = [e.detail.get("to") for e in events if e.kind == "overflow_switch"]
    assert switched[-3:] == ["bounded_queue", "hosted", "pass"], switched
    tallies = [e for e in events if e.kind == "overflow_tally"]
    assert {t.detail["mode"] for t in tallies} >= {"pass", "bounded_queue", "hosted"}
    assert [e.detail["to"] for e in attempts] == ["bounded_queue", "hosted", "pass"]
    assert [e.detail["reason"] for e in attempts] == ["spike: shed the excess", "overflow to hosted", "spike over"]
    assert all(e.detail["applied"] == 1 and e.detail["failed"] == 0 for e in attempts)
