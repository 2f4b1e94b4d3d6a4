"""A jump that carries on from a stored checkpoint shows what the live console showed at that poll.

Recorded through the live pipeline with the state the poll feed hands the recorder every
CHECKPOINT_POLLS polls; a file written before checkpoints (or by other flag rules) still
seeks, by warming up on the polls before the target as it always did.
"""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.replay.controller import ReplayController
from console.replay.fleet_replay import RESTORE_COST, WARMUP_SECONDS, FleetReplay
from console.replay.loader import open_replay
from console.store.checkpoints import CHECKPOINT_POLLS
from tests.replay.recording import Incident, record_synthetic


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """Half an hour of four replicas every 5 s with checkpoints: replica-1 down 300-900 s (longer than the warm-up
    remembers), replica-2 queueing 1000-1100 s."""
    return record_synthetic(
        tmp_path_factory.mktemp("checkpointed") / "history.sqlite",
        1800.0,
        replicas=4,
        interval=5.0,
        checkpoints=True,
        incident=Incident(down_from=300.0, down_until=900.0, queue_from=1000.0, queue_until=1100.0),
    )


@pytest.fixture
def replay(checkpointed):
    opened = open_replay(checkpointed.path)
    yield opened
    opened.close()


def test_a_jump_anywhere_shows_the_live_view_computing_at_most_a_checkpoint_apart(checkpointed, replay):
    (fleet,) = replay.fleets
    assert fleet.checkpoints == list(range(CHECKPOINT_POLLS - 1, len(fleet.times), CHECKPOINT_POLLS))
    flagged = 0
    for index in range(0, len(checkpointed.times), 7):
        fleet_replay = FleetReplay(fleet)
        computed = fleet_replay.go_to(index)
        # From the checkpoint before it, or from the run's start while that is as cheap as a restore.
        assert computed <= CHECKPOINT_POLLS + RESTORE_COST, f"poll {index}: {computed} polls computed"
        assert index < 2 * CHECKPOINT_POLLS + RESTORE_COST or computed <= CHECKPOINT_POLLS
        live = checkpointed.views[index]
        # Flags with their `since` as live, even for a condition older than a warm-up would reach.
        assert fleet_replay.view == live, f"poll {index} differs"
        flagged += bool(live.flags)
    assert flagged > 10, "the incident must raise flags for this test to mean anything"


def test_a_condition_held_longer_than_the_warm_up_keeps_its_since(checkpointed, replay):
    """replica-1 is down from 300 s to 900 s: at 850 s a warm-up starts at 0 s, a checkpoint knows 300 s."""
    (fleet,) = replay.fleets
    start = checkpointed.times[0]
    index = checkpointed.times.index(start + 850.0)
    fleet_replay = FleetReplay(fleet, warmup_seconds=300.0)  # a short warm-up: the checkpoint must win
    fleet_replay.go_to(index)
    down = [f for f in fleet_replay.view.flags if f.id == "replica_down:replica-1"]
    assert down and down[0].since == start + 300.0
    assert fleet_replay.view == checkpointed.views[index]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(targets=st.lists(st.floats(min_value=-60.0, max_value=1900.0), min_size=1, max_size=6))
def test_any_series_of_jumps_shows_what_playing_to_each_moment_shows(checkpointed, replay, targets):
    controller = ReplayController(replay, playing=False)
    start = checkpointed.times[0]
    for target in targets:
        frame = controller.seek(start + target)
        index = replay.fleets[0].index_at(frame.at)
        (view,) = frame.views
        if index < 0:
            assert view is None
            continue
        assert frame.computed <= CHECKPOINT_POLLS + RESTORE_COST
        assert view == checkpointed.views[index]


def test_stepping_back_after_a_restore_shows_the_live_views(checkpointed, replay):
    (fleet,) = replay.fleets
    fleet_replay = FleetReplay(fleet)
    fleet_replay.go_to(200)
    for index in (199, 180, 179, 150, 201, 121):
        fleet_replay.go_to(index)
        assert fleet_replay.view == checkpointed.views[index], index


def test_a_file_without_checkpoints_warms_up_as_before(tmp_path, checkpointed):
    """A version-3 file (written before checkpoints, read without migrating) seeks by warming up."""
    path = tmp_path / "old.sqlite"
    shutil.copy(checkpointed.path, path)
    connection = sqlite3.connect(path)
    connection.executescript("DROP TABLE checkpoints; PRAGMA user_version = 3;")
    connection.close()
    replay = open_replay(path)
    try:
        (fleet,) = replay.fleets
        assert fleet.checkpoints == []
        index = 250
        fleet_replay = FleetReplay(fleet)
        computed = fleet_replay.go_to(index)
        reach = [t for t in fleet.times if fleet.times[index] - WARMUP_SECONDS <= t <= fleet.times[index]]
        assert computed == len(reach)
        live = checkpointed.views[index]
        assert fleet_replay.view.figures == live.figures and fleet_replay.view.trends == live.trends
    finally:
        replay.close()


def test_checkpoints_of_other_rules_or_naming_lost_samples_are_not_used(tmp_path, checkpointed):
    path = tmp_path / "changed.sqlite"
    shutil.copy(checkpointed.path, path)
    connection = sqlite3.connect(path)
    first, second = [row[0] for row in connection.execute("SELECT poll_id FROM checkpoints ORDER BY at LIMIT 2")]
    connection.execute("UPDATE checkpoints SET format = 'other rules' WHERE poll_id = ?", (first,))
    # The second one names samples that retention (say) has since deleted.
    connection.execute("DELETE FROM samples WHERE poll_id = ?", (second - 3,))
    connection.commit()
    connection.close()
    replay = open_replay(path)
    try:
        (fleet,) = replay.fleets
        assert fleet.ids[fleet.checkpoints[0]] == second, "a checkpoint of other rules is not listed"
        index = fleet.ids.index(second) + 5
        fleet_replay = FleetReplay(fleet)
        computed = fleet_replay.go_to(index)
        assert computed == index + 1, "no usable checkpoint: computed from the run's start"
        fleet.checkpoints = []
        reference = FleetReplay(fleet)
        reference.go_to(index)
        assert fleet_replay.view == reference.view
    finally:
        replay.close()
