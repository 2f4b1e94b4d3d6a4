"""The overflow panel's words and the switch suggestion (console/fleet/overflow.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from console.fleet.flags import Flag
from console.fleet.overflow import panel_lines, policy_words, suggestion
from console.metrics.figures import FLEET_TOTAL
from console.metrics.gateway import MIXED, GatewayFigures, PolicyInForce

from .builders import plan_now, replica


def flag(kind: str) -> Flag:
    return Flag(f"{kind}:{FLEET_TOTAL}", kind, FLEET_TOTAL, "critical", 0.0, "why", "do")


def test_unknown_is_a_question_mark_never_zero():
    down = GatewayFigures("g", 0.0, 0, 1, error="cannot connect")
    lines = panel_lines(down, None, None)
    assert "unknown" in lines[0].text and lines[0].style == "unknown"
    assert all("0/s" not in line.text for line in lines)
    assert "cannot connect" in lines[1].text
    assert "no gateway watched" in panel_lines(None, None, None)[0].text


def test_figures_each_line_fits_the_right_column_at_80():
    g = GatewayFigures(
        "g",
        1.0,
        1,
        1,
        admitted_per_second=123.4,
        rejected_per_second=45.6,
        timed_out_per_second=7.8,
        deferred_per_second=0.0,
        hosted_per_second=12.3,
        queue_length=1234,
        queue_wait_p95_seconds=2.5,
        hosted_dollars_per_hour=1234.5,
    )
    lines = panel_lines(g, None, None)
    assert [line.text.split(" ")[0] for line in lines] == ["admitted", "429", "hosted"]
    assert lines[1].style == "warning"  # refusals are news
    assert all(len(line.text) <= 40 for line in lines), [line.text for line in lines]
    assert "$1,234/h" in lines[2].text and "+1 replica $?/h" in lines[2].text  # no plan: its cost unknown


def test_gateways_that_disagree_or_are_missing_are_said():
    base = GatewayFigures("g", 1.0, 2, 2, policy=PolicyInForce(MIXED, "", False, None, None), modes=("pass", "hosted"))
    assert any("disagree" in line.text and line.style == "critical" for line in panel_lines(base, None, None))
    missing = replace(base, answering=1, gateways=2)
    assert any("1 of 2 gateways not answering" in line.text for line in panel_lines(missing, None, None))


@pytest.mark.parametrize(
    "policy, words",
    [
        (PolicyInForce("bounded_queue", "plan", True, 5.0, None), "bounded queue (plan)"),
        (PolicyInForce("hosted", "alice", False, 3600.0, 5400.0), "hosted by alice 01:00 until 01:30"),
        (PolicyInForce(MIXED, "", False, None, None), "MIXED"),
        (None, "?"),
    ],
)
def test_policy_words(policy, words):
    assert policy_words(policy) == words


PLANNED = plan_now(planned_load_rps=10.0, overflow_mode="bounded_queue", gpus_per_replica=2, gpu_price_per_hour=2.5)


@pytest.mark.parametrize(
    "flags, load, policy, expected",
    [
        ((flag("saturation"),), 12.0, PolicyInForce("pass", "demo", False, 1.0, None), True),
        ((flag("slo_breach_ttft"),), 12.0, None, True),
        ((flag("saturation"),), 9.0, None, False),  # under the plan: a saturated replica is not an overflow
        ((flag("replica_down"),), 12.0, None, False),  # the wrong kind of trouble
        ((), 12.0, None, False),  # a condition still pending is not a flag
        ((flag("saturation"),), 12.0, PolicyInForce("bounded_queue", "plan", True, 1.0, None), False),  # in force
        ((flag("saturation"),), None, None, False),  # load unknown
    ],
)
def test_the_suggestion_comes_with_an_active_flag_and_load_over_the_plan(flags, load, policy, expected):
    said = suggestion(flags, replica("fleet", requests_per_second=load), PLANNED, policy)
    assert (said is not None) is expected
    if expected:
        assert "plan says bounded queue" in said and "m to switch" in said
        assert len(said) <= 40


def test_no_plan_no_suggestion_and_the_replica_cost_comes_from_the_plan():
    assert suggestion((flag("saturation"),), replica("fleet", requests_per_second=99.0), None, None) is None
    g = GatewayFigures("g", 1.0, 1, 1, admitted_per_second=1.0)
    assert "+1 replica $5.00/h" in panel_lines(g, PLANNED, None)[2].text


def test_a_switch_seen_on_the_gateways_is_a_note_and_no_change_is_none():
    # Telling a switch asked in the console from others' is the session's (tests/live/test_switch_session.py).
    from console.fleet.overflow import SwitchNote, note_line, seen_switch

    plan_policy = PolicyInForce("bounded_queue", "plan", True, 100.0, None)
    bobs = PolicyInForce("pass", "bob", False, 200.0, None)
    note = seen_switch(plan_policy, bobs)
    assert note == SwitchNote(200.0, "pass", "bob")
    assert seen_switch(bobs, bobs) is None  # nothing changed
    asked = SwitchNote(201.0, "pass", "bob", "spike", "1 of 1 applied")
    expired = PolicyInForce("bounded_queue", "plan", True, 1900.0, None)
    assert seen_switch(bobs, expired).actor == "plan (expiry)"
    assert seen_switch(None, bobs) is None  # the first look is not a switch
    assert note_line(asked) == "⇄ 00:03 pass by bob: spike (1 of 1 applied)"
