"""The real `capcon replay` in tmux: what a person sees, read with capture-pane."""

from __future__ import annotations

import shutil
import sys
from datetime import UTC, datetime

import pytest

from tests.replay.recording import T0, Incident, record_synthetic

from .tmux import Tmux

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed: the replay's terminal test needs it", allow_module_level=True)

pytestmark = pytest.mark.timeout(90)


def utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


@pytest.fixture
def tmux_replay(tmp_path):
    path = tmp_path / "history.sqlite"
    record_synthetic(
        path,
        240.0,
        replicas=3,
        interval=5.0,
        incident=Incident(down_from=30.0, down_until=90.0, queue_replica=None),
        keep_views=False,
    )
    # TZ pinned: the tmux server's environment may not be this test's.
    tmux = Tmux(f"TZ=UTC {sys.executable} -m console replay --db {path} --paused; echo CAPCON-EXIT=$?; sleep 60")
    try:
        yield tmux
    finally:
        tmux.close()


def test_replay_in_tmux_shows_the_recorded_moment_steps_and_quits(tmux_replay):
    tmux = tmux_replay
    # The header can be drawn a moment before the rows are mounted: wait for both.
    screen = tmux.wait_until(
        lambda s: f"REPLAY {utc(T0)} ×1 ‖" in s and "replica-0" in s and "replica-2" in s,
        "the recorded moment and its replicas",
    )
    assert "● live" not in screen

    tmux.keys(".")
    tmux.wait_for(f"REPLAY {utc(T0 + 5)} ×1 ‖")
    tmux.keys("g", "+60s", "Enter")
    tmux.wait_for(f"REPLAY {utc(T0 + 65)} ×1 ‖")
    tmux.wait_for("replica down · replica-1")  # the recorded flag, raised 10 s into the outage
    tmux.keys("]")
    tmux.wait_for("×2 ‖")

    tmux.keys("q")
    screen = tmux.wait_for("CAPCON-EXIT=0", seconds=10)
    assert "Traceback" not in screen
