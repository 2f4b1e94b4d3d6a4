"""The recorder on a real file: polls land exactly, in order, while readers read; events frame the session."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading

import pytest

from console.store.database import HistoryError, Store
from console.store.recorder import STARTED, STOPPED, Recorder
from console.store.retention import Retention
from tests.store.recorder_polls import (
    RECENT,
    as_stored,
    integrity,
    renumbered,
    sim_polls,
    wait_for,
)


@pytest.fixture(scope="module")
def polls():
    return sim_polls(6, replicas=3)


def test_every_poll_lands_exactly_while_a_reader_reads_beside_the_writer(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    records = renumbered(polls * 5, start=RECENT)
    fleet = records[0].fleet
    recorder = Recorder(path, Retention())
    recorder.start(detail={"fleets": [fleet], "interval": 1.0})

    problems: list[str] = []
    counts: list[int] = []
    stop = threading.Event()

    def viewer() -> None:
        # A second program (replay, history) reading the file the whole time the recorder writes it.
        store = Store.open(path, read_only=True)
        try:
            while not stop.is_set():
                times = store.poll_times(fleet)
                if times:
                    store.poll(times[-1][0])  # the newest poll decodes while the next is being written
                counts.append(len(times))
        except Exception as error:  # noqa: BLE001 - reported below
            problems.append(f"{type(error).__name__}: {error}")
        finally:
            store.close()

    reader_thread = threading.Thread(target=viewer)
    reader_thread.start()
    reader = Store.open(path, read_only=True)
    try:
        for i, record in enumerate(records):
            recorder.submit(record)
            wait_for(lambda n=i + 1: recorder.status.written == n, f"poll {i + 1} written")
            assert [at for _, at in reader.poll_times(fleet)][-1] == record.at
    finally:
        stop.set()
        reader_thread.join()
    status = recorder.close()

    assert problems == []
    assert counts == sorted(counts), "a reader never sees polls disappear"
    assert (status.state, status.written, status.waiting, status.dropped) == ("stopped", len(records), 0, 0)
    stored = reader.poll_times(fleet)
    assert [at for _, at in stored] == [r.at for r in records]
    for (poll_id, _), record in zip(stored, records):
        back = reader.poll(poll_id)
        assert back.results == as_stored(record.results)  # every counter, gauge and histogram bucket as scraped
        assert back.plan_clock == record.plan_clock
    assert integrity(path) == "ok"


def test_the_session_is_framed_by_started_and_stopped_events(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start(detail={"command": "record", "fleets": ["chat-8b-l40s"], "interval": 2.0})
    for record in renumbered(polls, start=RECENT + 5000.0):
        recorder.submit(record)
    recorder.close()
    events = Store.open(path, read_only=True).events()
    assert [e.kind for e in events] == [STARTED, STOPPED]
    # The host makes the pid checkable: another recorder trusts a pid only on its own host.
    assert events[0].detail == {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": "record",
        "fleets": ["chat-8b-l40s"],
        "interval": 2.0,
    }
    # The stop names the same session (command, fleets), so a fleet's export finds both ends.
    assert events[1].detail == {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": "record",
        "fleets": ["chat-8b-l40s"],
        "written": len(polls),
        "dropped": 0,
    }


def test_close_writes_what_is_still_queued(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start()
    records = renumbered(polls * 4, start=RECENT + 7000.0)
    for record in records:
        recorder.submit(record)  # all at once, as a console that quits right after a burst
    status = recorder.close(timeout=10.0)
    assert (status.written, status.waiting) == (len(records), 0)
    assert len(Store.open(path, read_only=True).poll_times(records[0].fleet)) == len(records)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_text("fleet: not a database\n" * 200), "not an SQLite file"),
        (lambda p: sqlite3.connect(p).execute("CREATE TABLE notes (x)").connection.commit(), "other tables"),
    ],
    ids=["directory", "text-file", "other-sqlite"],
)
def test_a_path_that_is_no_history_is_refused_before_anything_starts(tmp_path, make, words):
    path = tmp_path / "history.sqlite"
    make(path)
    with pytest.raises(HistoryError, match=words) as caught:
        Recorder(path)
    assert "\n" not in str(caught.value)


def test_a_history_from_a_newer_capcon_is_refused(tmp_path):
    path = tmp_path / "history.sqlite"
    Store.open(path).close()
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA user_version = 99")
    with pytest.raises(HistoryError, match="newer capcon"):
        Recorder(path)
