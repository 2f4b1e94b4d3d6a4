"""Replaying recorded polls rebuilds the very views the live console built: flags, pending flags, trends, figures."""

from __future__ import annotations

import pytest

from console.fleet.view import advance
from console.live.feed import poll_record
from console.replay.fleet_replay import KEYFRAME_EVERY, WARMUP_SECONDS, FleetReplay
from console.replay.loader import open_replay
from console.store.database import Store
from tests.fleet.builders import fleet, replica
from tests.live.polls import figure_poll


@pytest.fixture
def opened(request):
    recorded = request.getfixturevalue(request.param)
    replay = open_replay(recorded.path)
    yield recorded, replay
    replay.close()


@pytest.mark.parametrize("opened", ["incident"], indirect=True)
def test_every_poll_replayed_in_order_gives_the_live_view(opened):
    recorded, replay = opened
    fleet_replay = FleetReplay(replay.fleets[0])
    flagged = 0
    for index, live in enumerate(recorded.views):
        fleet_replay.go_to(index)
        assert fleet_replay.view == live, f"poll {index} at +{recorded.times[index] - recorded.times[0]:.0f} s differs"
        flagged += bool(live.flags)
    assert flagged > 10, "the incident must raise flags for this test to mean anything"


@pytest.mark.parametrize("opened", ["incident"], indirect=True)
def test_the_recorded_flag_events_are_the_replayed_raise_and_clear_moments(opened):
    recorded, replay = opened
    fleet_replay = FleetReplay(replay.fleets[0])
    replayed, before = [], set()
    for index in range(len(recorded.times)):
        fleet_replay.go_to(index)
        ids = {f.id for f in fleet_replay.view.flags}
        replayed += [(recorded.times[index], "cleared", i) for i in before - ids]
        replayed += [(recorded.times[index], "raised", i) for i in ids - before]
        before = ids
    stored = [(e.at, e.change, e.flag_id) for e in replay.store.flag_events(recorded.fleet)]
    assert sorted(stored) == sorted(replayed)
    assert ("cleared", "replica_down:replica-1") in {(c, i) for _, c, i in stored}


@pytest.mark.parametrize("opened", ["incident"], indirect=True)
def test_stepping_back_restores_what_was_shown(opened):
    recorded, replay = opened
    fleet_replay = FleetReplay(replay.fleets[0])
    fleet_replay.go_to(100)
    for index in (99, 98, 70, 100, 61):
        computed = fleet_replay.go_to(index)
        assert computed <= KEYFRAME_EVERY, "a step back restores a keyframe, it does not warm up again"
        assert fleet_replay.view == recorded.views[index]


@pytest.mark.parametrize("opened", ["planless"], indirect=True)
def test_a_seek_warms_up_and_then_steps_like_a_full_replay(opened):
    recorded, replay = opened
    start = recorded.times[0]
    for target in (
        600.0,
        1000.0,
        1400.0,
        1900.0,
    ):  # before, around and after the incident, and one inside the first warm-up
        index = recorded.times.index(start + target)
        fleet_replay = FleetReplay(replay.fleets[0])
        computed = fleet_replay.go_to(index)
        assert computed == len(
            [t for t in recorded.times if recorded.times[index] - WARMUP_SECONDS <= t <= recorded.times[index]]
        )
        for following in range(index, min(index + 40, len(recorded.times))):
            fleet_replay.go_to(following)
            assert fleet_replay.view == recorded.views[following], f"seek to +{target:.0f} s, then poll {following}"


@pytest.mark.parametrize("opened", ["incident"], indirect=True)
def test_after_a_seek_a_flag_older_than_the_warm_up_shows_a_later_since(opened):
    # What differs after a seek: a condition that held since before the warm-up began (here the plan's
    # schedule asks for more replicas than the fleet has, all along) is seen from the warm-up start.
    recorded, replay = opened
    index = recorded.times.index(recorded.times[0] + 1500.0)
    fleet_replay = FleetReplay(replay.fleets[0])
    fleet_replay.go_to(index)
    live, seen = recorded.views[index], fleet_replay.view
    assert [f.id for f in seen.flags] == [f.id for f in live.flags]
    assert seen.figures == live.figures and seen.trends == live.trends
    older = [f for f in live.flags if f.since < recorded.times[index] - WARMUP_SECONDS]
    assert older, "the recording must hold a flag older than the warm-up for this test to mean anything"
    for flag in older:
        again = next(f for f in seen.flags if f.id == flag.id)
        assert again.since >= recorded.times[index] - WARMUP_SECONDS > flag.since


