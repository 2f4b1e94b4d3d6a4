"""Flag rules at the edges of their thresholds, with hysteresis and minimum durations."""

from __future__ import annotations

import pytest

from console.fleet.flags import FlagInputs, FlagState, Thresholds, evaluate
from tests.fleet.builders import fleet, plan_now, replica

T = Thresholds()  # min duration 30 s, down after 10 s, workload drift after 120 s, restart hold 300 s


def active_after(steps: list[tuple[float, FlagInputs]]) -> set[str]:
    state = FlagState()
    for now, inputs in steps:
        state = evaluate(state, inputs, now, T)
    return {f.id for f in state.active}


def one_replica(**figures) -> FlagInputs:
    return FlagInputs(fleet(replica("r1", **figures)), plan=None)


def fleet_totals(serving: int = 4, plan=None, **totals) -> FlagInputs:
    replicas = [replica(f"r{i}") for i in range(serving)]
    return FlagInputs(fleet(*replicas, **totals), plan=plan or plan_now())


# (case, [(seconds, inputs), ...], flag id, expected to be active at the end)
CASES = [
    # saturation: a queue that persists (waiting >= 1 for 30 s), clears below 0.5
    (
        "queue at the threshold for the duration",
        [(0, one_replica(waiting=1.0)), (30, one_replica(waiting=1.0))],
        "saturation:r1",
        True,
    ),
    (
        "queue just under the threshold",
        [(0, one_replica(waiting=0.99)), (30, one_replica(waiting=0.99))],
        "saturation:r1",
        False,
    ),
    (
        "queue one second short of the duration",
        [(0, one_replica(waiting=3.0)), (29, one_replica(waiting=3.0))],
        "saturation:r1",
        False,
    ),
    (
        "queue broken mid-way starts over",
        [
            (0, one_replica(waiting=3.0)),
            (20, one_replica(waiting=0.7)),
            (40, one_replica(waiting=3.0)),
            (60, one_replica(waiting=3.0)),
        ],
        "saturation:r1",
        False,
    ),
    (
        "queue in the hysteresis band stays",
        [(0, one_replica(waiting=2.0)), (30, one_replica(waiting=2.0)), (40, one_replica(waiting=0.5))],
        "saturation:r1",
        True,
    ),
    (
        "queue below the clear threshold clears",
        [(0, one_replica(waiting=2.0)), (30, one_replica(waiting=2.0)), (40, one_replica(waiting=0.49))],
        "saturation:r1",
        False,
    ),
    # saturation: KV >= 0.90 (a fraction) with preemptions, clears below 0.85
    (
        "KV at 0.90 with preemptions",
        [
            (0, one_replica(kv_usage=0.90, preemptions_per_second=0.1)),
            (30, one_replica(kv_usage=0.90, preemptions_per_second=0.1)),
        ],
        "saturation:r1",
        True,
    ),
    (
        "KV at 0.90 without preemptions",
        [
            (0, one_replica(kv_usage=0.95, preemptions_per_second=0.0)),
            (30, one_replica(kv_usage=0.95, preemptions_per_second=0.0)),
        ],
        "saturation:r1",
        False,
    ),
    (
        "KV just under 0.90",
        [
            (0, one_replica(kv_usage=0.8999, preemptions_per_second=1.0)),
            (30, one_replica(kv_usage=0.8999, preemptions_per_second=1.0)),
        ],
        "saturation:r1",
        False,
    ),
    (
        "KV in the band stays",
        [
            (0, one_replica(kv_usage=0.95, preemptions_per_second=1.0)),
            (30, one_replica(kv_usage=0.95, preemptions_per_second=1.0)),
            (40, one_replica(kv_usage=0.85, preemptions_per_second=1.0)),
        ],
        "saturation:r1",
        True,
    ),
    (
        "KV below 0.85 clears",
        [
            (0, one_replica(kv_usage=0.95, preemptions_per_second=1.0)),
            (30, one_replica(kv_usage=0.95, preemptions_per_second=1.0)),
            (40, one_replica(kv_usage=0.849, preemptions_per_second=1.0)),
        ],
        "saturation:r1",
        False,
    ),
    ("unknown queue and KV raise nothing", [(0, one_replica()), (60, one_replica())], "saturation:r1", False),
    # replica down after 10 s; stale after 30 s; restarted at once and held 300 s
    ("down for 10 s", [(0, one_replica(state="timeout")), (10, one_replica(state="timeout"))], "replica_down:r1", True),
    ("down for 9 s", [(0, one_replica(state="down")), (9, one_replica(state="down"))], "replica_down:r1", False),
    (
        "down then back up",
        [(0, one_replica(state="down")), (10, one_replica(state="down")), (15, one_replica(state="up"))],
        "replica_down:r1",
        False,
    ),
    ("stale for 30 s", [(0, one_replica(state="stale")), (30, one_replica(state="stale"))], "replica_stale:r1", True),
    ("restart shows at once", [(0, one_replica(state="restarted"))], "replica_restarted:r1", True),
    (
        "restart held for 299 s",
        [(0, one_replica(state="restarted")), (299, one_replica(state="up"))],
        "replica_restarted:r1",
        True,
    ),
    (
        "restart cleared after 300 s",
        [(0, one_replica(state="restarted")), (300, one_replica(state="up"))],
        "replica_restarted:r1",
        False,
    ),
    # SLO breach: above the target, clears below 90 % of it
    (
        "TTFT at its target",
        [(0, fleet_totals(ttft_p95_seconds=1.5)), (30, fleet_totals(ttft_p95_seconds=1.5))],
        "slo_breach_ttft:fleet",
        False,
    ),
    (
        "TTFT over its target",
        [(0, fleet_totals(ttft_p95_seconds=1.501)), (30, fleet_totals(ttft_p95_seconds=1.501))],
        "slo_breach_ttft:fleet",
        True,
    ),
    (
        "TTFT at 90 % of target stays",
        [
            (0, fleet_totals(ttft_p95_seconds=2.0)),
            (30, fleet_totals(ttft_p95_seconds=2.0)),
            (40, fleet_totals(ttft_p95_seconds=1.35)),
        ],
        "slo_breach_ttft:fleet",
        True,
    ),
    (
        "TTFT under 90 % clears",
        [
            (0, fleet_totals(ttft_p95_seconds=2.0)),
            (30, fleet_totals(ttft_p95_seconds=2.0)),
            (40, fleet_totals(ttft_p95_seconds=1.349)),
        ],
        "slo_breach_ttft:fleet",
        False,
    ),
    (
        "TPOT over its target",
        [(0, fleet_totals(tpot_p95_seconds=0.041)), (30, fleet_totals(tpot_p95_seconds=0.041))],
        "slo_breach_tpot:fleet",
        True,
    ),
    # load above the plan for this hour (4 x 5 = 20 req/s), clears below 95 % (19)
    (
        "load at planned capacity",
        [(0, fleet_totals(requests_per_second=20.0)), (30, fleet_totals(requests_per_second=20.0))],
        "above_plan:fleet",
        False,
    ),
    (
        "load above planned capacity",
        [(0, fleet_totals(requests_per_second=20.01)), (30, fleet_totals(requests_per_second=20.01))],
        "above_plan:fleet",
        True,
    ),
    (
        "load at 95 % stays",
        [
            (0, fleet_totals(requests_per_second=25.0)),
            (30, fleet_totals(requests_per_second=25.0)),
            (40, fleet_totals(requests_per_second=19.0)),
        ],
        "above_plan:fleet",
        True,
    ),
    (
        "load under 95 % clears",
        [
            (0, fleet_totals(requests_per_second=25.0)),
            (30, fleet_totals(requests_per_second=25.0)),
            (40, fleet_totals(requests_per_second=18.99)),
        ],
        "above_plan:fleet",
        False,
    ),
    # N+1: 4 serving, one lost leaves 3 x 5 = 15 req/s
    (
        "load the fleet carries with one lost",
        [(0, fleet_totals(requests_per_second=15.0)), (30, fleet_totals(requests_per_second=15.0))],
        "n_plus_1_at_risk:fleet",
        False,
    ),
    (
        "load beyond it",
        [(0, fleet_totals(requests_per_second=15.1)), (30, fleet_totals(requests_per_second=15.1))],
        "n_plus_1_at_risk:fleet",
        True,
    ),
    (
        "one replica serving carries nothing after a loss",
        [(0, fleet_totals(serving=1, requests_per_second=0.5)), (30, fleet_totals(serving=1, requests_per_second=0.5))],
        "n_plus_1_at_risk:fleet",
        True,
    ),
    # workload drift: 50 % off raises after 120 s, clears under 30 %
    (
        "input 50 % above the plan for 120 s",
        [(0, fleet_totals(mean_input_tokens=3000.0)), (120, fleet_totals(mean_input_tokens=3000.0))],
        "workload_drift_input:fleet",
        True,
    ),
    (
        "input 50 % above for 119 s",
        [(0, fleet_totals(mean_input_tokens=3000.0)), (119, fleet_totals(mean_input_tokens=3000.0))],
        "workload_drift_input:fleet",
        False,
    ),
    (
        "input just under 50 % above",
        [(0, fleet_totals(mean_input_tokens=2999.0)), (120, fleet_totals(mean_input_tokens=2999.0))],
        "workload_drift_input:fleet",
        False,
    ),
    (
        "output half the plan",
        [(0, fleet_totals(mean_output_tokens=200.0)), (120, fleet_totals(mean_output_tokens=200.0))],
        "workload_drift_output:fleet",
        True,
    ),
    (
        "input 35 % off stays",
        [
            (0, fleet_totals(mean_input_tokens=3200.0)),
            (120, fleet_totals(mean_input_tokens=3200.0)),
            (130, fleet_totals(mean_input_tokens=2700.0)),
        ],
        "workload_drift_input:fleet",
        True,
    ),
    (
        "input 29 % off clears",
        [
            (0, fleet_totals(mean_input_tokens=3200.0)),
            (120, fleet_totals(mean_input_tokens=3200.0)),
            (130, fleet_totals(mean_input_tokens=2590.0)),
        ],
        "workload_drift_input:fleet",
        False,
    ),
    # schedule lag: fewer serving than scheduled; a scale-up due within the lead time
    (
        "three serving of four scheduled",
        [(0, fleet_totals(serving=3)), (30, fleet_totals(serving=3))],
        "schedule_lag:fleet",
        True,
    ),
    (
        "four serving of four scheduled",
        [(0, fleet_totals(serving=4)), (30, fleet_totals(serving=4))],
        "schedule_lag:fleet",
        False,
    ),
    (
        "scale-up due within the lead time",
        [(0, fleet_totals(serving=4, plan=plan_now(replicas_scheduled_soon=5)))],
        "scale_up_due:fleet",
        True,
    ),
    (
        "no scale-up due",
        [(0, fleet_totals(serving=4, plan=plan_now(replicas_scheduled_soon=4)))],
        "scale_up_due:fleet",
        False,
    ),
    # the source itself
    (
        "source unreachable",
        [(0, FlagInputs(fleet(source_error="Prometheus: connection refused")))],
        "source_error:fleet",
        True,
    ),
]


