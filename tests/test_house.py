"""The house checks: lint, format, import contracts and types, each run as its tool runs from the repository root.

The tools are test dependencies (the `test` extra) and their settings live in pyproject.toml; each check runs with
this interpreter, so it is the tool installed beside the tests, whatever else is on PATH.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run(tool: str, *command: str) -> None:
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        pytest.fail(f"{tool} exited {done.returncode}:\n{done.stdout}{done.stderr}", pytrace=False)


def test_ruff_finds_nothing_to_flag():
    run("ruff check", sys.executable, "-m", "ruff", "check", ".")


def test_ruff_format_would_change_nothing():
    run("ruff format --check", sys.executable, "-m", "ruff", "format", "--check", ".")


def test_every_import_contract_is_kept():
    # import-linter has no `python -m` entry: its console script's own target, called with this interpreter.
    [script] = entry_points(group="console_scripts", name="lint-imports")
    run(
        "lint-imports",
        sys.executable,
        "-c",
        f"import sys; from {script.module} import {script.attr} as main; sys.exit(main())",
    )


def mypy_targets() -> list[str]:
    """The paths pyproject.toml holds to mypy, those of them that exist (the whole package: a new module joins at once)."""
    configured = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    return [folder for folder in configured if (REPO / folder).exists()]


def test_mypy_finds_no_error_in_the_typed_folders():
    targets = mypy_targets()
    assert targets == ["console"], targets  # every room: the list is the whole package
    run("mypy " + " ".join(targets), sys.executable, "-m", "mypy", *targets)


def test_no_test_times_itself_with_a_wall_clock():
    """Speed is a benchmark's business (benchmarks/ prints a ratio against a baseline); a test that asserts a
    wall-clock time fails on a loaded machine. CPU bounds go through tests/cpu_time.py; liveness deadlines
    ("gone within 10 s") read time.monotonic, never the benchmark clock."""
    timed = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "perf_counter" in line and path.name != "test_house.py"
    ]
    assert timed == [], timed
