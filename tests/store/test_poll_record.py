"""What one poll stores: a figure source's figures, the plan version in force, flag changes with figures."""

from __future__ import annotations

import json
import math

import pytest

from console.fleet.flags import Thresholds
from console.fleet.view import advance
from console.live.feed import poll_record
from console.plan.schema import load_plan, parse_plan
from console.store.database import Store
from tests.fleet.builders import fleet, plan_now, replica
from tests.live.polls import figure_poll


def test_a_figure_source_poll_comes_back_as_the_same_figures(tmp_path):
    figures = fleet(
        replica(
            "r1",
            requests_per_second=2.5,
            kv_usage=0.93,
            kv_usage_by_engine={"0": 0.91, "1": 0.93},
            ttft_p95_seconds=None,
        ),
        replica("r2", state="stale", error="Prometheus last scraped it 95 s ago", data_age_seconds=95.0),
        at=5000.0,
        source_error="",
        requests_per_second=2.5,
        ttft_p95_seconds=0.8,
    )
    view = advance(None, "f", figures, None, 5000.5)
    store = Store.open(tmp_path / "h.sqlite")
    poll_id = store.write_poll(poll_record("f", figure_poll(view, 15.0), None, view, None))
    back = Store.open(tmp_path / "h.sqlite", read_only=True).poll(poll_id)
    assert back.results is None
    assert back.figures == figures
    assert (back.at, back.watched_at, back.window_seconds, back.interval_seconds) == (5000.5, 5000.5, 300.0, 15.0)


def test_the_plan_in_force_is_stored_once_per_version(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    plan = load_plan("plans/chat-8b-l40s.yaml")
    edited = parse_plan(plan.source_text.replace("redundancy: 1", "redundancy: 2"), "plans/chat-8b-l40s.yaml")
    assert edited.redundancy == 2, "the edit must change the plan for this test to mean anything"
    view = advance(None, "f", fleet(replica("r1"), at=10.0), None, 10.0)
    ids = []
    for at, version in [(10.0, plan), (11.0, plan), (12.0, edited), (13.0, plan)]:
        poll = store.write_poll(poll_record("f", figure_poll(view, 1.0), None, view, version, plan_clock=at + 3600))
        ids.append(store.poll(poll).plan_id)
    assert ids[0] == ids[1] == ids[3] != ids[2]
    stored = store.plan_version(ids[2])
    assert parse_plan(stored.text, stored.path).redundancy == 2
    assert store.poll(poll).plan_clock == 13.0 + 3600


def test_flag_changes_are_stored_with_the_subjects_figures(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    t = Thresholds()
    previous = None
    for now, waiting in [(0.0, 4.0), (30.0, 4.0), (45.0, 0.2)]:
        view = advance(
            previous, "f", fleet(replica("r1", waiting=waiting), at=now, waiting=waiting), plan_now(), now, t
        )
        store.write_poll(poll_record("f", figure_poll(view, 15.0), previous, view, None))
        previous = view
    events = [(e.at, e.change, e.flag_id) for e in store.flag_events("f")]
    assert ("raised", "saturation:r1") in [(c, i) for _, c, i in events]
    raised = next(e for e in store.flag_events("f") if e.flag_id == "saturation:r1" and e.change == "raised")
    cleared = next(e for e in store.flag_events("f") if e.flag_id == "saturation:r1" and e.change == "cleared")
    assert (raised.at, cleared.at) == (30.0, 45.0)
    assert raised.figures["waiting"] == 4.0 and cleared.figures["waiting"] == 0.2
    assert raised.since == 0.0 and "wait" in raised.why.lower()


def test_events_sit_beside_the_polls(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    store.write_event(
        100.0, "policy_switched", fleet="f", subject="overflow", detail={"from": "bounded_queue", "to": "hosted"}
    )
    store.write_event(50.0, "recording_started", detail={"pid": 1})
    events = store.events()
    assert [(e.at, e.kind, e.fleet) for e in events] == [
        (50.0, "recording_started", None),
        (100.0, "policy_switched", "f"),
    ]
    assert events[1].detail == {"from": "bounded_queue", "to": "hosted"}
    assert store.events(start=60.0)[0].kind == "policy_switched"


@pytest.mark.parametrize(
    "value, stored", [(math.inf, None), (-math.inf, None), (math.nan, None), (0.0, 0.0), (1e-12, 1e-12)]
)
def test_odd_figures_survive_json_and_impossible_ones_come_back_unknown(tmp_path, value, stored):
    figures = fleet(replica("r1", ttft_p99_seconds=value), at=1.0)
    view = advance(None, "f", figures, None, 1.0)
    store = Store.open(tmp_path / "h.sqlite")
    poll_id = store.write_poll(poll_record("f", figure_poll(view, 1.0), None, view, None))
    assert store.poll(poll_id).figures.replicas[0].ttft_p99_seconds == stored
    (text,) = store.connection.execute("SELECT figures FROM polls WHERE id = ?", (poll_id,)).fetchone()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} stored"))  # strict JSON in the file
