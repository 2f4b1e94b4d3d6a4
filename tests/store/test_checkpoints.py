"""Replay checkpoints in a real history file: trends stored as the points since the last one and read back
whole, samples named by the polls holding them, nothing written that a reader could not use."""

from __future__ import annotations

import json
import sqlite3
import zlib
from types import SimpleNamespace

from console.fleet.flags import FlagState, Tracker
from console.fleet.trends import TrendPoint, Trends
from console.store.checkpoints import checkpoint_polls, read_state, rules_digest
from console.store.database import Store
from console.store.records import PollRecord, PollState
from console.store.retention import Retention, apply_retention
from console.targets import TargetResult
from tests.store.test_schema import real_results

T0 = 1_800_000_000.0
TRACKER = Tracker("replica_down", "r0", "critical", "r0 is down", "check it", T0 + 3.0, T0 + 13.0, T0 + 20.0, 10.0)


def record(at: float, state: PollState | None = None, results=()) -> PollRecord:
    return PollRecord("f", at, at, "scrape", 60.0, 1.0, tuple(results), state=state)


def stored_points(path, poll_id: int) -> list:
    with sqlite3.connect(path) as connection:
        blob = connection.execute("SELECT state FROM checkpoints WHERE poll_id = ?", (poll_id,)).fetchone()[0]
    return json.loads(zlib.decompress(blob))["trends"]["points"]


def test_trends_are_stored_as_the_points_since_the_last_checkpoint_and_read_back_whole(tmp_path):
    path = tmp_path / "history.sqlite"
    store = Store.open(path)
    trends = Trends(span_seconds=50.0)
    rings, written = {}, []
    for k in range(120):
        at = T0 + k
        trends = trends.add(TrendPoint(at, load_rps=k * 0.5, waiting=None if k % 3 else 1.0))
        if k == 70:
            trends = Trends(span_seconds=50.0).add(TrendPoint(at, load_rps=-1.0))  # a new console run's ring
        state = PollState(trends, FlagState({TRACKER.kind + ":r0": TRACKER}), None) if k % 10 == 9 else None
        poll_id = store.write_poll(record(at, state))
        if state is not None:
            rings[poll_id] = trends
            written.append(poll_id)
    assert checkpoint_polls(store.connection, store.fleet_id("f")) == written
    for poll_id, ring in rings.items():
        back = read_state(store.connection, poll_id)
        assert back is not None and back.trends == ring and back.watcher is None
        assert back.flag_state.trackers == {"replica_down:r0": TRACKER}
    store.close()
    assert len(stored_points(path, written[0])) == 10
    assert [len(stored_points(path, p)) for p in written[1:7]] == [10] * 6, "only the points since the last one"
    assert len(stored_points(path, written[7])) == 10, "the ring reset at poll 70: stored whole, 9 points plus one"


def test_a_checkpoint_whose_trends_reach_a_lost_one_is_not_used(tmp_path):
    path = tmp_path / "history.sqlite"
    store = Store.open(path)
    trends, written = Trends(span_seconds=600.0), []
    for k in range(40):
        trends = trends.add(TrendPoint(T0 + k, load_rps=1.0))
        state = PollState(trends, FlagState(), None) if k % 10 == 9 else None
        poll_id = store.write_poll(record(T0 + k, state))
        if state is not None:
            written.append(poll_id)
    store.connection.execute("DELETE FROM checkpoints WHERE poll_id = ?", (written[1],))
    assert read_state(store.connection, written[0]) is not None
    assert read_state(store.connection, written[2]) is None and read_state(store.connection, written[3]) is None
    store.close()


def memory(samples: dict[str, tuple]) -> SimpleNamespace:
    """A watcher's memory as the live console hands it over (console.live.watcher.WatcherMemory's fields)."""
    return SimpleNamespace(
        source="scrape",
        window_seconds=60.0,
        interval_seconds=1.0,
        rings=samples,
        last_good={url: ring[-1].at for url, ring in samples.items()},
        restarted=frozenset(),
        latest={url: ring[-1] for url, ring in samples.items()},
    )


def test_the_watcher_samples_are_named_by_their_polls_and_never_guessed(tmp_path):
    path = tmp_path / "history.sqlite"
    store = Store.open(path)
    polls = []
    for k in range(3):
        results = real_results(T0 + k, requests=k)
        polls.append((store.write_poll(record(T0 + k + 0.5, results=results)), results))
    answered = [i for i, r in enumerate(polls[0][1]) if r.sample is not None]
    ring = {polls[0][1][i].url: tuple(results[i].sample for _, results in polls) for i in answered}
    state = PollState(Trends(), FlagState(), memory(ring))
    kept = store.write_poll(record(T0 + 3.5, state))
    back = read_state(store.connection, kept)
    assert back is not None and back.polls() == [p for p, _ in polls]
    url = polls[0][1][0].url
    assert back.watcher["rings"][url] == [[p, T0 + k] for k, (p, _) in enumerate(polls)]
    store.close()

    # Another writer (a new console run) never saw those polls: it cannot name the samples, so writes nothing.
    store = Store.open(path)
    after = store.write_poll(record(T0 + 4.5, state))
    assert checkpoint_polls(store.connection, store.fleet_id("f")) == [kept] and after != kept
    store.close()


def test_checkpoints_go_with_their_polls_and_other_rules_ignore_them(tmp_path):
    path = tmp_path / "history.sqlite"
    store = Store.open(path)
    trends = Trends()
    for k in range(20):
        trends = trends.add(TrendPoint(T0 + k, load_rps=1.0))
        up = [TargetResult("r0", "http://r0/metrics", "down", None, "refused", T0 + k)]
        store.write_poll(record(T0 + k, PollState(trends, FlagState(), None) if k % 5 == 4 else None, up))
    fleet = store.fleet_id("f")
    assert len(checkpoint_polls(store.connection, fleet)) == 4
    store.connection.execute(
        "UPDATE checkpoints SET format = 'other' WHERE rowid IN (SELECT rowid FROM checkpoints LIMIT 1)"
    )
    assert len(checkpoint_polls(store.connection, fleet)) == 3 and rules_digest()
    apply_retention(store, T0 + 20.0 + 86400.0 * 30, Retention(raw_seconds=60.0, minutes_seconds=86400.0))
    assert store.connection.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0
    store.close()
