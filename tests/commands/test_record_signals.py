"""`capcon record` stopping: a second Ctrl+C during the wait for a locked file ends the wait,
and the polls that were not written are still counted, with the "stopped:" line and exit 1."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time

from console.commands.recording import polls as poll_words
from console.store.database import Store
from tests.store.recorder_polls import (
    REPO,
    cli_env,
    integrity,
    polls_in,
    stored_times,
)


def start_record(db, targets, data_home) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "console", "record", *targets, "--interval", "1", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cli_env(data_home),
    )


def wait_for_polls(db, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while polls_in(db) < count and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    assert polls_in(db) >= count, "capcon record wrote no polls"


def test_a_second_ctrl_c_during_the_close_says_what_was_not_written(tmp_path, targets):
    db = tmp_path / "history.sqlite"
    process = start_record(db, targets, tmp_path / "data")
    holder = None
    try:
        wait_for_polls(db, 1, process)
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        time.sleep(3.5)  # polls made meanwhile wait in the recorder's memory; the state is "locked" by then
        process.send_signal(signal.SIGINT)
        time.sleep(1.0)  # inside the close, which would wait up to 5 s for the lock
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if holder is not None:
            holder.execute("ROLLBACK")
            holder.close()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "a second SIGINT ended the wait for the file" in err
    # Said at the first Ctrl+C, before the wait: the exit is not silent while the file is locked.
    waited = re.search(
        r"capcon record: writing (\d+) queued polls? to (\S+); waiting up to [1-5] s for the file"
        r" \(a second Ctrl\+C or SIGTERM gives up\)",
        err,
    )
    assert waited and waited.group(2) == str(db), err
    assert err.index(waited.group(0)) < err.index("a second SIGINT ended the wait")
    lost = re.search(r"history \S+: (\d+) polls? not written", err)
    assert lost and int(lost.group(1)) >= 1, err
    written = len(stored_times(db))
    assert f"stopped: {poll_words(written)} written to {db}" in out
    assert process.returncode == 1  # polls were lost: not a clean stop
    assert integrity(db) == "ok"


def test_a_single_ctrl_c_is_a_clean_stop_with_exit_0(tmp_path, targets):
    db = tmp_path / "history.sqlite"
    process = start_record(db, targets, tmp_path / "data")
    try:
        wait_for_polls(db, 2, process)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "not written" not in err and "second" not in err and "queued" not in err
    events = Store.open(db, read_only=True).events()
    assert [e.kind for e in events] == ["recording_started", "recording_stopped"]
    assert f"stopped: {poll_words(events[1].detail['written'])} written" in out


def test_record_help_says_what_a_second_ctrl_c_does():
    done = subprocess.run(
        [sys.executable, "-m", "console", "record", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0
    assert "a second SIGTERM or Ctrl+C" in done.stdout
    assert "1 stopped with\npolls not written" in done.stdout
