"""Flags and the view at fleet scale: built once per poll, and leaving out idle readings changes nothing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from console.fleet.flags import FlagInputs, FlagState, Thresholds, evaluate, readings, worst_by_subject
from console.fleet.view import advance
from console.metrics.figures import FLEET_TOTAL
from tests.fleet.builders import fleet, plan_now, replica

STATES = ("up", "down", "timeout", "stale", "restarted", "bad_payload")


def _replicas(spec: list[tuple[str, float, float]]):
    return [replica(f"r{i}", state=state, waiting=waiting, kv_usage=kv) for i, (state, waiting, kv) in enumerate(spec)]


poll = st.lists(
    st.tuples(st.sampled_from(STATES), st.sampled_from([0.0, 0.7, 3.0]), st.sampled_from([0.1, 0.88, 0.95])),
    min_size=0,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(poll, min_size=1, max_size=8), st.booleans())
def test_leaving_out_idle_readings_gives_the_state_every_reading_gives(polls, planned):
    """`evaluate` passes the tracked ids to `readings`; stepping every reading must end in the same trackers."""
    plan = plan_now() if planned else None
    t = Thresholds()
    fast, full = FlagState(), FlagState()
    for step, spec in enumerate(polls):
        now = 1000.0 + 15.0 * step
        inputs = FlagInputs(fleet(*_replicas(spec), at=now, requests_per_second=3.0), plan)
        fast = evaluate(fast, inputs, now, t)
        every = {r.id: r for r in readings(inputs, t)}  # tracked=None: nothing left out
        assert set(every) >= {r.id for r in readings(inputs, t, full.trackers)}
        full = _evaluate_every(full, every, now)
        assert fast.trackers == full.trackers


def _evaluate_every(state: FlagState, found: dict, now: float) -> FlagState:
    from console.fleet.flags import _step  # the state machine itself, fed every reading

    trackers = {}
    for flag_id in list(state.trackers) + [i for i in found if i not in state.trackers]:
        stepped = _step(state.trackers.get(flag_id), found.get(flag_id), now)
        if stepped is not None:
            trackers[flag_id] = stepped
    return FlagState(trackers)


def test_active_pending_and_worst_are_built_once_per_state():
    figures = fleet(*[replica(f"r{i}", waiting=5.0, kv_usage=0.95, preemptions_per_second=1.0) for i in range(50)])
    state = evaluate(FlagState(), FlagInputs(figures), 1000.0)
    state = evaluate(state, FlagInputs(figures), 1000.0 + 31)
    assert state.active is state.active  # cached: a screen reading it per row costs nothing more
    assert state.pending is state.pending
    assert len(state.active) == 50 and all(f.severity == "critical" for f in state.active)
    assert state.worst_active == {f"r{i}": "critical" for i in range(50)}
    assert state.worst_for("r7") == "critical" and state.worst_for("nobody") is None


def test_worst_by_subject_takes_the_worst_of_each_subject():
    figures = fleet(replica("a", state="stale", waiting=5.0), replica("b", state="down"))
    state = FlagState()
    for k in range(3):
        state = evaluate(state, FlagInputs(figures), 1000.0 + 31 * k)
    worst = worst_by_subject(state.active)
    assert worst == {"a": "warning", "b": "critical"}


def test_the_view_finds_rows_by_key_and_the_first_of_a_repeated_name():
    first, second = replica("dup", waiting=1.0), replica("dup", waiting=2.0)
    view = advance(None, "f", fleet(first, replica("x"), second), None, 1000.0)
    assert view.row("dup").figures is first
    assert view.row("x").key == "x" and view.row("missing") is None
    assert view.row(FLEET_TOTAL) is view.total


def test_each_plan_gets_its_own_saturation_advice_written_once():
    """The advice is the same words for every saturated replica of one plan, and follows a plan that changes."""
    t = Thresholds()
    replicas = [replica(f"r{i}", waiting=5.0, kv_usage=0.5) for i in range(3)]
    said = {}
    for label, plan in (
        ("a", plan_now(overflow_mode="degrade")),
        ("b", plan_now(overflow_mode="reject")),
        ("none", None),
    ):
        found = [r for r in readings(FlagInputs(fleet(*replicas), plan), t) if r.kind == "saturation"]
        assert len(found) == 3
        assert len({r.todo for r in found}) == 1
        assert found[0].todo is found[1].todo  # one string, not one per replica
        said[label] = found[0].todo
    assert len(set(said.values())) == 3
    assert "chosen in advance" in said["none"]
