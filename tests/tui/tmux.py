"""A console in a real terminal: tmux with send-keys to type and capture-pane to read the screen."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Tmux:
    def __init__(self, command: str, width: int = 100, height: int = 30) -> None:
        self.session = f"capcon-test-{uuid.uuid4().hex[:8]}"
        # A tmux server started before the tests keeps its own environment: hand the test's data
        # home over explicitly, or `capcon watch` would record into the user's own history.
        data_home = ["-e", f"XDG_DATA_HOME={os.environ['XDG_DATA_HOME']}"] if os.environ.get("XDG_DATA_HOME") else []
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                self.session,
                *data_home,
                "-x",
                str(width),
                "-y",
                str(height),
                "-c",
                str(REPO),
                command,
            ],
            check=True,
        )

    def screen(self) -> str:
        out = subprocess.run(["tmux", "capture-pane", "-p", "-t", self.session], capture_output=True, text=True)
        return out.stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            subprocess.run(["tmux", "send-keys", "-t", self.session, key], check=True)
            # tmux waits (escape-time, 500 ms by default) to see whether Escape starts a sequence:
            # a key sent sooner would arrive as Alt+key.
            time.sleep(0.8 if key == "Escape" else 0.15)

    def wait_until(self, seen, what: str, seconds: float = 20.0) -> str:
        deadline = time.monotonic() + seconds
        while True:
            screen = self.screen()
            if seen(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {seconds:g} s for {what}; the screen shows:\n{screen}")
            time.sleep(0.2)

    def wait_for(self, text: str, seconds: float = 20.0) -> str:
        return self.wait_until(lambda screen: text in screen, repr(text), seconds)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)

    def pane_pid(self) -> int:
        out = subprocess.run(
            ["tmux", "list-panes", "-t", self.session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
        )
        return int(out.stdout.split()[0])
