"""Who else records a fleet into this file: read from the recording_started/stopped events,
checked against live processes on this host and recent polls from another host."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from console.store.database import Store
from console.store.recorder import (
    HOST,
    STARTED,
    STOPPED,
    OtherWriter,
    Recorder,
    other_writers,
)
from tests.store.recorder_polls import renumbered, sim_polls


@pytest.fixture(scope="module")
def polls():
    return sim_polls(2, replicas=2)


@pytest.fixture
def sleeper():
    """A live process of this host that records nothing: its pid stands for a running recorder."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.05)
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def started(store: Store, at: float, pid: int, fleets, host=HOST, command="record", interval=2.0) -> None:
    detail = {"pid": pid, "command": command, "fleets": list(fleets), "interval": interval}
    if host is not None:
        detail["host"] = host
    store.write_event(at, STARTED, detail=detail)


def stopped(store: Store, at: float, pid: int, host=HOST) -> None:
    store.write_event(at, STOPPED, detail={"pid": pid, "host": host, "written": 0, "dropped": 0})


def test_a_live_recorder_of_this_host_holds_its_fleets(tmp_path, sleeper):
    store = Store.open(tmp_path / "history.sqlite")
    started(store, time.time(), sleeper, ["chat", "batch"])
    assert other_writers(store, ["chat", "code"], time.time()) == {"chat": OtherWriter("chat", sleeper, "record", HOST)}


def test_a_stopped_session_holds_nothing(tmp_path, sleeper):
    store = Store.open(tmp_path / "history.sqlite")
    started(store, time.time(), sleeper, ["chat"])
    stopped(store, time.time() + 0.001, sleeper)
    assert other_writers(store, ["chat"], time.time()) == {}


def test_a_killed_recorder_never_blocks(tmp_path, dead_pid):
    store = Store.open(tmp_path / "history.sqlite")
    started(store, time.time() - 5, dead_pid, ["chat"])  # SIGKILLed: no recording_stopped
    assert other_writers(store, ["chat"], time.time()) == {}


def test_a_pid_reused_by_a_later_process_is_not_the_writer(tmp_path, sleeper):
    store = Store.open(tmp_path / "history.sqlite")
    # Written an hour before the process with that pid started: the writer died, its pid came back.
    started(store, time.time() - 3600, sleeper, ["chat"])
    assert other_writers(store, ["chat"], time.time()) == {}


def test_this_process_is_not_another_writer(tmp_path):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start(detail={"fleets": ["chat"], "interval": 1.0})
    try:
        assert recorder.other_writers(["chat"]) == {}
    finally:
        recorder.close()


def test_another_host_holds_its_fleet_while_it_polls(tmp_path, polls, dead_pid):
    store = Store.open(tmp_path / "history.sqlite")
    now = time.time()
    fleet = polls[0].fleet
    # A pid of this host that is dead says nothing about the other host: only its polls count.
    started(store, now - 600, dead_pid, [fleet], host="bastion-2", interval=5.0)
    for record in renumbered(polls, start=now - 600, step=5.0):
        store.write_poll(record)
    assert other_writers(store, [fleet], now) == {}  # its last poll is ten minutes old
    store.write_poll(renumbered(polls[:1], start=now - 20.0)[0])  # within 3 intervals + 10 s
    assert other_writers(store, [fleet], now) == {fleet: OtherWriter(fleet, dead_pid, "record", "bastion-2")}
    assert other_writers(store, [fleet], now, host="bastion-2", alive=lambda pid, since: False) == {}


def test_the_recorder_leaves_out_taken_fleets_and_the_header_words_say_who_records_them(tmp_path, polls, sleeper):
    path = tmp_path / "history.sqlite"
    fleet = polls[0].fleet
    store = Store.open(path)
    started(store, time.time(), sleeper, [fleet])
    store.close()
    recorder = Recorder(path)
    taken = recorder.other_writers([fleet])
    recorder.leave_out(taken, [fleet])
    for record in polls:
        recorder.submit(record)
    status = recorder.status
    assert (status.state, status.detail, status.waiting) == ("off", f"pid {sleeper} records it", 0)
    recorder.close()
    reader = Store.open(path, read_only=True)
    assert reader.poll_times(fleet) == [] and [e.kind for e in reader.events()] == [STARTED]


def test_with_several_fleets_only_the_taken_one_is_left_out(tmp_path, polls, sleeper):
    path = tmp_path / "history.sqlite"
    fleet = polls[0].fleet
    store = Store.open(path)
    started(store, time.time(), sleeper, ["other"])
    store.close()
    recorder = Recorder(path)
    recorder.leave_out(recorder.other_writers([fleet, "other"]), [fleet, "other"])
    recorder.start(detail={"fleets": [fleet], "interval": 1.0})
    status = recorder.status
    assert (status.state, status.detail) == ("partial", f"other: pid {sleeper} records it")
    for record in polls:
        recorder.submit(record)
    recorder.close()
    assert len(Store.open(path, read_only=True).poll_times(fleet)) == len(polls)


def test_the_host_is_this_machines_name():
    assert socket.gethostname() == HOST
