"""Values a unit slip makes (a TPOT of 60 meant as ms, GB/s in a TB/s field, a price of 0): refused with their
reading and a guess at what was meant, unless the plan lists the key under `unusual:`."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from console.plan.limits import LIMITS, UNUSUAL
from console.plan.schema import PlanError, parse_plan

from conftest import BASE_PLAN, changed


def _plan_with(path: str, value: float, meant: list[str] | None = None) -> dict:
    """BASE_PLAN with the value at `path` (as UNUSUAL names it, [] as the first item) set to `value`."""
    plan = copy.deepcopy(BASE_PLAN)
    keys = path.replace("[]", ".0").split(".")
    node: dict | list = plan
    for key in keys[:-1]:
        if key == "0":
            node = node[0]  # type: ignore[index]
        else:
            node = node.setdefault(key, {})  # type: ignore[union-attr]
    node[keys[-1]] = value  # type: ignore[index]
    if meant is not None:
        plan["unusual"] = meant
    return plan


def _parse(plan: dict) -> object:
    return parse_plan(yaml.safe_dump(plan, default_flow_style=None, width=1000), "plan.yaml")


def test_a_tpot_target_written_in_ms_is_refused_with_its_reading_and_the_guess(write_plan, capcon):
    path = write_plan({"workloads": [changed(BASE_PLAN["workloads"][0], {"targets": {"tpot_p95_seconds": 60}})]})
    code, out, err = capcon("plan", path)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "tpot_p95_seconds" in text)
    assert (code, out) == (2, "")
    assert err == (
        f"capcon plan: {path}:{line}: workloads[0].targets.tpot_p95_seconds: 60 is 60 s per token; did you mean "
        "0.060 (60 ms)? expected at most 1 s per token, or workloads[0].targets.tpot_p95_seconds listed under "
        "unusual: if it is meant\n"
    )


def test_the_override_accepts_the_value_as_written(write_plan, capcon):
    workload = changed(BASE_PLAN["workloads"][0], {"targets": {"tpot_p95_seconds": 60}})
    path = write_plan({"workloads": [workload], "unusual": ["workloads[0].targets.tpot_p95_seconds"]})
    code, _, err = capcon("plan", path)
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    "path, value, words",
    [
        ("workloads[].targets.ttft_p95_seconds", 1500, "1500 is 1500 s (25 min) to the first token; did you mean 1.5"),
        ("gpu.bandwidth_tb_s", 864, "864 is 864 TB/s; did you mean 0.864 (864 GB/s)?"),
        ("gpu.bandwidth_tb_s", 3350, "got 3350 (did you mean 3.35 (3350 GB/s)?); expected at most 1000 TB/s"),
        ("gpu.tflops_bf16", 9.89e14, "did you mean 989 (9.89e14 FLOP/s)?"),
        ("gpu.memory_gb", 8192, "8192 is 8192 GB a GPU; did you mean 8.59 (8192 MiB is 8.59 GB)?"),
        ("gpu.memory_gb", 8e10, "did you mean 80 (8e10 bytes)?"),
        ("gpu.price_per_hour", 0, "0 is a GPU for free: every cost reads 0; did you mean the price of a GPU-hour"),
        ("gpu.price_per_hour", 1500, "1500 is 1500 dollars a GPU-hour; did you mean 2.05 (1500 a month"),
        ("lead_time_minutes", 600, "600 is 600 minutes (10 h) to bring a replica up; did you mean 10 (600 seconds)?"),
        ("workloads[].queue_seconds", 5000, "5000 is 5000 s (83.3 min) in the queue; did you mean 5 (5000 ms)?"),
    ],
)
def test_each_slip_reads_back_what_was_written_and_what_was_meant(path, value, words):
    with pytest.raises(PlanError) as refused:
        _parse(_plan_with(path, value))
    assert words in str(refused.value)


def test_a_mean_prompt_longer_than_the_context_is_refused_unless_meant():
    plan = _plan_with("workloads[].tokens.input_mean", 10_000)
    plan["workloads"][0]["tokens"]["input_p95"] = 20_000
    with pytest.raises(PlanError) as refused:
        _parse(plan)
    assert (
        "workloads[0].tokens.input_mean: 10000 is a mean prompt of 10000 tokens, over model.max_model_len (8,192); "
        "did you mean 2500 (characters at about 4 a token), or max_model_len: 21000?"
    ) in str(refused.value)
    plan["unusual"] = ["workloads[].tokens.input_mean"]
    _parse(plan)


def test_an_unusual_entry_that_names_no_checked_value_is_refused(write_plan, capcon):
    path = write_plan({"unusual": ["gpu.memroy_gb"]})
    code, _, err = capcon("plan", path)
    assert code == 2
    assert "unusual[0]: 'gpu.memroy_gb' has no unusual range; expected one of workloads[].targets" in err


# Property: the whole region between a field's usual range and its bound -----------------------------------------


def _region(path: str) -> st.SearchStrategy[float]:
    rule, limit = UNUSUAL[path], LIMITS[path]
    high = st.floats(rule.high, limit.high, exclude_min=True, allow_nan=False).filter(lambda v: v > rule.high)
    return st.one_of(high, st.just(rule.low)) if rule.low > -float("inf") else high


@settings(max_examples=150, deadline=None)
@given(data=st.data(), path=st.sampled_from(sorted(UNUSUAL)), generic=st.booleans())
def test_any_value_far_outside_its_field_is_refused_with_a_guess_and_accepted_when_meant(data, path, generic):
    value = data.draw(_region(path))
    with pytest.raises(PlanError) as refused:
        _parse(_plan_with(path, value))
    message = str(refused.value)
    assert "\n" not in message and "; did you mean " in message and "listed under unusual:" in message
    named = path if generic else path.replace("[]", "[0]")
    assert named.replace("[]", "[0]") in message
    _parse(_plan_with(path, value, meant=[named]))
