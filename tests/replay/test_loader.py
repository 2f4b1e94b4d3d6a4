"""Opening a history for replay: fleets, ranges, plans, and one clear line for each thing that can be wrong."""

from __future__ import annotations

import re
import sqlite3

import pytest

from console.errors import UserError
from console.plan.model import ESTIMATED, Capacity
from console.replay.controller import first_view
from console.replay.loader import open_replay
from tests.replay.recording import T0, record_synthetic


@pytest.fixture(scope="module")
def two_fleets(tmp_path_factory):
    path = tmp_path_factory.mktemp("two") / "history.sqlite"
    record_synthetic(path, 600.0, replicas=2, interval=5.0, fleet="assistant", keep_views=False)
    record_synthetic(
        path, 300.0, replicas=2, interval=2.0, fleet="batch", start=T0 + 120.0, plan_path=None, keep_views=False
    )
    return path


def test_every_fleet_in_the_file_is_replayed_unless_some_are_named(two_fleets):
    replay = open_replay(two_fleets)
    try:
        assert [f.name for f in replay.fleets] == ["assistant", "batch"]
        assert (replay.start, replay.end) == (T0, T0 + 600.0)
        assert replay.fleets[0].first_plan().name == "internal-assistant-18rps"
        assert replay.fleets[1].first_plan() is None
    finally:
        replay.close()
    replay = open_replay(two_fleets, ["batch"])
    try:
        assert [f.name for f in replay.fleets] == ["batch"]
        assert (replay.start, replay.end) == (T0 + 120.0, T0 + 420.0)
    finally:
        replay.close()


def test_a_range_keeps_the_polls_before_it_for_the_warm_up(two_fleets):
    replay = open_replay(two_fleets, ["assistant"], start=T0 + 100.0, end=T0 + 200.0)
    try:
        (fleet,) = replay.fleets
        assert fleet.times[0] == T0  # the whole recording stays indexed
        assert (fleet.start, fleet.end) == (T0 + 100.0, T0 + 200.0)
        assert fleet.index_at(T0 + 102.0) == fleet.first
        assert fleet.index_at(T0 - 1.0) == -1
    finally:
        replay.close()


def test_a_fleet_without_polls_in_the_range_is_left_out_unless_named(two_fleets):
    replay = open_replay(two_fleets, start=T0, end=T0 + 60.0)
    try:
        assert [f.name for f in replay.fleets] == ["assistant"]
    finally:
        replay.close()
    with pytest.raises(UserError, match=r"--fleet 'batch': no polls between .* holds it from"):
        open_replay(two_fleets, ["batch"], start=T0, end=T0 + 60.0)


@pytest.mark.parametrize(
    "fleets, start, end, expected",
    [
        (["nope"], None, None, r"--fleet 'nope': not recorded in .*history.sqlite; expected one of assistant, batch"),
        (None, T0 + 5000.0, None, r"no polls between .*; recorded: assistant .* to .*; batch"),
        (None, T0 + 100.0, T0, r"--from .* is after --to .*; expected --from before --to"),
    ],
)
def test_what_cannot_be_replayed_is_said_in_one_line(two_fleets, fleets, start, end, expected):
    with pytest.raises(UserError, match=expected) as caught:
        open_replay(two_fleets, fleets, start, end)
    assert "\n" not in str(caught.value)


def test_a_missing_file_or_a_foreign_one_is_one_line(tmp_path):
    with pytest.raises(UserError, match="no such history file"):
        open_replay(tmp_path / "missing.sqlite")
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(UserError, match="not a capcon history"):
        open_replay(other)
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, " * 100)
    with pytest.raises(UserError, match="not an SQLite file"):
        open_replay(text)


def test_a_file_with_fleets_but_no_polls_says_so(tmp_path):
    from console.store.database import Store

    path = tmp_path / "empty.sqlite"
    store = Store.open(path)
    store.write_event(T0, "recording_started", fleet="assistant")
    store.close()
    with pytest.raises(UserError, match="no polls recorded yet"):
        open_replay(path)


def test_the_first_view_of_a_replay_is_the_view_at_its_start(two_fleets):
    controller, frame = first_view(two_fleets, start=T0 + 300.0)
    try:
        assert frame.at == T0 + 300.0
        assistant, batch = frame.views
        assert assistant.now == T0 + 300.0 and batch.now <= T0 + 300.0
        assert frame.computed == 61 + 91  # each fleet from its first poll: the warm-up reaches back past both starts
    finally:
        controller.replay.close()


def test_a_plan_recorded_without_a_capacity_is_read_with_the_estimate_the_command_hands_down(tmp_path):
    path = tmp_path / "unmeasured.sqlite"
    record_synthetic(path, 30.0, replicas=1, interval=5.0, keep_views=False)
    with sqlite3.connect(path) as db:  # the plan as a team that never measured its replica writes it
        (text,) = db.execute("SELECT text FROM plans").fetchone()
        unmeasured = re.sub(r"\ncapacity:\n(?:[ #].*\n)+", "\n", text)
        assert "rps_per_replica" not in unmeasured
        db.execute("UPDATE plans SET text = ?", (unmeasured,))
    db.close()
    asked = []

    def estimate(draft):
        asked.append(draft.name)
        return Capacity(4.0, ESTIMATED, note="the command's estimate")

    replay = open_replay(path)
    try:
        assert replay.fleets[0].first_plan() is None  # no estimate handed down: replayed without a plan
    finally:
        replay.close()
    replay = open_replay(path, estimate=estimate)
    try:
        plan = replay.fleets[0].first_plan()
        assert plan is not None and plan.capacity.rps_per_replica == 4.0 and plan.capacity.estimated
        assert asked == ["internal-assistant-18rps"]
    finally:
        replay.close()
