"""The SLO flags judge a p95 target on the window's buckets: a target inside vLLM's 50-75 ms bucket is neither
breached nor met where the counts allow either, and says so; a p95 over the bucket is a breach."""

from __future__ import annotations

import json

from console.commands.watch_output import slo_lines
from console.fleet import slo
from console.fleet.flags import FlagInputs, FlagState, Thresholds, evaluate
from console.fleet.judge import limits, over
from console.fleet.view import advance
from console.fleet.view_json import fleet_view_json
from console.metrics.attainment import buckets
from console.metrics.gateway import GatewayFigures

from .builders import fleet, plan_now, replica

TPOT_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
PLAN = plan_now(tpot_p95_target_seconds=0.060, ttft_p95_target_seconds=1.0)


def tpot(per_bucket: list[int]):
    cumulative, running = [], 0.0
    for n in per_bucket[:-1]:
        running += n
        cumulative.append(running)
    return buckets(TPOT_BOUNDS, tuple(cumulative), running + per_bucket[-1])


NEAR_55 = tpot([0, 0, 920, 50, 30] + [0] * 9)  # 3-8 % over 60 ms: the interpolated p95 reads 70 ms
AT_80 = tpot([0, 0, 0, 700, 300] + [0] * 9)  # 30 % over 75 ms: a p95 of 80 ms or more, whatever the spread


def figures(b, p95: float):
    return fleet(replica("r1"), tpot_p95_seconds=p95, latency_buckets={"tpot": b}, requests_per_second=1.0)


def run(b, p95: float, seconds: int = 60):
    state = FlagState()
    for t in range(0, seconds + 1, 5):
        state = evaluate(state, FlagInputs(figures(b, p95), PLAN), float(t))
    return {f.kind: f for f in state.active}


def test_a_target_inside_a_bucket_is_undetermined_never_a_breach():
    flags = run(NEAR_55, 0.0705)
    assert "slo_breach_tpot" not in flags
    undetermined = flags["slo_undetermined_tpot"]
    assert undetermined.severity == "info"
    assert "50-75 ms" in undetermined.why and "3-8 % of requests over it" in undetermined.why
    assert "inside vLLM's 50-75 ms bucket: put the target on a bound (50 ms or 75 ms)" in undetermined.todo


def test_a_p95_over_the_bucket_is_a_breach():
    flags = run(AT_80, 0.0833)
    assert flags["slo_breach_tpot"].severity == "critical"
    assert "slo_undetermined_tpot" not in flags
    assert "30-100 % of requests over it (5 % allowed)" in flags["slo_breach_tpot"].why


def test_a_breach_clears_only_once_known_within_the_clear_share():
    state = FlagState()
    for t in range(0, 61, 5):
        state = evaluate(state, FlagInputs(figures(AT_80, 0.0833), PLAN), float(t))
    # Back inside the 50-75 ms bucket: the buckets cannot say the p95 is under 54 ms, the breach stays.
    state = evaluate(state, FlagInputs(figures(NEAR_55, 0.0705), PLAN), 65.0)
    assert "slo_breach_tpot" in {f.kind for f in state.active}
    # All under 50 ms: known within 90 % of the target.
    state = evaluate(state, FlagInputs(figures(tpot([0, 0, 1000] + [0] * 11), 0.045), PLAN), 70.0)
    assert "slo_breach_tpot" not in {f.kind for f in state.active}


def test_the_cells_are_over_only_where_missed():
    judged = limits(PLAN, Thresholds())
    near = replica("r1", tpot_p95_seconds=0.0705, latency_buckets={"tpot": NEAR_55})
    far = replica("r1", tpot_p95_seconds=0.0833, latency_buckets={"tpot": AT_80})
    assert ("tpot", "critical") not in over(near, judged)
    assert ("tpot", "critical") in over(far, judged)


def test_a_target_on_a_bound_is_judged_exactly_with_its_attainment():
    [check] = [
        c
        for c in slo.checks(figures(NEAR_55, 0.0705).fleet, plan_now(tpot_p95_target_seconds=0.075))
        if c.key == "tpot"
    ]
    assert check.verdict == "met" and check.attainment == (0.97, 0.97)
    assert slo.attainment_words(check) == "97 % within 75 ms"


def test_the_clients_finer_histogram_is_judged_when_the_gateways_give_one():
    bounds = (0.5, 0.56, 0.62, 0.68, 1.0)
    client = GatewayFigures(
        "gw",
        100.0,
        1,
        1,
        client_ttft_p95_seconds=0.6,
        client_ttft_buckets=buckets(bounds, (10.0, 20.0, 97.0, 100.0, 100.0), 100.0),
    )
    f = fleet(replica("r1"), ttft_p95_seconds=0.3, latency_buckets={"ttft": tpot([0] * 5 + [100] + [0] * 8)})
    [ttft] = slo.checks(f.fleet, plan_now(ttft_p95_target_seconds=0.62, tpot_p95_target_seconds=None), client)
    assert ttft.label == "client p95 TTFT" and ttft.verdict == "met" and ttft.attainment == (0.97, 0.97)
    [inside] = slo.checks(f.fleet, plan_now(ttft_p95_target_seconds=0.6, tpot_p95_target_seconds=None), client)
    assert inside.verdict == "undetermined"
    assert "the gateway's client 560-620 ms bucket" in slo.fix(inside)


def test_once_and_json_say_undetermined_with_the_attainment():
    view = advance(None, "fleet", figures(NEAR_55, 0.0705), PLAN, 0.0)
    [tpot_line] = [line for line in slo_lines(view) if "TPOT" in line]
    assert tpot_line.startswith("SLO TPOT p95 50-75ms · 92-97 % within 60 ms · undetermined: The 60 ms target")
    document = json.loads(json.dumps(fleet_view_json(view.figures, view, "plan.yaml", str)))
    [judged] = [s for s in document["slo"] if s["figure"] == "tpot"]
    assert judged["verdict"] == "undetermined"
    assert judged["attainment"] == [0.92, 0.97] and judged["over_share"] == [0.03, 0.08]
    assert judged["target_bucket_seconds"] == [0.05, 0.075] and judged["p95_bucket_seconds"] == [0.05, 0.075]
    assert "put the target on a bound" in judged["fix"]
    assert document["fleet"]["p95_buckets_seconds"] == {"tpot": [0.05, 0.075]}
    tpot_comparison = next(c for c in document["comparisons"] if c["label"] == "TPOT p95")
    assert tpot_comparison["status"] == "warning" and "undetermined" in tpot_comparison["note"]


def test_latency_drift_rises_only_where_the_buckets_put_the_p95_past_80_percent_of_its_target():
    # 4.5-14.5 % of requests over 48 ms (80 % of 60): the interpolated p95 reads 48.75 ms, the buckets cannot tell.
    unsure = tpot([0, 855, 100, 45] + [0] * 10)
    sure = tpot([0, 0, 900, 100] + [0] * 10)  # 10 % over 50 ms: the p95 is past 48 ms whatever the spread

    def drifting(b, p95: float) -> bool:
        state = FlagState()
        for t in range(0, 61, 5):
            f = fleet(
                replica("r1"), tpot_p95_seconds=p95, latency_buckets={"tpot": b}, generation_tokens_per_second=1e3
            )
            inputs = FlagInputs(f, PLAN, tpot_p95_before=0.030, generation_before=1e3)
            state = evaluate(state, inputs, float(t))
        return "latency_drift" in {f.kind for f in state.active}

    assert not drifting(unsure, 0.04875)
    assert drifting(sure, 0.0525)
