"""Recording from the real console in a terminal: `capcon watch` records by default and shows a locked file
in its header; `capcon demo --db` records the demo fleet."""

from __future__ import annotations

import shlex
import shutil
import sqlite3
import sys
import time

import pytest

from console.fleet.plan_now import A_MONDAY
from console.store.database import Store
from tests.store.recorder_polls import capcon_sim, polls_so_far
from tests.tui.tmux import Tmux

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed: the console's terminal tests need it", allow_module_level=True)


def in_terminal(command: list[str], data_home) -> Tmux:
    # The tmux server may predate this test: its environment is not ours, so the data home goes on the command line.
    line = f"env XDG_DATA_HOME={shlex.quote(str(data_home))} {shlex.join(command)}; echo CAPCON-EXIT=$?; sleep 60"
    return Tmux(line, width=140, height=30)


@pytest.mark.slow  # the console in tmux, twice, around a locked file: a long run
def test_watch_records_by_default_and_its_header_shows_a_locked_file(tmp_path):
    data_home = tmp_path / "data"
    path = data_home / "capcon" / "history.sqlite"
    with capcon_sim(replicas=2) as urls:
        targets = [arg for url in urls for arg in ("--target", url)]
        tmux = in_terminal([sys.executable, "-m", "console", "watch", *targets, "--interval", "1"], data_home)
        try:
            tmux.wait_for("live · rec", seconds=40)
            tmux.wait_until(lambda _: polls_so_far(path) >= 2, "two recorded polls")
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")
            locked_at = time.time()
            try:
                screen = tmux.wait_for("rec locked (", seconds=20)
                waiting = screen.split("rec locked (", 1)[1].split()[0]
                # The console keeps polling meanwhile: more polls wait for the file.
                tmux.wait_until(
                    lambda now: f"rec locked ({waiting} waiting)" not in now and "rec locked (" in now,
                    "more polls waiting",
                )
                assert "● live" in screen and "FLEET 2/2" in screen
            finally:
                holder.execute("ROLLBACK")
                released_at = time.time()
                holder.close()
            tmux.wait_until(
                lambda screen: "rec locked" not in screen and "live · rec" in screen, "recording again", seconds=20
            )
            tmux.keys("q")
            tmux.wait_for("CAPCON-EXIT=0")
        finally:
            tmux.close()
    store = Store.open(path, read_only=True)
    (fleet,) = store.fleets()
    times = [at for _, at in store.poll_times(fleet.name)]
    # The polls made while the file was locked were kept, and written after the release.
    assert [at for at in times if locked_at < at < released_at]
    assert [e.kind for e in store.events()] == ["recording_started", "recording_stopped"]


def test_demo_with_db_records_the_simulated_fleet_and_its_plan_clock(tmp_path):
    db = tmp_path / "demo.sqlite"
    data_home = tmp_path / "data"
    tmux = in_terminal([sys.executable, "-m", "console", "demo", "--replicas", "2", "--db", str(db)], data_home)
    try:
        tmux.wait_for("live · rec", seconds=40)
        tmux.wait_until(lambda _: polls_so_far(db) >= 3, "three recorded polls")
        tmux.keys("q")
        tmux.wait_for("CAPCON-EXIT=0")
    finally:
        tmux.close()
    store = Store.open(db, read_only=True)
    (fleet,) = store.fleets()
    polls = [store.poll(poll_id) for poll_id, _ in store.poll_times(fleet.name)]
    assert all(len(p.results) == 2 for p in polls)
    # The demo runs the plan's week fast: the recorded plan clock is the simulated week, not the wall clock.
    assert all(A_MONDAY <= p.plan_clock < A_MONDAY + 7 * 86400 for p in polls)
    first, last = polls[0], polls[-1]
    assert last.plan_clock - first.plan_clock > 10 * (last.at - first.at)  # a day in five minutes
    assert not (data_home / "capcon").exists()  # nothing in the user's own history


def test_demo_without_db_records_nothing(tmp_path):
    data_home = tmp_path / "data"
    tmux = in_terminal([sys.executable, "-m", "console", "demo", "--replicas", "1"], data_home)
    try:
        screen = tmux.wait_for("FLEET 1/1", seconds=40)
        assert "rec" not in screen.splitlines()[0]
        time.sleep(1.5)
        tmux.keys("q")
        tmux.wait_for("CAPCON-EXIT=0")
    finally:
        tmux.close()
    assert not data_home.exists() or not any(data_home.rglob("*.sqlite"))
