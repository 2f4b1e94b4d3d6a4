"""Console runs in a history: each recorder start began with an empty watcher and no flags, and a replay does the same."""

from __future__ import annotations

import sqlite3

import pytest

from console.replay.fleet_replay import FleetReplay
from console.replay.loader import open_replay
from console.store.database import Store
from tests.replay.recording import T0, Incident, record_synthetic

# Replica-2 queues from +200 s to past the end of the first run, and again in the first 100 s of the next.
FIRST = Incident(down_replica=None, queue_from=200.0, queue_until=400.0)
SECOND = Incident(down_replica=None, queue_from=0.0, queue_until=100.0)


def started(path, at: float, fleets: list[str] | None, pid: int) -> None:
    """What the recorder writes when a console or `capcon record` starts."""
    store = Store.open(path)
    detail = {"pid": pid, "command": "record", "interval": 5.0}
    if fleets is not None:
        detail["fleets"] = fleets
    store.write_event(at, "recording_started", detail=detail)
    store.close()


@pytest.fixture(scope="module")
def killed_and_restarted(tmp_path_factory):
    """`capcon record` killed with SIGKILL at +302 s and restarted at once: no stop recorded, no gap in the polls."""
    path = tmp_path_factory.mktemp("killed") / "history.sqlite"
    started(path, T0 - 1.0, ["assistant"], pid=1)
    first = record_synthetic(path, 300.0, replicas=3, interval=5.0, incident=FIRST, plan_path=None)
    started(path, T0 + 302.0, ["assistant"], pid=2)
    second = record_synthetic(
        path, 300.0, interval=5.0, start=T0 + 305.0, incident=SECOND, plan_path=None, carry_on=first
    )
    # Another fleet's recorder starting on the same file while this one polls on.
    started(path, T0 + 452.0, ["batch"], pid=3)
    return path, first, second


def test_a_restart_without_a_stop_or_a_gap_is_a_new_run(killed_and_restarted):
    path, first, second = killed_and_restarted
    live = first.views + second.views
    restart = len(first.views)
    # What the live console showed: the new process had no window yet, and raised the queueing flag afresh.
    assert live[restart].figures.fleet.requests_per_second is None
    assert live[restart - 1].figures.fleet.requests_per_second is not None
    raised_before = {f.id: f.since for f in live[restart - 1].flags}
    assert raised_before, "the first run must end with a flag raised for this test to mean anything"
    replay = open_replay(path)
    try:
        (fleet,) = replay.fleets
        assert fleet.session_starts == frozenset({restart}), "another fleet's recorder start splits nothing"
        fleet_replay = FleetReplay(fleet)
        for index, view in enumerate(live):
            fleet_replay.go_to(index)
            assert fleet_replay.view == view, f"poll {index} at +{view.now - T0:.0f} s"
        again = {f.id: f.since for v in second.views for f in v.flags}
        assert set(raised_before) & set(again) and all(since >= T0 + 305.0 for since in again.values())
    finally:
        replay.close()


def test_a_seek_into_the_new_run_warms_up_from_its_start_only(killed_and_restarted):
    path, first, second = killed_and_restarted
    replay = open_replay(path, start=T0 + 355.0)
    try:
        fleet_replay = FleetReplay(replay.fleets[0])
        target = replay.fleets[0].index_at(T0 + 355.0)
        assert fleet_replay.go_to(target) == target - len(first.views) + 1
        assert fleet_replay.view == second.views[target - len(first.views)]
    finally:
        replay.close()


def test_a_start_that_names_no_fleet_is_a_new_run_for_every_fleet(tmp_path):
    path = tmp_path / "history.sqlite"
    first = record_synthetic(path, 200.0, replicas=2, interval=5.0, incident=FIRST, plan_path=None, keep_views=False)
    started(path, T0 + 202.0, None, pid=2)
    record_synthetic(path, 100.0, interval=5.0, start=T0 + 205.0, plan_path=None, carry_on=first, keep_views=False)
    replay = open_replay(path)
    try:
        assert replay.fleets[0].session_starts == frozenset({len(first.times)})
    finally:
        replay.close()


def test_without_recorded_starts_a_long_gap_still_begins_a_new_run(tmp_path):
    # A file written without events: only the gap (over two usual intervals) tells the runs apart.
    # Late polls (up to 2 s on a 5 s interval) are not restarts.
    path = tmp_path / "history.sqlite"
    first = record_synthetic(path, 200.0, replicas=2, interval=5.0, plan_path=None, jitter=2.0)
    second = record_synthetic(path, 100.0, interval=5.0, start=T0 + 216.0, plan_path=None, carry_on=first, jitter=2.0)
    replay = open_replay(path)
    try:
        fleet = replay.fleets[0]
        assert fleet.session_starts == frozenset({len(first.times)})
        fleet_replay = FleetReplay(fleet)
        for index, view in enumerate(first.views + second.views):
            fleet_replay.go_to(index)
            assert fleet_replay.view == view, f"poll {index}"
    finally:
        replay.close()


def test_a_seek_builds_the_watcher_with_the_interval_its_run_started_with(tmp_path):
    # Older consoles recorded the interval set with +/- while their watcher kept the one it started with
    # (its window slack depends on it). A warm-up that starts after such a change must still use the first.
    path = tmp_path / "history.sqlite"
    started(path, T0 - 1.0, ["assistant"], pid=1)
    recorded = record_synthetic(path, 1500.0, replicas=3, interval=5.0, plan_path=None, jitter=2.0)
    connection = sqlite3.connect(path)
    connection.execute("UPDATE polls SET interval_seconds = 1.0 WHERE at >= ?", (T0 + 300.0,))
    connection.commit()
    connection.close()
    replay = open_replay(path)
    try:
        fleet_replay = FleetReplay(replay.fleets[0])
        target = len(recorded.times) - 1
        assert fleet_replay.go_to(target) < target, "a warm-up, not a replay from the start"
        assert fleet_replay.view == recorded.views[target]
    finally:
        replay.close()
