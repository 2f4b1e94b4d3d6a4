"""A plan whose per-replica capacity is the planner's estimate: the console says so wherever it counts."""

from __future__ import annotations

from console.fleet.flags import FlagInputs, Thresholds, readings
from console.fleet.view import compare

from .builders import fleet, plan_now, replica


def _notes(plan):
    figures = fleet(replica("r1", requests_per_second=1.0), requests_per_second=1.0)
    return {c.label: c.note for c in compare(figures, plan)}


def test_the_capacity_rows_mark_an_estimate_and_only_an_estimate():
    estimated, measured = _notes(plan_now(capacity_estimated=True)), _notes(plan_now())
    assert "~" in estimated["load/sched cap"] and "(capacity estimated, not measured)" in estimated["load/sched cap"]
    assert "x ~" in next(note for label, note in estimated.items() if label.startswith("load/up-"))
    assert "~" not in measured["load/sched cap"] and "estimated" not in measured["load/sched cap"]


def test_the_load_flag_says_its_capacity_is_estimated():
    plan = plan_now(capacity_estimated=True)
    busy = fleet(replica("r1", requests_per_second=500.0), requests_per_second=500.0)
    (above,) = [r for r in readings(FlagInputs(busy, plan), Thresholds()) if r.kind == "above_plan"]
    assert above.raise_ and " estimated)" in above.why
    (measured,) = [r for r in readings(FlagInputs(busy, plan_now()), Thresholds()) if r.kind == "above_plan"]
    assert "estimated" not in measured.why