@pytest.mark.parametrize("steps,flag_id,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_flag_edges(steps, flag_id, expected):
    assert (flag_id in active_after(steps)) is expected


def drift(tpot: float, tpot_before: float | None, gen: float, gen_before: float | None) -> FlagInputs:
    figures = fleet(replica("r1"), tpot_p95_seconds=tpot, generation_tokens_per_second=gen)
    return FlagInputs(figures, plan=plan_now(), tpot_p95_before=tpot_before, generation_before=gen_before)


DRIFT_CASES = [
    # target 40 ms: raise from 32 ms (80 %) while rising and generation within +-10 %; clear under 28 ms
    ("rising to 80 % of target, generation flat", [drift(0.032, 0.030, 1000, 1050)], True),
    ("just under 80 %", [drift(0.0319, 0.030, 1000, 1000)], False),
    ("not rising", [drift(0.035, 0.036, 1000, 1000)], False),
    ("generation grew 20 %: more load, not drift", [drift(0.035, 0.030, 1200, 1000)], False),
    ("generation exactly 10 % up still flat", [drift(0.035, 0.030, 1100, 1000)], True),
    ("no history to compare with", [drift(0.035, None, 1000, None)], False),
    (
        "falls into the band: stays",
        [drift(0.035, 0.030, 1000, 1000), drift(0.034, 0.030, 1000, 1000), drift(0.029, 0.035, 1000, 1000)],
        True,
    ),
    (
        "falls under 70 %: clears",
        [drift(0.035, 0.030, 1000, 1000), drift(0.035, 0.030, 1000, 1000), drift(0.0279, 0.035, 1000, 1000)],
        False,
    ),
]


@pytest.mark.parametrize("sequence,expected", [c[1:] for c in DRIFT_CASES], ids=[c[0] for c in DRIFT_CASES])
def test_latency_drift_edges(sequence, expected):
    # The first reading is held for the minimum duration (30 s), then the rest follow 30 s apart.
    steps = [(0.0, sequence[0])] + [((i + 1) * 30.0, inputs) for i, inputs in enumerate(sequence)]
    assert ("latency_drift:fleet" in active_after(steps)) is expected


def test_flag_says_since_why_and_what_to_do():
    state = FlagState()
    for now in (100.0, 115.0, 130.0):
        state = evaluate(state, one_replica(kv_usage=0.93, preemptions_per_second=0.4), now, T)
    (flag,) = [f for f in state.active if f.kind == "saturation"]
    assert flag.since == 100.0  # when the condition began, not when the duration ran out
    assert "KV 93 %" in flag.why and "0.40 preemptions/s" in flag.why
    assert "add a replica" in flag.todo and "(docs/method.md, 'Scaling out')" in flag.todo


def test_flags_sorted_worst_first_and_worst_per_replica():
    inputs = FlagInputs(fleet(replica("r1", state="down"), replica("r2", state="restarted")), plan=None)
    state = evaluate(evaluate(FlagState(), inputs, 0.0, T), inputs, 10.0, T)
    assert [f.severity for f in state.active] == ["critical", "warning"]
    assert state.worst_for("r1") == "critical"
    assert state.worst_for("r2") == "warning"
    assert state.worst_for("r3") is None


def test_flags_of_a_replica_that_left_the_fleet_clear():
    saturated = one_replica(waiting=5.0)
    state = evaluate(evaluate(FlagState(), saturated, 0.0, T), saturated, 30.0, T)
    assert "saturation:r1" in {f.id for f in state.active}
    state = evaluate(state, FlagInputs(fleet(replica("r2"))), 40.0, T)
    assert not [f for f in state.active if f.subject == "r1"]


def test_evaluate_leaves_the_previous_state_untouched():
    first = evaluate(FlagState(), one_replica(state="restarted"), 0.0, T)
    before = dict(first.trackers)
    evaluate(first, one_replica(state="up"), 400.0, T)
    assert first.trackers == before


# (case, [(seconds, inputs), ...], flag id expected pending at the end, its minimum duration, or None: not pending)
PENDING_CASES = [
    ("down 4 s of 10 s", [(0, one_replica(state="down")), (4, one_replica(state="down"))], "replica_down:r1", 10.0),
    (
        "down 10 s: a flag, no longer pending",
        [(0, one_replica(state="down")), (10, one_replica(state="down"))],
        "replica_down:r1",
        None,
    ),
    ("queue 20 s of 30 s", [(0, one_replica(waiting=3.0)), (20, one_replica(waiting=3.0))], "saturation:r1", 30.0),
    (
        "queue broke: nothing pending",
        [(0, one_replica(waiting=3.0)), (20, one_replica(waiting=0.1))],
        "saturation:r1",
        None,
    ),
    (
        "load over plan 5 s of 30 s",
        [(0, fleet_totals(requests_per_second=25.0)), (5, fleet_totals(requests_per_second=25.0))],
        "above_plan:fleet",
        30.0,
    ),
]


@pytest.mark.parametrize("case, steps, flag_id, needed", PENDING_CASES, ids=[c[0] for c in PENDING_CASES])
def test_conditions_inside_their_minimum_duration_are_pending(case, steps, flag_id, needed):
    state = FlagState()
    for now, inputs in steps:
        state = evaluate(state, inputs, now, T)
    pending = {p.id: p for p in state.pending}
    if needed is None:
        assert flag_id not in pending
    else:
        assert flag_id not in {f.id for f in state.active}
        assert pending[flag_id].needed_seconds == needed
        assert pending[flag_id].since == steps[0][0]


# (state, a word the why must carry, a phrase the advice must carry, a phrase it must not)
DOWN_ADVICE = [
    ("down", "is down", "process and host", "may still serve"),
    ("bad_payload", "not a valid metrics page", "may still serve", "process and host"),
    ("timeout", "its /metrics page timed out", "may still serve", "process and host"),
]


@pytest.mark.parametrize("state, why, todo, not_todo", DOWN_ADVICE, ids=[c[0] for c in DOWN_ADVICE])
def test_down_advice_depends_on_how_the_replica_failed(state, why, todo, not_todo):
    inputs = one_replica(state=state)
    flags = evaluate(evaluate(FlagState(), inputs, 0.0, T), inputs, 10.0, T).active
    (flag,) = [f for f in flags if f.kind == "replica_down"]
    assert why in flag.why
    assert todo in flag.todo and not_todo not in flag.todo


def test_changes_name_each_flag_raised_and_cleared_once():
    from console.fleet.flags import changes

    state = FlagState()
    seen = []
    # A queue that lasts 30 s raises saturation:r1; below 0.5 it clears; flat stretches change nothing.
    for now, waiting in [(0, 3.0), (15, 3.0), (30, 3.0), (45, 2.0), (60, 0.4), (75, 0.4)]:
        after = evaluate(state, one_replica(waiting=waiting), now, T)
        seen.append((now, [(change, flag.id) for change, flag in changes(state, after)]))
        state = after
    assert seen == [
        (0, []),
        (15, []),
        (30, [("raised", "saturation:r1")]),
        (45, []),
        (60, [("cleared", "saturation:r1")]),
        (75, []),
    ]
    assert changes(None, FlagState()) == ()
