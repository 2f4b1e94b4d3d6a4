"""One writer per history file: a gateway in a process that records polls writes its events through that
process's Recorder (console/store/recorder.py, its public API), not a thread of its own."""

from __future__ import annotations

import threading

import pytest

from console.gateway.history import EVENT_KIND, SwitchHistory
from console.overflow.tally import KIND as TALLY_KIND
from console.store.database import Store
from console.store.recorder import Recorder

from .conftest import completion, gateway, send, sim_fleet, switch, until

pytestmark = pytest.mark.timeout(120)
FLEET = "gateway-test"


def events(db) -> list:
    store = Store.open(db, read_only=True)
    try:
        return store.events()
    finally:
        store.close()


def writer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(("capcon-gateway-history", "capcon-recorder"))}


async def test_switches_and_tallies_go_through_the_recorder_as_the_files_one_writer(session, tmp_path):
    db = tmp_path / "history.sqlite"
    before = writer_threads()
    recorder = Recorder(db)
    recorder.start(detail={"command": "demo", "fleets": [FLEET], "interval": 1.0})
    history = SwitchHistory.through(recorder, FLEET, tally_seconds=0.2)
    history.open()  # nothing to open: the recorder's owner opened the file
    try:
        async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1, history=history) as server:
            started = writer_threads() - before
            assert [t.name for t in started] == ["capcon-recorder"]  # the gateway started no writer of its own
            assert (await session_switch(session, server)).status == 200
            assert (await send(session, server.url, completion(max_tokens=2))).status == 200
            assert await until(lambda: len([e for e in events(db) if e.kind == TALLY_KIND]) >= 2)
    finally:
        recorder.close(timeout=5.0)
    written = events(db)
    switched = [e for e in written if e.kind == EVENT_KIND]
    assert [(e.fleet, e.detail["to"], e.detail["reason"]) for e in switched] == [(FLEET, "pass", "one writer")]
    tallies = [e.detail for e in written if e.kind == TALLY_KIND]
    assert tallies[-1]["mode"] == "pass" and sum(t["local"] for t in tallies) == 1  # the last, written at stop
    assert {e.kind for e in written} >= {"recording_started", "recording_stopped"}  # the recorder's own, once each
    assert not any(t.name.startswith("capcon-gateway-history") for t in writer_threads() - before)


async def session_switch(session, server):
    return await switch(session, server, mode="pass", reason="one writer", actor="pytest")


def test_a_history_not_opened_says_so_and_writes_nothing(tmp_path, caplog):
    history = SwitchHistory(str(tmp_path / "never.sqlite"), FLEET)
    history.write(1.0, "pass -> pass", {})
    history.close()
    assert "was not opened" in caplog.text and not (tmp_path / "never.sqlite").exists()