def test_figure_source_polls_replay_their_stored_figures(tmp_path):
    path = tmp_path / "history.sqlite"
    store = Store.open(path)
    previous, live = None, []
    for step, waiting in enumerate([0.0, 4.0, 4.0, 4.0, 0.0]):
        at = 10_000.0 + 15.0 * step
        figures = fleet(
            replica("r1", waiting=waiting),
            replica("r2", state="stale", data_age_seconds=40.0),
            at=at - 3.0,
            waiting=waiting,
        )
        view = advance(previous, "prom", figures, None, at)
        store.write_poll(poll_record("prom", figure_poll(view, 15.0), previous, view, None))
        previous = view
        live.append(view)
    store.close()
    replay = open_replay(path)
    try:
        fleet_replay = FleetReplay(replay.fleets[0])
        for index, view in enumerate(live):
            fleet_replay.go_to(index)
            assert fleet_replay.view.figures == view.figures
            assert [f.id for f in fleet_replay.view.flags] == [f.id for f in view.flags]
            assert [p.id for p in fleet_replay.view.pending] == [p.id for p in view.pending]
        assert "saturation:r1" in {f.id for v in live for f in v.flags}
    finally:
        replay.close()


def test_a_new_console_run_starts_from_nothing_as_it_did_live(tmp_path):
    from tests.replay.recording import T0, Incident, record_synthetic

    path = tmp_path / "history.sqlite"
    quiet = Incident(down_replica=None, queue_replica=None)
    first = record_synthetic(path, 300.0, replicas=2, interval=5.0, incident=quiet)
    store = Store.open(path)
    store.write_event(T0 + 301.0, "recording_stopped")
    store.write_event(T0 + 309.0, "recording_started", detail={"pid": 2})
    store.close()
    second = record_synthetic(path, 200.0, replicas=2, interval=5.0, start=T0 + 310.0, seed=2, incident=quiet)
    # Another recorder starting while this console polls on (no stop, no gap) is not a new run.
    store = Store.open(path)
    store.write_event(T0 + 402.0, "recording_started", fleet="other", detail={"pid": 3})
    store.close()
    replay = open_replay(path)
    try:
        fleet_replay = FleetReplay(replay.fleets[0])
        live = first.views + second.views
        assert live[len(first.views)].trends.points[0].at == T0 + 310.0 - 0.05, "the second run's trends start afresh"
        for index, view in enumerate(live):
            fleet_replay.go_to(index)
            assert fleet_replay.view == view, f"poll {index}"
        # A seek into the second run warms up from its start only, and still shows the live view.
        fleet_replay = FleetReplay(replay.fleets[0])
        target = len(first.views) + 10
        assert fleet_replay.go_to(target) == 11
        assert fleet_replay.view == live[target]
    finally:
        replay.close()


@pytest.mark.parametrize("opened", ["planless"], indirect=True)
def test_back_and_forth_many_times_always_shows_the_views_of_that_moment(opened):
    # Warm-ups, keyframes from an older chain, steps back and forth over the incident (+1200 s to +1600 s).
    recorded, replay = opened
    fleet_replay = FleetReplay(replay.fleets[0])
    for index in (260, 230, 250, 200, 259, 10, 0, 330, 320, 480, 300, 241, 242, 239):
        fleet_replay.go_to(index)
        assert fleet_replay.view == recorded.views[index], f"poll {index}"


@pytest.mark.parametrize("opened", ["planless"], indirect=True)
def test_stepping_back_after_a_seek_is_quick_and_still_shows_the_full_replays_views(opened):
    recorded, replay = opened
    fleet_replay = FleetReplay(replay.fleets[0])
    target = recorded.times.index(recorded.times[0] + 1400.0)
    fleet_replay.go_to(target)
    for index in range(target - 1, target - 25, -1):  # two minutes back, one poll at a time
        assert fleet_replay.go_to(index) <= KEYFRAME_EVERY
        assert fleet_replay.view == recorded.views[index], f"poll {index}"


def test_a_seek_shows_the_live_view_when_polls_are_closer_than_a_ring_step(tmp_path):
    # A 1-s poll loop that sleeps a second after each poll: polls 1.02 s apart, a 60-s window keeps every other one.
    from tests.replay.recording import Incident, record_synthetic

    path = tmp_path / "history.sqlite"
    quiet = Incident(down_replica=None, queue_replica=None)
    recorded = record_synthetic(path, 1000.0, replicas=2, interval=1.02, plan_path=None, incident=quiet)
    replay = open_replay(path)
    try:
        for target in (940, 941):  # warm-ups that start one poll apart
            fleet_replay = FleetReplay(replay.fleets[0])
            assert fleet_replay.go_to(target) < target
            assert fleet_replay.view == recorded.views[target], f"seek to poll {target}"
    finally:
        replay.close()
