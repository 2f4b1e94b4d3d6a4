"""The conclusion of `--diagnose` from its evidence table (console/bench/diagnosis.py), table by table."""

from __future__ import annotations

import pytest

from console.bench.diagnosis import (
    BASELINE,
    GpuFigures,
    Rerun,
    conclude,
    evidence_table,
    limit_rate,
    planned_changes,
)

GPU = GpuFigures(sm_active=0.9, tensor_active=0.6, dram_active=0.3, fb_used_bytes=7e10, readings=10)


def row(change: str, good: int, sent: int = 100, **figures) -> Rerun:
    figures.setdefault("duration_seconds", sent / 10.0)
    return Rerun(change, change.replace("_", " "), 10.0, sent, good, **figures)


def table(base: Rerun, **changes: Rerun) -> list[Rerun]:
    return [base, *changes.values()]


@pytest.mark.parametrize(
    "rows, limit, moved",
    [
        # Shorter contexts help, and the KV cache was full with preemptions: memory.
        (
            table(
                row(BASELINE, 95, kv_usage_max=0.99, preemptions=12, running_max=20),
                h=row("concurrency_half", 97),
                b=row("concurrency_batch", 95),
                s=row("lengths_half", 100, kv_usage_max=0.6),
                d=row("lengths_double", 10, kv_usage_max=1.0, preemptions=80),
            ),
            "memory",
            ("lengths_half", "lengths_double"),
        ),
        # KV full only at double length still counts as memory pressure.
        (
            table(
                row(BASELINE, 96, kv_usage_max=0.7, preemptions=0),
                d=row("lengths_double", 40, kv_usage_max=1.0, preemptions=30),
            ),
            "memory",
            ("lengths_double",),
        ),
        # Lengths move it with KV free and nothing preempted: compute.
        (
            table(
                row(BASELINE, 95, kv_usage_max=0.1, preemptions=0, gpu=GPU),
                s=row("lengths_half", 100),
                d=row("lengths_double", 20, kv_usage_max=0.2, preemptions=0),
            ),
            "compute",
            ("lengths_half", "lengths_double"),
        ),
        # Only a cap on the batch helps, and the capped rerun kept the offered pace: the scheduler's settings.
        (
            table(
                row(BASELINE, 90, kv_usage_max=0.3, preemptions=0, running_max=64),
                h=row("concurrency_half", 99),
                s=row("lengths_half", 92),
                d=row("lengths_double", 88),
            ),
            "scheduler",
            ("concurrency_half",),
        ),
        # Nothing moves and requests wait: queueing.
        (
            table(
                row(BASELINE, 95, kv_usage_max=0.3, waiting_mean=6.0),
                h=row("concurrency_half", 94),
                s=row("lengths_half", 97),
                d=row("lengths_double", 93),
            ),
            "queueing",
            (),
        ),
        # Nothing moves and nothing waits.
        (table(row(BASELINE, 95, waiting_mean=0.2), s=row("lengths_half", 96)), "unknown", ()),
    ],
)
def test_the_change_that_moves_the_result_names_the_limit(rows, limit, moved):
    conclusion = conclude(rows)
    assert conclusion.limit == limit
    assert conclusion.moved_by == moved
    assert conclusion.reasons and len(evidence_table(conclusion)) == len(rows) + 1


def test_a_cap_that_helps_only_by_holding_requests_back_is_not_the_scheduler():
    rows = table(
        row(BASELINE, 90, kv_usage_max=0.3, waiting_mean=4.0),
        h=row("concurrency_half", 99, duration_seconds=25.0),  # 100 requests in 25 s of an offered 10 rps
        s=row("lengths_half", 91),
    )
    assert conclude(rows).limit == "queueing"


def test_doubled_prompts_refused_past_the_context_limit_are_left_out():
    rows = table(
        row(BASELINE, 96, kv_usage_max=0.5),
        d=row("lengths_double", 0, failed=100),
        s=row("lengths_half", 97),
    )
    conclusion = conclude(rows)
    assert conclusion.limit == "unknown" and conclusion.moved_by == ()
    assert any("100 of 100 requests failed" in reason for reason in conclusion.reasons)


def test_without_a_baseline_nothing_is_concluded():
    assert conclude([row("lengths_half", 90)]).limit == "unknown"


