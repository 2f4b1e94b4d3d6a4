"""`capcon sim` as a separate process on loopback, for the tests and benchmarks that need a real one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_LINE = re.compile(r"\s+(http://127\.0\.0\.1:\d+)$")


def start_sim(
    *args: str, ready_seconds: float = 30.0, stderr: int = subprocess.PIPE
) -> tuple[subprocess.Popen, list[str], list[str]]:
    """Start `capcon sim ARGS`, wait until it prints its targets; returns (process, urls, stdout lines so far).

    Its standard output is read on a thread to the end (so the pipe never fills); the thread is
    `process.reader`, to join once the process is gone. AssertionError with what it printed if it did not start.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "sim", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=stderr,
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

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    process.reader = reader  # type: ignore[attr-defined]  # for the callers that read its last lines
    if not ready.wait(ready_seconds) or process.poll() is not None:
        process.kill()
        said = process.stderr.read() if process.stderr is not None else ""
        raise AssertionError(f"capcon sim did not start: {''.join(lines)} {said}")
    urls = [m.group(1) for line in lines if (m := TARGET_LINE.match(line.rstrip()))]
    return process, urls, lines
