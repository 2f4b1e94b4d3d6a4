"""Helpers shared by the real-server harnesses: free ports, readiness polls, clean stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


class Unavailable(Exception):
    """The real part cannot be set up here; the message says why (the lane skips or fails with it)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_until_ready(process: subprocess.Popen, url: str, deadline_seconds: float, log: Path, what: str) -> None:
    """Poll `url` until it answers 200; raise Unavailable if the process dies or time runs out."""
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Unavailable(f"{what} exited with code {process.returncode} before it was ready:\n{log_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise Unavailable(f"{what} not ready within {deadline_seconds:.0f} s:\n{log_tail(log)}")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(process: subprocess.Popen, grace_seconds: float = 20.0) -> None:
    """SIGTERM the process group the server leads (it was started in a session of its own),
    wait for every member to exit, then SIGKILL whatever is left."""
    pgid = process.pid
    if process.poll() is None or group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        process.poll()
        if process.returncode is not None and not group_alive(pgid):
            return
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)
