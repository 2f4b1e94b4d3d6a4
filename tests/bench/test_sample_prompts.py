"""The built-in sample prompts: `capcon bench` without --prompts replays them, and says so everywhere.

Before, --prompts FILE was required and no file shipped: a first run needed prompts written by hand.
"""

from __future__ import annotations

import importlib.util
import json
import tomllib

import pytest

from console.bench.prompts import SAMPLE_FILE, load_sample

from .conftest import FAST_PLAN, REPO
from .test_bench_sim import bench

SAMPLE = REPO / "console" / "bench" / SAMPLE_FILE
SAID = "built-in sample (200 prompts), not your traffic"


def _script():
    spec = importlib.util.spec_from_file_location("sample_prompts", REPO / "scripts" / "sample_prompts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_sample_is_what_its_script_writes_and_stays_small():
    assert SAMPLE.read_text(encoding="utf-8") == _script().build()
    assert SAMPLE.stat().st_size < 100_000
    prompts = load_sample()
    assert len(prompts) == 200
    chats = [p for p in prompts if p.messages is not None]
    assert 0 < len(chats) < len(prompts)  # chats and plain completions both
    assert len({p.max_tokens for p in prompts}) > 3 and all(p.max_tokens for p in prompts)
    words = sorted(p.words for p in prompts)
    assert words[0] < 30 and words[-1] > 200  # short questions and long contexts


def test_the_sample_is_package_data():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["console"]
    assert any(SAMPLE.match(glob.replace("**/", "")) for glob in globs)


@pytest.mark.timeout(120)
def test_bench_without_prompts_replays_the_sample_and_says_so(sim_url):
    common = ["--target", sim_url, "--plan", str(FAST_PLAN), "--rate", "8", "--step-seconds", "2"]
    done = bench(*common, "--min-requests", "20", "--json", "--no-history", timeout=100)
    assert done.returncode == 0, done.stderr
    assert f"capcon bench: no --prompts: replaying the {SAID}; give --prompts FILE" in done.stderr
    report = json.loads(done.stdout)
    assert report["prompts"] == SAID
    (step,) = report["steps"]
    assert step["sent"] == step["completed"] > 0
    text = bench(*common, "--min-requests", "20", "--no-history", timeout=100)
    assert text.returncode == 0, text.stderr
    assert f"prompts: {SAID}" in text.stdout.splitlines()[:3]


def test_a_prompts_file_is_named_in_the_report(sim_url, prompts_file):
    done = bench(
        "--target", sim_url, "--prompts", str(prompts_file), "--plan", str(FAST_PLAN), "--rate", "8",
        "--step-seconds", "2", "--min-requests", "20", "--json", "--no-history", timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["prompts"] == f"{prompts_file} (200 prompts)"
    assert "no --prompts" not in done.stderr


def test_the_script_can_check_the_file(capsys):
    assert _script().main(["sample_prompts.py", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
