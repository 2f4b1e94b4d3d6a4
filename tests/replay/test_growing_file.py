"""Replaying a file a recorder is still writing: the end, a go-to past it and play at it read the polls written since."""

from __future__ import annotations

import pytest

from console.replay.controller import END_WORDS, ReplayController
from console.replay.loader import open_replay, shown_time
from console.store.database import Store
from console.store.recorder import STARTED, STOPPED
from tests.replay.recording import T0, Incident, record_synthetic

QUIET = Incident(down_replica=None, queue_replica=None)


class Wall:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def growing(tmp_path):
    """Two minutes recorded, a replay opened on it while a writer holds the file open (as `capcon record` does)."""
    path = tmp_path / "history.sqlite"
    first = record_synthetic(path, 120.0, replicas=2, interval=5.0, incident=QUIET, keep_views=False, plan_path=None)
    writer = Store.open(path)  # keeps the write-ahead log in use, as a running recorder does
    replay = open_replay(path)
    wall = Wall()
    controller = ReplayController(replay, playing=False, wall=wall)
    controller.wall = wall
    controller.open()

    def write_more(seconds: float, start: float) -> None:
        """More polls, written by Store.write_poll while the replay is open."""
        record_synthetic(
            path, seconds, interval=5.0, incident=QUIET, keep_views=False, plan_path=None, start=start, carry_on=first
        )

    yield controller, writer, write_more
    replay.close()
    writer.close()


def test_end_reads_the_polls_written_since_the_replay_opened(growing):
    controller, _, write_more = growing
    frame = controller.to_end()
    assert frame.at == T0 + 120.0 and frame.ended
    assert (
        frame.note
        == f"{END_WORDS} (last poll {shown_time(T0 + 120.0)[-8:]}; the recorder may still be writing: press End again to catch up)"
    )
    write_more(60.0, T0 + 125.0)
    frame = controller.to_end()
    assert frame.at == T0 + 185.0 and frame.views[0].now == T0 + 185.0
    assert "last poll " + shown_time(T0 + 185.0)[-8:] in frame.note
    assert controller.step(-1).views[0].now == T0 + 180.0


def test_a_go_to_past_the_indexed_end_lands_on_the_new_polls(growing):
    controller, _, write_more = growing
    write_more(60.0, T0 + 125.0)
    frame = controller.seek(T0 + 150.0)
    assert frame.at == T0 + 150.0 and frame.views[0].now == T0 + 150.0 and frame.note == ""
    frame = controller.seek(T0 + 1000.0)
    assert frame.at == T0 + 185.0
    assert (
        frame.note
        == f"the recording ends at {shown_time(T0 + 185.0)} so far (the recorder may still be writing: press End to catch up)"
    )


def test_a_jump_and_a_step_past_the_indexed_end_read_the_new_polls(growing):
    controller, _, write_more = growing
    controller.seek(T0 + 100.0)
    write_more(60.0, T0 + 125.0)
    assert controller.jump(60.0).views[0].now == T0 + 160.0
    controller.seek(T0 + 120.0)
    write_more(10.0, T0 + 190.0)
    controller.to_end()
    frame = controller.step(1)
    assert frame.ended and frame.at == T0 + 200.0  # nothing after the last poll: it stays and says so


def test_playing_into_the_end_plays_on_through_new_polls(growing):
    controller, _, write_more = growing
    controller.seek(T0 + 119.0)
    controller.toggle()
    write_more(30.0, T0 + 125.0)
    controller.wall.now += 1.0
    frame = controller.tick()
    assert frame.playing and not frame.ended and frame.at == T0 + 120.0
    controller.set_speed(8.0)
    controller.wall.now += 1.0
    frame = controller.tick()
    assert frame.playing and frame.at == T0 + 128.0 and frame.views[0].now == T0 + 125.0


def test_space_at_the_end_plays_the_new_polls_rather_than_the_start(growing):
    controller, _, write_more = growing
    controller.to_end()
    write_more(30.0, T0 + 125.0)
    frame = controller.toggle()
    assert frame.playing and frame.at == T0 + 120.0
    controller.wall.now += 1.0
    assert controller.tick().at == T0 + 121.0
    controller.to_end()
    frame = controller.toggle()  # nothing new since: play again from the start, as before
    assert frame.playing and frame.at == T0


def test_a_recording_that_says_it_stopped_ends_plainly(growing):
    controller, writer, _ = growing
    writer.write_event(T0 + 121.0, STOPPED, detail={"pid": 1})
    frame = controller.to_end()
    assert frame.note == END_WORDS
    assert controller.seek(T0 + 1000.0).note == f"the recording ends at {shown_time(T0 + 120.0)}"


def test_another_recorder_stopping_does_not_end_a_fleet_still_being_recorded(growing):
    controller, writer, _ = growing
    writer.write_event(T0 + 1.0, STARTED, detail={"pid": 7, "host": "a", "fleets": ["assistant"]})
    writer.write_event(T0 + 2.0, STARTED, detail={"pid": 8, "host": "a", "fleets": ["batch"]})
    writer.write_event(T0 + 121.0, STOPPED, detail={"pid": 8, "host": "a"})  # batch's recorder, not assistant's
    assert "the recorder may still be writing" in controller.to_end().note
    writer.write_event(T0 + 122.0, STOPPED, detail={"pid": 7, "host": "a"})
    assert controller.to_end().note == END_WORDS


def test_a_recorder_started_later_begins_a_new_run_in_the_polls_read(growing):
    controller, writer, write_more = growing
    fleet = controller.replay.fleets[0]
    before = len(fleet.times)
    writer.write_event(T0 + 124.0, STARTED, fleet="assistant", detail={"pid": 2})
    write_more(20.0, T0 + 125.0)
    controller.to_end()
    assert len(fleet.times) == before + 5
    assert before in fleet.session_starts and fleet.session_start(len(fleet.times) - 1) == before
    # The new run starts empty: its first view holds one trend point, not the two minutes before it.
    assert len(controller.seek(T0 + 125.0).views[0].trends.points) == 1
    assert len(controller.step(-1).views[0].trends.points) > 1


def test_a_replay_given_an_end_reads_nothing_past_it(tmp_path):
    path = tmp_path / "history.sqlite"
    first = record_synthetic(path, 60.0, replicas=2, interval=5.0, incident=QUIET, keep_views=False, plan_path=None)
    writer = Store.open(path)
    replay = open_replay(path, end=T0 + 70.0)
    try:
        controller = ReplayController(replay, playing=False)
        controller.open()
        record_synthetic(
            path, 60.0, interval=5.0, incident=QUIET, keep_views=False, plan_path=None, start=T0 + 65.0, carry_on=first
        )
        assert controller.to_end().at == T0 + 70.0
        assert controller.seek(T0 + 100.0).at == T0 + 70.0
    finally:
        replay.close()
        writer.close()
