"""A goodput share no rate can reach is said so, with the share that misses alone and the levers computed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.bench import estimate
from console.bench.reach import Alone, reach
from console.cli import main
from console.plan.model import Capacity
from console.plan.schema import PlanError

# The newcomer's plan: a 70B in FP8 on two H100 SXM, 2,000 input tokens (p95 6,000), contexts up to 32k, its
# GEMMs at bf16 (weight-only FP8): the longest prompts' prefill alone takes longer than the 1.5 s TTFT target.
NEWCOMER = """\
name: newcomer-70b
model:
  name: llama-70b
  parameters: 70B
  layers: 80
  kv_heads: 8
  head_dim: 128
  weight_precision: fp8
  kv_precision: fp8
  compute_precision: bf16
  max_model_len: 32768
gpu:
  preset: H100-80GB-SXM
replica:
  tensor_parallel: 2
workloads:
  - name: chat
    kind: interactive
    arrivals:
      weekday: [4, 4, 4, 4, 4, 4, 4, 4, 10, 12, 12, 12, 12, 12, 12, 12, 12, 10, 8, 6, 4, 4, 4, 4]
      weekend: [4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]
    tokens:
      input_mean: 2000
      input_p95: 6000
      output_mean: 400
      output_max: 1024
    targets:
      ttft_p95_seconds: 1.5
      tpot_p95_seconds: 0.050
      goodput_share: GOODPUT
redundancy: 1
"""


def newcomer(goodput: float = 0.995, extra: str = "") -> str:
    return NEWCOMER.replace("GOODPUT", f"{goodput:g}") + extra


@pytest.fixture(scope="module")
def plan():
    """The newcomer's plan at goodput 95 %, with a capacity set (reach reads no capacity)."""
    measured = newcomer(0.95, "capacity:\n  rps_per_replica: 1\n  source: manual\n")
    return estimate.parse_plan(measured, "newcomer.yaml")


def test_an_unreachable_share_is_refused_with_the_share_that_misses_alone_and_the_levers():
    with pytest.raises(PlanError) as raised:
        estimate.parse_plan(newcomer(0.995), "newcomer.yaml")
    text = str(raised.value)
    assert text.startswith("newcomer.yaml:1: capacity: not given, and goodput 99.5% of workload 'chat' is unreachable")
    assert "miss p95 TTFT 1.5 s on their prefill alone, on an idle replica" in text
    # Levers, each computed: the input cap, the share reachable as it stands, a larger TP.
    assert "cap inputs at " in text and "model.max_model_len: " in text
    assert "goodput_share at most 99." in text
    assert "tensor_parallel: 4 (prefill at 2x the FLOP/s)" in text
    assert "\n" not in text


def test_the_input_cap_is_the_longest_prompt_whose_prefill_alone_meets_the_target(plan):
    found = reach(plan)
    alone = Alone.of(plan)
    assert 0 < found.input_cap < found.longest_prompt
    assert alone.ttft(found.input_cap) <= 1.5 < alone.ttft(found.input_cap + 1)
    # The words' cap makes the share reachable: the plan so capped misses nothing on TTFT alone.
    capped = replace(plan, model=replace(plan.model, max_model_len=found.input_cap + 1024))
    assert reach(capped).ttft_missing == 0


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path, capsys):
    path = tmp_path / "newcomer.yaml"
    path.write_text(newcomer(0.995))
    assert main(["plan", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "is unreachable at any rate" in err
    assert "Traceback" not in err


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ttft=st.floats(0.05, 5.0),
    more=st.floats(1.0, 4.0),
    tpot=st.floats(0.005, 0.2),
)
def test_a_looser_target_never_leaves_more_requests_missing_alone(plan, ttft, more, tpot):
    def at(ttft_target: float, tpot_target: float):
        workload = plan.interactive[0]
        targets = replace(workload.targets, ttft_p95_seconds=ttft_target, tpot_p95_seconds=tpot_target)
        return reach(replace(plan, workloads=(replace(workload, targets=targets),)), draws=500)

    strict, loose = at(ttft, tpot), at(ttft * more, tpot * more)
    assert loose.missing <= strict.missing
    assert loose.input_cap >= strict.input_cap
    assert 0.0 <= strict.reachable_share <= 1.0
    assert strict.reachable == (strict.drawn - strict.missing >= math.ceil(0.95 * strict.drawn - 1e-9))


def test_a_reachable_plan_is_estimated_and_says_how_much_misses_alone(plan):
    reachable = replace(plan, capacity=Capacity(1.0, "estimate"))
    found = reach(reachable)
    assert found.reachable and found.missing > 0  # 95 %: the same tail, now within the share


def test_at_95_percent_the_newcomers_plan_is_estimated_within_2x_of_its_roofline_or_warned(tmp_path):
    from console.plan.sizing import size

    estimated = estimate.parse_plan(newcomer(0.95), str(tmp_path / "newcomer.yaml"))
    sized = size(estimated)
    assert estimated.capacity.estimated and estimated.capacity.low is not None
    ratio = estimated.capacity.rps_per_replica / sized.roofline_rps
    warned = any("roofline" in warning for warning in sized.warnings)
    assert 0.5 <= ratio <= 2.0 or warned
    assert "0.8% of requests miss a target even alone" in estimated.capacity.note  # the same tail, within 5 %
