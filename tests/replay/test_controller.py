"""The replay clock: play at a speed, pause, step, jump, go to a time, and stop at the end."""

from __future__ import annotations

import pytest

from console.replay.controller import END_WORDS, MAX_SPEED, MIN_SPEED, ReplayController
from console.replay.loader import open_replay
from tests.replay.recording import T0, record_synthetic


class Wall:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("controller") / "history.sqlite"
    record_synthetic(path, 600.0, replicas=2, interval=5.0, fleet="assistant", keep_views=False)
    record_synthetic(
        path, 300.0, replicas=2, interval=2.0, fleet="batch", start=T0 + 121.0, plan_path=None, keep_views=False
    )
    return path


@pytest.fixture
def controller(history):
    replay = open_replay(history)
    wall = Wall()
    control = ReplayController(replay, playing=False, wall=wall)
    control.wall = wall
    control.open()
    yield control
    replay.close()


def test_playing_moves_the_clock_by_wall_time_times_the_speed(controller):
    wall = controller.wall
    controller.toggle()
    wall.now += 0.25
    frame = controller.tick()
    assert frame.at == T0 + 0.25 and frame.playing
    controller.set_speed(2.0)
    controller.set_speed(2.0)
    wall.now += 0.5
    frame = controller.tick()
    assert frame.at == T0 + 0.25 + 0.5 * 4
    assert frame.views[0].now == T0  # the next poll is at +5 s: still the first one on screen
    wall.now += 1.0
    frame = controller.tick()
    assert frame.views[0].now == T0 + 5.0
    controller.toggle()
    wall.now += 10.0
    assert controller.tick() is None and controller.at == frame.at


def test_a_stalled_console_does_not_fling_the_clock_ahead(controller):
    controller.toggle()
    controller.wall.now += 3600.0
    assert controller.tick().at == T0 + 1.0


def test_speed_stays_within_its_bounds_and_says_so(controller):
    for _ in range(12):
        frame = controller.set_speed(2.0)
    assert frame.speed == MAX_SPEED and "stays ×64" in frame.note
    for _ in range(12):
        frame = controller.set_speed(0.5)
    assert frame.speed == MIN_SPEED and "stays ×0.25" in frame.note


def test_a_step_goes_to_the_next_poll_of_whichever_fleet_polls_next(controller):
    controller.seek(T0 + 120.0)
    times = [controller.step(1).at for _ in range(4)]
    assert times == [T0 + 121.0, T0 + 123.0, T0 + 125.0, T0 + 127.0]
    frame = controller.step(-1)
    assert frame.at == T0 + 125.0 and not frame.playing
    assert frame.views[0].now == T0 + 125.0 and frame.views[1].now == T0 + 125.0
    frame = controller.step(-1)
    assert frame.views[0].now == T0 + 120.0 and frame.views[1].now == T0 + 123.0


def test_before_a_fleet_was_recorded_it_has_no_view(controller):
    frame = controller.seek(T0 + 60.0)
    assert frame.views[0] is not None and frame.views[1] is None


def test_jumps_and_seeks_stay_inside_the_recording(controller):
    frame = controller.jump(-600.0)
    assert frame.at == T0 and "starts at" in frame.note
    frame = controller.seek(T0 + 10_000.0)
    assert frame.at == T0 + 600.0 and "ends at" in frame.note
    assert controller.step(-1).at == T0 + 595.0
    assert controller.jump(-60.0).at == T0 + 535.0


def test_playing_to_the_end_pauses_and_says_so(controller):
    controller.seek(T0 + 599.0)
    controller.toggle()
    controller.wall.now += 1.0
    frame = controller.tick()
    assert frame.at == T0 + 600.0 and not frame.playing and frame.ended and frame.note.startswith(END_WORDS)
    assert controller.step(1).note.startswith(END_WORDS)
    frame = controller.toggle()  # play again: from the start
    assert frame.at == T0 and frame.playing


def test_the_header_words_carry_the_moment_speed_and_state(controller):
    from console.replay.loader import shown_time

    controller.seek(T0 + 90.0)
    controller.set_speed(4.0)
    assert controller.words() == f"{shown_time(T0 + 90.0)} ×4 ‖"
    controller.toggle()
    assert controller.words().endswith("×4 ▶")


@pytest.fixture(scope="module")
def jittered(tmp_path_factory):
    """Polls every 5 s, each late by a fraction of a second: as a live poll loop takes them."""
    path = tmp_path_factory.mktemp("jittered") / "history.sqlite"
    return record_synthetic(path, 120.0, replicas=2, interval=5.0, keep_views=False, plan_path=None, jitter=0.9)


def test_going_to_a_second_shows_the_poll_taken_in_it_and_a_step_moves_to_the_next(jittered):
    import math

    from console.replay.loader import shown_time

    replay = open_replay(jittered.path)
    try:
        controller = ReplayController(replay, playing=False, wall=Wall())
        controller.open()
        times = jittered.times
        taken = times[10]
        second = math.floor(taken)
        assert second != taken  # the poll came a fraction of a second into the second typed
        frame = controller.seek(second)  # `g HH:MM:SS` of that poll
        assert frame.views[0].now == taken and frame.at == taken and frame.views[0].data_age_seconds < 1.0
        assert shown_time(frame.at) == shown_time(second)
        frame = controller.step(1)
        assert frame.views[0].now == times[11] and shown_time(frame.at) != shown_time(second)
        # A second with no poll in it: the clock stays there, on the poll before it.
        frame = controller.seek(second + 2.0)
        assert frame.at == second + 2.0 and frame.views[0].now == taken
        assert controller.step(1).views[0].now == times[11]
        assert controller.step(-1).views[0].now == taken
    finally:
        replay.close()
