"""Closing on a locked file: the recorder keeps trying until its deadline, so a lock that lifts
before the deadline loses nothing; `give_up` (a second Ctrl+C) ends the wait at once and counts
what was not written."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from console.commands.recording import polls as poll_words
from console.store.recorder import Recorder
from tests.store.recorder_polls import (
    RECENT,
    integrity,
    renumbered,
    sim_polls,
    stored_times,
    wait_for,
)


@pytest.fixture(scope="module")
def polls():
    return sim_polls(4, replicas=2)


class WriteLock:
    """Another connection holding BEGIN IMMEDIATE on the file, released from a timer or by hand."""

    def __init__(self, path) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.connection.execute("BEGIN IMMEDIATE")
        self.released = threading.Event()

    def release(self) -> None:
        if not self.released.is_set():
            self.connection.execute("ROLLBACK")
            self.connection.close()
            self.released.set()

    def release_after(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.release)
        timer.start()
        return timer


def test_close_keeps_trying_until_a_lock_that_lifts_before_the_deadline(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start()
    wait_for(
        lambda: path.exists() and recorder.status.state == "recording" and not recorder.status.waiting,
        "the start event",
    )
    records = renumbered(polls, start=RECENT + 90_000.0)
    lock = WriteLock(path)
    timer = None
    try:
        for record in records:
            recorder.submit(record)
        wait_for(lambda: recorder.status.state == "locked", "the locked state")
        # Longer than one write attempt waits (its busy waits add up to about 4 s): a single
        # attempt at close would give up before the release, well inside the deadline.
        timer = lock.release_after(6.0)
        status = recorder.close(timeout=20.0)
    finally:
        if timer is not None:
            timer.cancel()
        lock.release()
    assert (status.state, status.waiting, status.dropped) == ("stopped", 0, 0), status
    assert status.written == len(records)
    assert stored_times(path) == [r.at for r in records]
    assert integrity(path) == "ok"


def test_give_up_ends_the_close_at_once_and_counts_what_stays_unwritten(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start()
    wait_for(lambda: path.exists() and not recorder.status.waiting, "the start event")
    records = renumbered(polls, start=RECENT + 95_000.0)
    lock = WriteLock(path)
    try:
        for record in records:
            recorder.submit(record)
        wait_for(lambda: recorder.status.state == "locked", "the locked state")
        closed: list = []
        closing = threading.Thread(target=lambda: closed.append(recorder.close(timeout=600.0)))
        closing.start()
        time.sleep(0.5)  # inside the close's wait for the lock
        recorder.give_up()
        closing.join(30.0)
        assert not closing.is_alive(), "give_up did not end a close that would wait ten minutes"
    finally:
        lock.release()
    (status,) = closed
    assert (status.state, status.waiting, status.detail) == (
        "stopped",
        len(records),
        f"{poll_words(len(records))} not written",
    )
    assert stored_times(path) == []
    assert integrity(path) == "ok"


def test_close_says_at_once_what_it_waits_for_when_the_file_refuses(tmp_path, polls, capsys):
    from console.commands.recording import close_recorder

    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start(detail={"command": "watch", "fleets": ["chat"]})
    wait_for(lambda: path.exists() and not recorder.status.waiting, "the start event")
    records = renumbered(polls, start=RECENT + 97_000.0)
    lock = WriteLock(path)
    said_while_waiting: list[int] = []
    real_close = recorder.close

    def close(timeout, on_wait=None):
        def listen(waiting, seconds):
            on_wait(waiting, seconds)
            said_while_waiting.append(recorder.status.written)  # nothing written yet: said before the wait

        return real_close(timeout, on_wait=listen)

    recorder.close = close
    try:
        for record in records:
            recorder.submit(record)
        wait_for(lambda: recorder.status.state == "locked", "the locked state")
        timer = lock.release_after(1.5)
        close_recorder(recorder, "watch")
        timer.cancel()
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"capcon watch: writing {len(records)} queued polls to {path}; waiting up to 5 s for the file (Ctrl+C gives up)"
    ]
    assert said_while_waiting == [0]
    assert stored_times(path) == [r.at for r in records]  # the lock lifted within the wait: nothing lost, no count line


def test_close_says_nothing_when_nothing_waits(tmp_path, polls, capsys):
    from console.commands.recording import close_recorder

    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start(detail={"command": "record", "fleets": ["chat", "code"]})
    for record in renumbered(polls, start=RECENT + 98_000.0):
        recorder.submit(record)
    close_recorder(recorder, "record")
    assert capsys.readouterr().err == ""
    from console.store.database import Store

    stopped = Store.open(path, read_only=True).events()[-1]
    # The stop names its session like the start, so an export of one fleet finds it.
    assert stopped.kind == "recording_stopped"
    assert (stopped.detail["command"], stopped.detail["fleets"], stopped.detail["written"]) == (
        "record",
        ["chat", "code"],
        len(polls),
    )
