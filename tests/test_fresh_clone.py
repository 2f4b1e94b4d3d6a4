"""What a fresh clone needs is inside it: the README's test command is the one CI runs, and no test or benchmark
reads a folder beside the checkout."""

from __future__ import annotations

import ast
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
    assert "git clone" in ci and 'cd "$fresh/capcon"' in ci and tests[0] in ci
    assert ci.index('cd "$fresh/capcon"') < ci.index(tests[0]), "the test command runs inside the fresh clone"


def test_ci_runs_the_slow_and_real_lanes_the_readme_command_leaves_out():
    ci = (REPO / ".ci" / "run").read_text()
    assert "pytest -n 0 -m slow" in ci
    assert 'pytest -m "real_vllm or real_prometheus"' in ci


def climbs_out(source: str, depth: int) -> list[int]:
    """Lines of a file `depth` folders below the root where `Path(__file__).parents[N]`, a `.parent` chain, or
    `REPO.parent` reaches above the repository root: a fresh clone has nothing there.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        levels = None
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int)
            and _from_this_file(node.value.value)
        ):
            levels = node.slice.value + 1
        elif (
            isinstance(node, ast.Attribute) and node.attr == "parent"
        ):  # each link of a chain; the outermost counts most
            levels, inner = 0, node
            while isinstance(inner, ast.Attribute) and inner.attr == "parent":
                levels, inner = levels + 1, inner.value
            if not _from_this_file(inner):
                # REPO.parent and the like: a name for the root, climbed above
                levels = levels + depth + 1 if isinstance(inner, ast.Name) and inner.id in ROOT_NAMES else None
        if levels is not None and levels > depth + 1:
            found.append(node.lineno)
    return sorted(set(found))


ROOT_NAMES = {"REPO", "ROOT"}


def _from_this_file(node: ast.AST) -> bool:
    return "__file__" in ast.dump(node)


def test_nothing_reads_outside_the_repository():
    offenders = []
    for folder in ("tests", "benchmarks", "scripts", "console"):
        for path in (REPO / folder).rglob("*.py"):
            depth = len(path.relative_to(REPO).parts) - 1  # parents[depth] of the file is the root
            offenders += [f"{path.relative_to(REPO)}:{line}" for line in climbs_out(path.read_text(), depth)]
    assert offenders == []


def test_the_climb_check_sees_a_climb():
    # A file in tests/metrics/: parents[2] is the root, parents[3] and REPO.parent are above it.
    source = (
        "from pathlib import Path\nA = Path(__file__).resolve().parents[3]\nB = REPO.parent\n"
        "C = Path(__file__).parents[2]\nD = Path(__file__).parent.parent.parent.parent\n"
    )
    assert climbs_out(source, depth=2) == [2, 3, 5]


def test_every_capture_the_tests_name_is_in_the_repository():
    from tests.metrics.pages import ALL_SAMPLES, SAMPLES

    assert SAMPLES.is_relative_to(REPO)
    for name in ALL_SAMPLES:
        assert (SAMPLES / name).stat().st_size > 500, name
        assert name in (SAMPLES / "README.md").read_text(), f"{name} has no note of where it came from"
