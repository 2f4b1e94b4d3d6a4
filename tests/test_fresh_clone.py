"""What a fresh clone needs is inside it: the README's test command is the one CI runs, and no test or benchmark
reads a folder beside the checkout."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    """The quick start's one-line commands (the fenced blocks of one line under '## Quick start')."""
    text = (REPO / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```\n(.*?)\n```", quick, re.S) if "\n" not in block.strip()]


def test_ci_runs_the_readme_test_command_verbatim_in_a_fresh_clone():
    commands = readme_commands()
    tests = [command for command in commands if "pytest" in command]
    assert len(commands) == 2 and len(tests) == 1, commands
    ci = (REPO / ".ci" / "run").read_text()
    assert tests[0] in ci
    assert "git clone" in ci and 'cd "$fresh/capcon" && ' + tests[0] in ci


def test_nothing_reads_outside_the_repository():
    # A path that climbs out of the checkout, or an environment variable pointing at data, is how tests used to
    # reach captures that a fresh clone does not have.
    climbing = re.compile(r"""REPO\.parent|parents\[2\] / "shared"|\.\./shared|CAPCON_VLLM_SAMPLES|CAPCON_SHARED""")
    offenders = []
    for folder in ("tests", "benchmarks", "scripts", "console"):
        for path in (REPO / folder).rglob("*.py"):
            if path.name == Path(__file__).name:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if climbing.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


def test_every_capture_the_tests_name_is_in_the_repository():
    from tests.metrics.pages import ALL_SAMPLES, SAMPLES  # noqa: PLC0415

    assert SAMPLES.is_relative_to(REPO)
    for name in ALL_SAMPLES:
        assert (SAMPLES / name).stat().st_size > 500, name
        assert name in (SAMPLES / "README.md").read_text(), f"{name} has no note of where it came from"
