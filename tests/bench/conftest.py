"""A simulated replica (`capcon sim`, its own process) and a prompts file for the benchmark's tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.sim.running import start_sim

REPO = Path(__file__).resolve().parents[2]
FAST_PLAN = Path(__file__).resolve().parent / "fixtures" / "fast-replica.yaml"
PROMPT_WORDS = 64
ANSWER_TOKENS = 16


@pytest.fixture(scope="session")
def sim_url():
    """One replica of the fast plan on a free loopback port, no traffic of its own."""
    process, urls, _ = start_sim(str(FAST_PLAN), "--replicas", "1", "--traffic", "off", "--status-every", "0")
    (url,) = urls
    yield url
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def write_prompts(path: Path, count: int = 200) -> Path:
    with path.open("w") as out:
        for i in range(count):
            words = " ".join(f"w{i}x{j}" for j in range(PROMPT_WORDS))
            out.write(json.dumps({"prompt": words, "max_tokens": ANSWER_TOKENS}) + "\n")
    return path


@pytest.fixture
def prompts_file(tmp_path) -> Path:
    return write_prompts(tmp_path / "prompts.jsonl")
