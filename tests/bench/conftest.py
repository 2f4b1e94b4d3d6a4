"""A simulated replica (`capcon sim`, its own process) and a prompts file for the benchmark's tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAST_PLAN = Path(__file__).resolve().parent / "fixtures" / "fast-replica.yaml"
PROMPT_WORDS = 64
ANSWER_TOKENS = 16


@pytest.fixture(scope="session")
def sim_url():
    """One replica of the fast plan on a free loopback port, no traffic of its own."""
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "sim", str(FAST_PLAN), "--replicas", "1", "--traffic", "off"]
        + ["--status-every", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Ctrl+C stops it"):
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(30) or process.poll() is not None:
        process.kill()
        raise AssertionError(f"capcon sim did not start: {''.join(lines)}")
    (url,) = [m.group(1) for line in lines for m in [re.match(r"\s+(http://127\.0\.0\.1:\d+)$", line.rstrip())] if m]
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
