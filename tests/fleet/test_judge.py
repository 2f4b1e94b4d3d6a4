"""Cells over their limit and the row's mark: the table never says "ok" while a figure is over its limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.fleet import judge
from console.fleet.flags import Thresholds
from console.fleet.view import advance
from tests.fleet.builders import PLAN_NOW, fleet, plan_now, replica

T = Thresholds()
LIMITS = judge.limits(PLAN_NOW, T)  # TTFT 1.5 s, TPOT 40 ms, no E2E target


@pytest.mark.parametrize(
    "values, over",
    [
        pytest.param({}, (), id="nothing known: nothing over"),
        pytest.param({"ttft_p95_seconds": 1.5}, (), id="TTFT at its target is not over"),
        pytest.param({"ttft_p95_seconds": 1.51}, (("ttft", "critical"),), id="TTFT just over"),
        pytest.param({"tpot_p95_seconds": 0.041}, (("tpot", "critical"),), id="TPOT over"),
        pytest.param({"itl_p95_seconds": 0.05}, (("tpot", "critical"),), id="ITL shown in the TPOT column is judged"),
        pytest.param({"itl_p95_seconds": 0.05, "tpot_p95_seconds": 0.03}, (), id="TPOT shown, not ITL"),
        pytest.param({"e2e_p95_seconds": 99.0}, (), id="no E2E target: never over"),
        pytest.param({"waiting": 0.9}, (), id="waiting under one"),
        pytest.param({"waiting": 1.0}, (("wait", "warning"),), id="one waiting"),
        pytest.param({"kv_usage": 0.899}, (), id="KV under 90%"),
        pytest.param({"kv_usage": 0.90}, (("kv", "warning"),), id="KV at 90%"),
        pytest.param({"preemptions_per_second": 0.0}, (), id="no preemptions"),
        pytest.param({"preemptions_per_second": 0.01}, (("preempt", "warning"),), id="any preemption"),
        pytest.param(
            {"ttft_p95_seconds": 9.8, "waiting": 24.0},
            (("ttft", "critical"), ("wait", "warning")),
            id="the demo spike: both",
        ),
    ],
)
def test_cells_over_their_limit(values, over):
    assert judge.over(replica(**values), LIMITS) == over


def test_without_a_plan_only_the_fixed_thresholds_are_judged():
    limits = judge.limits(None, T)
    assert {limit.column for limit in limits} == {"wait", "kv", "preempt"}
    assert judge.over(replica(ttft_p95_seconds=60.0, waiting=3.0), limits) == (("wait", "warning"),)
    assert "waiting ≥ 1" in judge.fixed_words(T) and "KV ≥ 90%" in judge.fixed_words(T)


def test_an_e2e_target_is_judged_when_the_plan_has_one():
    limits = judge.limits(plan_now(e2e_p95_target_seconds=20.0), T)
    assert judge.over(replica(e2e_p95_seconds=21.0), limits) == (("e2e", "critical"),)


@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True))
def test_judging_never_raises_and_nan_is_never_over(ttft, waiting):
    found = judge.over(replica(ttft_p95_seconds=ttft, waiting=waiting), LIMITS)
    assert all(column in ("ttft", "wait") for column, _ in found)
    if ttft != ttft:
        assert "ttft" not in dict(found)


def marks(*replicas, plan=PLAN_NOW, polls=1, step=10.0):
    view = None
    for i in range(polls):
        view = advance(
            view,
            "fleet",
            fleet(*replicas, at=1000.0 + i * step, ttft_p95_seconds=replicas[0].ttft_p95_seconds),
            plan,
            1000.0 + i * step,
        )
    return {row.key: row.mark for row in view.rows}, view


def test_a_row_over_its_target_reads_over_at_once_never_ok():
    found, view = marks(replica("a", ttft_p95_seconds=7.2), replica("b", ttft_p95_seconds=0.4))
    assert found == {"a": "over", "b": "ok"}
    assert view.total.mark == "pending"  # the fleet's SLO rule holds, inside its minimum duration


def test_a_row_whose_condition_is_inside_its_minimum_duration_reads_pending():
    found, _ = marks(replica("a", waiting=24.0), replica("b"))
    assert found == {"a": "pending", "b": "ok"}


def test_once_the_flag_has_lasted_its_minimum_the_row_shows_it():
    found, view = marks(replica("a", waiting=24.0), replica("b"), polls=5)
    assert found["a"] == "warning" and view.total.mark == "warning"


def test_flags_keep_their_hysteresis_while_cells_tell_the_truth_now():
    hot, cooled = replica("a", waiting=24.0), replica("a", waiting=0.7)  # between clear (0.5) and raise (1)
    view = None
    for i, figures in enumerate([hot] * 5 + [cooled]):
        view = advance(view, "fleet", fleet(figures, at=1000.0 + i * 10), PLAN_NOW, 1000.0 + i * 10)
    row = view.rows[0]
    assert row.over == () and row.severity == "warning" and row.mark == "warning"


@pytest.mark.parametrize(
    "state, mark",
    [
        ("down", "critical"),
        ("timeout", "critical"),
        ("stale", "pending"),  # its flag waits out its minimum duration
        ("restarted", "warning"),  # its flag shows at once
        ("unknown", "unknown"),
    ],
)
def test_states_without_flags(state, mark):
    found, _ = marks(replica("a", state=state), plan=None)
    assert found["a"] == mark


def test_many_replicas_each_get_their_own_worst_flag():
    replicas = [replica(f"r{i}", waiting=5.0 if i % 2 else 0.0) for i in range(40)]
    found, _ = marks(*replicas, polls=5)
    assert all(found[f"r{i}"] == ("warning" if i % 2 else "ok") for i in range(40))
