"""The breach alerts read what the buckets can tell: the share of requests over vLLM's bound at or above the
target, so they never fire where the console's judgement is undetermined, and fire wherever it is a breach."""

from __future__ import annotations

import json
import math
import re

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from console.engines.rules import le_matcher, target_bounds
from console.metrics.attainment import buckets, judge
from console.metrics.vllm import BUCKET_BOUNDS
from tests.plan.conftest import BASE_PLAN

from .conftest import plan_file, rules_text

LE = re.compile(r'le=~"((?:[^"\\]|\\.)*)"')


def rules_of(tmp_path, tpot: float) -> dict[str, dict]:
    workload = {**BASE_PLAN["workloads"][0], "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": tpot}}
    path = plan_file(tmp_path, {"workloads": [workload]})
    (group,) = yaml.safe_load(rules_text(path))["groups"]
    return {r.get("record") or r["alert"]: r for r in group["rules"]}


def bound_read(expression: str) -> float:
    """The one finite `le` an expression selects (besides +Inf), as a number."""
    found = {json.loads(f'"{m}"').split("|")[0].replace("\\", "") for m in LE.findall(expression)}
    assert len(found) == 1, found
    return float(found.pop())


def test_a_target_inside_a_bucket_is_alerted_on_the_bound_above_it_and_says_so(tmp_path):
    rules = rules_of(tmp_path, 0.060)
    over = rules["capcon:fleet_tpot_over_target:share"]["expr"]
    assert bound_read(over) == 0.075  # the requests surely over 60 ms: those over 75 ms
    assert bound_read(rules["capcon:fleet_tpot_attainment:share"]["expr"]) == 0.075
    assert bound_read(rules["capcon:fleet_tpot_attainment:least"]["expr"]) == 0.05
    alert = rules["CapconSloBreachTpot"]
    assert alert["expr"].startswith('capcon:fleet_tpot_over_target:share{capcon_plan="base"} > 0.05 or (')
    note = alert["annotations"]["bucket"]
    assert note.startswith("The 60 ms target lies inside vLLM's 50-75 ms bucket")
    assert "put the target on a bound (50 ms or 75 ms)" in note


def test_a_target_on_a_bound_is_alerted_on_it_exactly_with_no_note(tmp_path):
    rules = rules_of(tmp_path, 0.075)
    assert bound_read(rules["capcon:fleet_tpot_over_target:share"]["expr"]) == 0.075
    assert "capcon:fleet_tpot_attainment:least" not in rules
    assert "bucket" not in rules["CapconSloBreachTpot"]["annotations"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=len(BUCKET_BOUNDS["tpot"]) + 1, max_size=len(BUCKET_BOUNDS["tpot"]) + 1),
    st.one_of(st.sampled_from(BUCKET_BOUNDS["tpot"]), st.floats(0.002, 100.0)),
)
def test_the_alert_fires_exactly_where_the_judgement_is_a_breach(per_bucket, target):
    """Prometheus' share over the alert's bound, from the same counts, against the console's judgement: over
    5 % (firing) exactly where the judgement is missed; so never where it is undetermined or met."""
    bounds = BUCKET_BOUNDS["tpot"]
    cumulative = [float(sum(per_bucket[: i + 1])) for i in range(len(bounds))]
    total = float(sum(per_bucket))
    judged = judge(buckets(bounds, tuple(cumulative), total), target, 0.95)
    if judged is None:
        return
    _lo, hi = target_bounds("tpot", target)
    within = total if math.isinf(hi) else cumulative[bounds.index(hi)]
    fires = (total - within) / total > 0.05  # the recorded share, as the alert compares it
    assert fires == (judged.verdict == "missed"), (judged, hi)


def test_a_bucket_bound_is_matched_as_any_exporter_writes_it():
    assert re.fullmatch(json.loads(le_matcher(1.0).removeprefix("le=~")), "1")
    assert re.fullmatch(json.loads(le_matcher(1.0).removeprefix("le=~")), "1.0")
    assert re.fullmatch(json.loads(le_matcher(0.075).removeprefix("le=~")), "0.075")
    assert not re.fullmatch(json.loads(le_matcher(0.075).removeprefix("le=~")), "0.0750x")
    assert le_matcher(math.inf) == 'le="+Inf"'
