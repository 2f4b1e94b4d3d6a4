"""One writer per fleet and file, with real processes: a running `capcon record` makes a second
`capcon record` of that fleet refuse (exit 2), `capcon watch` go on without recording it, and
once it is SIGKILLed its stale session blocks no one."""

from __future__ import annotations

import itertools
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.store.database import Store
from tests.store.recorder_polls import (
    REPO,
    capcon,
    cli_env,
    polls_in,
    stored_times,
    unnamed_fleet,
)


def running_recorder(db: Path, targets, data_home: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "record", *targets, "--interval", "1", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cli_env(data_home),
    )
    deadline = time.monotonic() + 30
    while polls_in(db) < 2 and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    assert polls_in(db) >= 2, "the first recorder wrote no polls"
    return process


def stop(process: subprocess.Popen, how=signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(how)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, process.stderr):
        stream.close()


def starts(db: Path) -> list[int]:
    """The pids of the recording sessions in the file, in order."""
    return [e.detail["pid"] for e in Store.open(db, read_only=True).events() if e.kind == "recording_started"]


def test_a_second_record_of_the_same_fleet_refuses_and_watch_goes_on_without_recording_it(tmp_path, targets):
    db = tmp_path / "history.sqlite"
    first = running_recorder(db, targets, tmp_path / "data")
    try:
        second = capcon("record", *targets, "--duration", "5", "--db", str(db), data_home=tmp_path / "data")
        assert second.returncode == 2
        assert second.stderr == (
            f"capcon record: fleet '{unnamed_fleet(targets)}' is already being recorded into {db} by capcon record (pid {first.pid}) on this host;"
            " expected another --db or a different fleet\n"
        )
        assert second.stdout == ""  # refused before the "recording to" line

        polls_before = len(stored_times(db))
        watch = capcon("watch", *targets, "--once", "--interval", "0.5", "--db", str(db), data_home=tmp_path / "data")
        assert watch.returncode == 0, watch.stderr
        assert (
            f"fleet '{unnamed_fleet(targets)}' is already being recorded into {db} by capcon record (pid {first.pid}) on this host"
            in watch.stderr
        )
        assert "not recording it in this session" in watch.stderr
        assert watch.stdout.startswith("capcon watch · source scrape")  # the table was still shown
        assert starts(db) == [first.pid]  # neither the refused record nor the watch opened a session
        assert len(stored_times(db)) >= polls_before
    finally:
        stop(first)
    # The first recorder's polls are its own: one every interval, none doubled by the watch.
    times = stored_times(db)
    assert all(later - earlier >= 0.5 for earlier, later in itertools.pairwise(times)), times


def test_a_killed_recorders_session_does_not_block_the_next(tmp_path, targets):
    db = tmp_path / "history.sqlite"
    first = running_recorder(db, targets, tmp_path / "data")
    stop(first, signal.SIGKILL)  # no recording_stopped: its session stays open in the file
    killed_polls = len(stored_times(db))
    second = capcon("record", *targets, "--duration", "3", "--db", str(db), data_home=tmp_path / "data")
    assert second.returncode == 0, second.stderr
    assert "already being recorded" not in second.stderr
    assert starts(db)[0] == first.pid and len(starts(db)) == 2
    assert len(stored_times(db)) > killed_polls


def test_a_different_fleet_in_the_same_file_records_beside_it(tmp_path, targets):
    db = tmp_path / "history.sqlite"
    first = running_recorder(db, targets, tmp_path / "data")
    try:
        plan = REPO / "plans" / "chat-8b-l40s.yaml"
        other = capcon("record", str(plan), *targets, "--duration", "3", "--db", str(db), data_home=tmp_path / "data")
        assert other.returncode == 0, other.stderr
    finally:
        stop(first)
    fleets = {fleet.name for fleet in Store.open(db, read_only=True).fleets()}
    assert fleets == {unnamed_fleet(targets), "chat-8b-l40s"}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: the console's terminal tests need it")
def test_the_console_on_the_default_file_says_who_records_its_fleet(tmp_path, targets):
    from tests.store.test_record_console_tmux import in_terminal

    data_home = tmp_path / "data"
    db = data_home / "capcon" / "history.sqlite"
    db.parent.mkdir(parents=True)
    first = running_recorder(db, targets, data_home)
    try:
        tmux = in_terminal([sys.executable, "-m", "console", "watch", *targets, "--interval", "1"], data_home)
        try:
            screen = tmux.wait_for(f"rec off: pid {first.pid} records it", seconds=40)
            assert "● live" in screen or "FLEET" in screen
            tmux.keys("q")
            tmux.wait_for("CAPCON-EXIT=0")
        finally:
            tmux.close()
        assert starts(db) == [first.pid]
    finally:
        stop(first)
