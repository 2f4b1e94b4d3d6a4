"""Replay: the overflow switches of the recording on the flags panel's timeline, as they stood at the moment shown."""

from __future__ import annotations

import pytest

from console.cli import build_parser
from console.commands.replay import open_app
from console.fleet.overflow import notes_from_events
from console.store.database import Store
from tests.replay.recording import T0, record_synthetic
from tests.tui.conftest import shown
from tests.tui.test_replay import settled

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay-switches") / "history.sqlite"
    record_synthetic(path, 120.0, replicas=2, interval=5.0, keep_views=False)
    store = Store.open(path)
    try:
        # Asked for from a console at +30 s (the gateway's own record of it a moment before), an expiry at +90 s.
        store.write_event(
            T0 + 30.0,
            kind="overflow_switch",
            fleet="assistant",
            subject="pass -> bounded_queue",
            detail={"actor": "alice", "to": "bounded_queue", "reason": "spike", "expired": False},
        )
        store.write_event(
            T0 + 30.2,
            kind="overflow_attempt",
            fleet="assistant",
            subject="-> bounded_queue: applied",
            detail={"actor": "alice", "to": "bounded_queue", "reason": "spike", "applied": 2, "failed": 0},
        )
        store.write_event(
            T0 + 90.0,
            kind="overflow_switch",
            fleet="assistant",
            subject="bounded_queue -> pass",
            detail={"actor": "gateway", "to": "pass", "reason": "ran out", "expired": True},
        )
    finally:
        store.close()
    return path


async def test_the_timeline_follows_the_replay_clock(history):
    app = open_app(build_parser().parse_args(["replay", "--db", str(history), "--paused"]))
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await settled(pilot)
            assert "⇄" not in shown(app.screen.query_one("#flags"))  # nothing switched yet at the start
            app.driver.go(T0 + 60.0)
            await settled(pilot, T0 + 60.0)
            flags = shown(app.screen.query_one("#flags"))
            assert "bounded queue by alice: spike (2 of 2 applied)" in flags
            assert flags.count("⇄") == 1  # the gateway's record of the same switch is not a second line
            app.driver.go(T0 + 100.0)
            await settled(pilot, T0 + 100.0)
            flags = shown(app.screen.query_one("#flags"))
            assert "pass by plan (expiry): ran out" in flags
            assert flags.index("pass by plan") < flags.index("bounded queue by alice")  # newest first
    finally:
        app.driver.controller.replay.close()


def test_notes_from_events_keep_the_newest_and_pair_the_two_records_of_one_switch():
    events = [
        (float(i), "overflow_attempt", {"to": "pass", "actor": f"a{i}", "applied": 1, "failed": 0}) for i in range(20)
    ]
    notes = notes_from_events(events)
    assert len(notes) == 8 and notes[0].actor == "a19"
    odd = notes_from_events([(1.0, "overflow_attempt", {"to": "pass", "applied": "x"}), (2.0, "other", None)])
    assert odd[0].outcome == "" and len(odd) == 1
