"""Durations on the command line: the two slips of the issue refused in one line (exit 2, no traceback, nothing
waited for), and `capcon overflow status` saying when a switch expires, in local time and from now."""

from __future__ import annotations

import subprocess
import sys

import pytest

from console.cli import main
from console.commands.overflow import _status_lines
from console.live.actuators import GatewayStatus

TARGET = "http://127.0.0.1:9"  # never reached: each command is refused before it polls


def test_an_interval_meant_as_milliseconds_is_refused_before_anything_waits():
    """`watch --once --interval 2000` would wait 33 minutes and print nothing."""
    done = subprocess.run(
        [sys.executable, "-m", "console.cli", "watch", "--target", TARGET, "--once", "--interval", "2000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "capcon watch: argument --interval: '2000': 2000 s (33 min 20 s) without a unit; did you mean 2000ms "
        "(2 s)? expected the unit written (2000ms or 2000s): a bare number is seconds only up to 60 "
        "(see capcon watch --help)\n"
    )


def test_a_switch_for_a_bare_number_is_refused_with_the_units_to_choose_from(capsys):
    """`overflow set --for 30` meant 30 seconds and expired without a word."""
    with pytest.raises(SystemExit) as stop:
        main(["overflow", "set", "pass", "--gateway", TARGET, "--reason", "spike", "--for", "30"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "capcon overflow set: argument --for: '30': a number without its unit; expected it written with one: "
        "30s, 30m, 30h (seconds, minutes, hours) (see capcon overflow set --help)\n"
    )


@pytest.mark.parametrize(
    "argv, seconds",
    [
        (["watch", "--target", TARGET, "--once", "--interval", "500ms"], 0.5),
        (["watch", "--target", TARGET, "--once", "--interval", "2"], 2.0),
        (["record", "--target", TARGET, "--interval", "1m"], 60.0),
        (["record", "--target", TARGET, "--duration", "12h"], 12 * 3600.0),
        (["watch", "--target", TARGET, "--once", "--window", "5m"], 300.0),
    ],
)
def test_durations_with_units_reach_the_verb_in_seconds(monkeypatch, argv, seconds):
    import importlib

    seen = {}
    module = importlib.import_module(f"console.commands.{argv[0]}")
    monkeypatch.setattr(module, "run", lambda args: seen.update(vars(args)) or 0)
    assert main(argv) == 0
    assert seen[argv[-2].lstrip("-")] == seconds


def test_status_says_when_the_switch_expires_in_local_time_and_from_now():
    now = 1_764_511_200.0
    policy = {"mode": "pass", "actor": "alice", "reason": "spike", "set_at": now - 60, "expires_at": now + 1800}
    first = _status_lines(GatewayStatus("gateway g", True, "", policy=policy), "token", now)[0]
    assert first.startswith("gateway g: pass since ")
    assert ", expires at " in first and " local (in 30 min) (spike)" in first