def test_gpu_counters_are_evidence_shown_and_unknown_says_so():
    with_gpu = conclude(table(row(BASELINE, 95, gpu=GPU), s=row("lengths_half", 100)))
    assert any("tensor active 60%" in r and "(tensor and SM active high)" in r for r in with_gpu.reasons)
    without = conclude(table(row(BASELINE, 95, gpu=GpuFigures(note="no dcgm page")), s=row("lengths_half", 100)))
    assert any("GPU counters unknown (no dcgm page)" in r for r in without.reasons)
    _, base_row, _ = evidence_table(without)
    assert base_row.split()[-3:] == ["-", "-", "-"]
    assert without.as_dict()["reruns"][0]["gpu"]["sm_active"] is None


def test_the_planned_changes():
    half, batch, shorter, longer = planned_changes(in_flight=13.0, batch_size=64)
    assert (half.max_concurrency, batch.max_concurrency) == (6, 64)  # round(6.5) to even
    assert (shorter.length_factor, longer.length_factor) == (0.5, 2.0)
    unknown_half, unknown_batch, _, _ = planned_changes(in_flight=None, batch_size=None)
    assert unknown_half.skipped and unknown_batch.skipped
    skipped = Rerun(unknown_batch.change, unknown_batch.what, 1.0, 0, 0, skipped=unknown_batch.skipped)
    assert skipped.goodput_share is None and "not run" in evidence_table(conclude([row(BASELINE, 9), skipped]))[-1]


def test_the_reruns_run_where_the_limit_binds():
    # The sweep bisected to 10 held, 10.4 fell: the reruns at 10.4, where goodput is short and a change can gain.
    assert limit_rate(10.0, 10.4) == 10.4
    # Nothing above the capacity fell (the sweep met its ceiling): the capacity itself.
    assert limit_rate(10.0, None) == 10.0
    # Only the start fell and a lower rate held: the lowest that fell is above the capacity, as it should be.
    assert limit_rate(2.5, 5.0) == 5.0
    # Nothing held: no reruns.
    assert limit_rate(None, 0.5) is None


def test_a_cap_that_carries_the_baseline_load_better_is_named_as_a_lever_beside_the_verdict():
    memory = dict(kv_usage_max=0.99, preemptions=12)
    base = row(BASELINE, 80, **memory)
    shorter = row("lengths_half", 100, kv_usage_max=0.5)
    same_load = conclude(table(base, h=row("concurrency_half", 92), s=shorter))
    assert same_load.limit == "memory"
    assert same_load.reasons[-1].startswith("concurrency half raised goodput to 92%")
    assert same_load.reasons[-1].endswith("is a lever too")
    assert "carrying 10.00 rps where the baseline carried 10.00" in same_load.reasons[-1]
    # The same gain while carrying less than the baseline did: it held requests back, no lever.
    slower = conclude(table(base, h=row("concurrency_half", 92, duration_seconds=12.0), s=shorter))
    assert slower.limit == "memory" and not any("is a lever too" in r for r in slower.reasons)
    # A gain under the 5 points that count: no lever either.
    small = conclude(table(base, h=row("concurrency_half", 83), s=shorter))
    assert not any("is a lever too" in r for r in small.reasons)


def test_a_capped_requests_wait_for_its_place_is_its_clients():
    from console.bench.client import RequestResult
    from console.bench.runner import with_hold

    sent = RequestResult(True, started=100.0, e2e_seconds=4.0, ttft_seconds=0.5, last_token_seconds=3.9)
    held = with_hold(sent, 1.5)
    assert (held.started, held.e2e_seconds, held.ttft_seconds, held.last_token_seconds) == (98.5, 5.5, 2.0, 5.4)
    # TPOT, (last token - first) / (tokens - 1), is the replica's and does not move.
    assert held.last_token_seconds - held.ttft_seconds == pytest.approx(sent.last_token_seconds - sent.ttft_seconds)
    assert with_hold(sent, 0.0) is sent
    failed = RequestResult(False, started=100.0, e2e_seconds=0.2, error="HTTP 500")
    assert with_hold(failed, 1.0).ttft_seconds is None and with_hold(failed, 1.0).e2e_seconds == 1.2
