"""The CLI's own contract: argument errors in one line, honest --help, bad options refused before anything starts."""

from __future__ import annotations

import re

import pytest
from textual.theme import BUILTIN_THEMES

from console.cli import main

PLAN = "plans/internal-assistant-18rps.yaml"
# A port nothing listens on is never reached: every case here is refused before polling.
TARGET = "127.0.0.1:9"


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exited:
        return exited.code


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["watch", "--interval", "abc"],
            "capcon watch: argument --interval: 'abc': not a duration; expected a number with its unit, "
            "like 500ms, 30s, 5m, 2h (see capcon watch --help)",
        ),
        (["plan"], "capcon plan: the following arguments are required: FILE (see capcon plan --help)"),
        (["sim", PLAN, "--seed", "x"], "capcon sim: argument --seed: invalid int value: 'x' (see capcon sim --help)"),
        (
            ["demo", "--replicas", "0"],
            "capcon demo: argument --replicas: '0' must be a finite number greater than 0 (see capcon demo --help)",
        ),
        (["watch", "--bogus"], "capcon watch: unrecognized arguments: --bogus (see capcon watch --help)"),
        (
            ["demo", "--replicas", "257"],
            "capcon demo: argument --replicas: '257': at most 256 replicas on one machine (see capcon demo --help)",
        ),
        ([], "capcon: the following arguments are required: VERB (see capcon --help)"),
    ],
)
def test_argument_errors_are_one_line_and_exit_2(capsys, argv, line):
    assert _exit_code(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == line + "\n"


def test_argparse_quoting_of_choices_does_not_matter_to_the_one_line_form(capsys):
    """Python versions quote choices differently; what matters is one line naming the option."""
    assert _exit_code(["watch", "--source", "snmp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("capcon watch: argument --source: invalid choice: 'snmp'")


@pytest.mark.parametrize("verb", ["plan", "watch", "demo", "sim"])
def test_help_stays_complete(capsys, verb):
    assert _exit_code([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: capcon {verb}")
    assert "options:" in out and "-h, --help" in out


def test_watch_help_says_where_the_interval_floors_are(capsys):
    assert _exit_code(["watch", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(default 2s; at least 0.2s with --once, 1s in the console; at most 1h)" in help_text


def test_console_interval_below_one_second_is_refused_not_raised(capsys):
    assert main(["watch", "--target", TARGET, "--interval", "0.5"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "capcon watch: --interval 0.5: the console refreshes at most once a second; "
        "expected at least 1 (0.2 is allowed only with --once)\n"
    )


def test_demo_interval_below_one_second_is_refused(capsys):
    assert main(["demo", "--interval", "0.5"]) == 2
    assert "--interval 0.5: the console refreshes at most once a second" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "--target", TARGET, "--theme", "nope"],
        ["watch", "--target", TARGET, "--theme", "nope", "--once", "--interval", "0.2"],
        ["demo", "--theme", "nope"],
    ],
)
def test_unknown_theme_lists_the_themes_and_exits_2_before_starting(capsys, argv):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    verb = argv[0]
    match = re.fullmatch(rf"capcon {verb}: --theme 'nope': unknown theme; expected one of (.+)\n", err)
    assert match, err
    assert match.group(1).split(", ") == sorted(BUILTIN_THEMES)
    assert "ansi-dark" in match.group(1)


def test_version_is_the_installed_package_s_and_exits_0(capsys):
    from importlib.metadata import version

    assert _exit_code(["--version"]) == 0
    out, err = capsys.readouterr()
    assert out == f"capcon {version('capcon')}\n" and err == ""
    assert re.fullmatch(r"capcon \d+\.\d+\.\d+\S*\n", out)


def test_version_through_the_installed_command():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("capcon")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "console"]
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and re.fullmatch(r"capcon \d+\.\d+\.\d+\S*\n", done.stdout), done


def test_help_lists_version(capsys):
    assert _exit_code(["--help"]) == 0
    assert "--version" in capsys.readouterr().out
