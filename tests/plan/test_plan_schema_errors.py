"""Strict loading: each kind of bad plan gives one line naming file, line, key and what was expected; exit 2."""

from __future__ import annotations

import re

import pytest
import yaml

from console.errors import UserError
from console.plan.schema import PlanError, load_plan, parse_plan

from conftest import BASE_PLAN, changed


def _error(capcon, path) -> str:
    code, out, err = capcon("plan", path)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _line_of(path, needle: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def test_unknown_key_names_its_path_line_and_the_allowed_keys(write_plan, capcon):
    path = write_plan({"model": {"layer_count": 32}})
    message = _error(capcon, path)
    assert message.startswith(f"capcon plan: {path}:{_line_of(path, 'layer_count')}: model.layer_count: unknown key")
    assert "expected one of name, parameters, layers" in message


def test_unknown_top_level_key(write_plan, capcon):
    path = write_plan({"replicas": 3})
    assert f":{_line_of(path, 'replicas:')}: replicas: unknown key" in _error(capcon, path)


def test_missing_field(write_plan, capcon):
    path = write_plan({"model": {"kv_heads": None}})
    message = _error(capcon, path)
    assert "model: missing key 'kv_heads'" in message
    assert re.search(rf"{re.escape(str(path))}:\d+: ", message)


def test_missing_section(write_plan, capcon):
    path = write_plan({"gpu": None})
    assert "missing key 'gpu'" in _error(capcon, path)


@pytest.mark.parametrize(
    "changes,needle,where,expected",
    [
        ({"model": {"layers": "eighty"}}, "layers:", "model.layers: got eighty", "a whole number >= 1"),
        ({"model": {"layers": 32.5}}, "layers:", "model.layers: got 32.5", "a whole number >= 1"),
        ({"gpu": {"price_per_hour": "cheap"}}, "price_per_hour", "gpu.price_per_hour: got cheap", "a number >= 0"),
        ({"capacity": {"rps_per_replica": [5]}}, "rps_per_replica", "capacity.rps_per_replica: got a list", "a number"),
        ({"data": {"prompts_may_leave": "maybe"}}, "prompts_may_leave", "data.prompts_may_leave", "true or false"),
        (
            {"model": {"weight_precision": "int3"}},
            "weight_precision",
            "model.weight_precision: got int3",
            "one of fp16",
        ),
        ({"model": "llama"}, "model:", "model: got llama", "a mapping with keys name, parameters"),
        ({"workloads": {"name": "chat"}}, "workloads:", "workloads: got a mapping", "a list of workloads"),
    ],
)
def test_wrong_type(write_plan, capcon, changes, needle, where, expected):
    path = write_plan(changes)
    message = _error(capcon, path)
    assert f":{_line_of(path, needle)}: {where}" in message
    assert f"expected {expected}" in message


@pytest.mark.parametrize(
    "changes,where,expected",
    [
        (
            {"capacity": {"rps_per_replica": 0}},
            "capacity.rps_per_replica: got 0",
            "a number >= 0.001 and <= 100000 requests per second per replica",
        ),
        ({"capacity": {"rps_per_replica": -5}}, "capacity.rps_per_replica: got -5", "a number >= 0.001"),
        ({"model": {"head_dim": 0}}, "model.head_dim: got 0", "a whole number >= 1"),
        ({"model": {"parameters": -8}}, "model.parameters: got -8", "a positive count"),
        ({"gpu": {"memory_gb": 0}}, "gpu.memory_gb: got 0", "a number > 0"),
        ({"replica": {"usable_memory_share": 1.2}}, "replica.usable_memory_share: got 1.2", "at most 1"),
        ({"replica": {"bandwidth_efficiency": 0}}, "replica.bandwidth_efficiency: got 0", "a number >= 0.01 and <= 1"),
        ({"redundancy": -1}, "redundancy: got -1", "a whole number >= 0"),
        ({"lead_time_minutes": -3}, "lead_time_minutes: got -3", "a number >= 0"),
    ],
)
def test_not_positive_where_positive_is_needed(write_plan, capcon, changes, where, expected):
    message = _error(capcon, write_plan(changes))
    assert where in message and f"expected {expected}" in message


def test_negative_rps_in_an_arrival_profile(write_plan, capcon):
    weekday = [4.0] * 24
    weekday[7] = -1
    workload = changed(BASE_PLAN["workloads"][0], {"arrivals": {"weekday": weekday}})
    message = _error(capcon, write_plan({"workloads": [workload]}))
    assert "workloads[0].arrivals.weekday[7]: got -1; expected a number >= 0" in message


def test_wrong_number_of_hours(write_plan, capcon):
    workload = changed(BASE_PLAN["workloads"][0], {"arrivals": {"weekend": [1.0] * 23}})
    message = _error(capcon, write_plan({"workloads": [workload]}))
    assert "workloads[0].arrivals.weekend: 23 values; expected 24 values" in message


def test_unknown_preset_lists_the_presets(write_plan, capcon):
    path = write_plan({"gpu": {"preset": "H100X"}})
    message = _error(capcon, path)
    assert f":{_line_of(path, 'H100X')}: gpu.preset: unknown GPU preset 'H100X'" in message
    assert "expected one of H100-80GB-SXM" in message and "L4-24GB" in message


def test_gpu_without_preset_needs_all_figures(write_plan, capcon):
    message = _error(capcon, write_plan({"gpu": {"preset": None, "memory_gb": 80, "bandwidth_tb_s": 2}}))
    assert "gpu: missing key 'tflops_bf16'" in message


def test_yaml_syntax_error_has_its_line(write_plan, capcon):
    text = "name: x\nmodel:\n  name: m\n  layers: [32\n  kv_heads: 8\n"
    path = write_plan(text=text)
    message = _error(capcon, path)
    assert re.match(rf"capcon plan: {re.escape(str(path))}:\d+: YAML syntax error: .+; expected valid YAML$", message)
    line = int(message.split(":")[2])
    assert 4 <= line <= 5


def test_tab_indentation_is_a_syntax_error(write_plan, capcon):
    message = _error(capcon, write_plan(text="model:\n\tname: m\n"))
    assert ":2: YAML syntax error" in message


def test_empty_file_and_missing_file(write_plan, capcon, tmp_path):
    assert "the file is empty" in _error(capcon, write_plan(text=""))
    assert "no such file" in _error(capcon, tmp_path / "nope.yaml")
    assert "is a directory" in _error(capcon, tmp_path)


def test_a_key_given_twice(write_plan, capcon):
    text = yaml.safe_dump(BASE_PLAN).replace("redundancy", "x") + "capacity: {rps_per_replica: 3, source: manual}\n"
    message = _error(capcon, write_plan(text=text))
    assert "capacity: key given twice; expected each key once" in message


def test_tensor_parallel_must_be_auto_or_a_power_of_two(write_plan, capcon):
    message = _error(capcon, write_plan({"replica": {"tensor_parallel": 3}}))
    assert "replica.tensor_parallel: got 3; expected auto or one of 1, 2, 4, 8" in message


def test_token_statistics_must_be_consistent(write_plan, capcon):
    workload = changed(BASE_PLAN["workloads"][0], {"tokens": {"input_p95": 500}})
    message = _error(capcon, write_plan({"workloads": [workload]}))
    assert "workloads[0].tokens.input_p95: p95 500 is below the mean 1000; expected p95 >= mean" in message


def test_arrivals_need_one_form(write_plan, capcon):
    workload = changed(BASE_PLAN["workloads"][0], {"arrivals": {"week": [[1.0] * 24] * 7}})
    message = _error(capcon, write_plan({"workloads": [workload]}))
    assert "week given with weekday/weekend" in message


def test_a_week_table_needs_seven_days(write_plan, capcon):
    workload = changed(
        BASE_PLAN["workloads"][0], {"arrivals": {"weekday": None, "weekend": None, "week": [[1.0] * 24] * 6}}
    )
    message = _error(capcon, write_plan({"workloads": [workload]}))
    assert "workloads[0].arrivals.week: 6 values; expected 7 rows" in message


def test_a_plan_needs_an_interactive_workload(write_plan, capcon):
    workload = changed(BASE_PLAN["workloads"][0], {"kind": "deferrable"})
    assert "no interactive workload" in _error(capcon, write_plan({"workloads": [workload]}))


def test_hosted_overflow_must_respect_the_data_rules(write_plan, capcon):
    path = write_plan({"overflow": {"mode": "hosted", "hosted_url": "https://api.example.com/v1"}})
    assert "hosted overflow, but data.prompts_may_leave is false" in _error(capcon, path)


def test_fleet_needs_exactly_one_source(write_plan, capcon):
    both = {"fleet": {"targets": ["http://127.0.0.1:8000"], "prometheus_url": "http://127.0.0.1:9090"}}
    assert "fleet: needs exactly one source" in _error(capcon, write_plan(both))
    path = write_plan({"fleet": {"targets": ["http://127.0.0.1:8000", "ftp://127.0.0.1:8000"]}})
    message = _error(capcon, path)
    assert message.startswith(
        f"capcon plan: {path}:{_line_of(path, 'ftp://')}: fleet.targets[1]: got 'ftp://127.0.0.1:8000': "
    )
    assert "scheme 'ftp' is not http or https; expected host:port or an http(s) URL" in message
    assert "fleet.targets[0]: got 'http://:8000': no host or port" in _error(
        capcon, write_plan({"fleet": {"targets": ["http://:8000"]}})
    )


def test_fleet_targets_take_the_forms_target_takes(write_plan):
    """host:port, as `--target` takes it, is a target in a plan too."""
    forms = ["127.0.0.1:18712", "http://10.0.0.5:8000", "https://vllm.internal/custom/metrics"]
    plan = load_plan(write_plan({"fleet": {"targets": forms}}))
    assert plan.fleet.targets == tuple(forms)


@pytest.mark.parametrize(
    "tokens,where,expected",
    [
        ({"output_max": 200}, "workloads[0].tokens.output_max: max 200 is below the mean 300", "max >= mean"),
        ({"input_p95": 999}, "workloads[0].tokens.input_p95: p95 999 is below the mean 1000", "p95 >= mean"),
    ],
)
def test_token_maxima_below_their_means(write_plan, capcon, tokens, where, expected):
    workload = changed(BASE_PLAN["workloads"][0], {"tokens": tokens})
    path = write_plan({"workloads": [workload]})
    message = _error(capcon, path)
    key = next(iter(tokens))
    assert f"{path}:{_line_of(path, key)}: {where}; expected {expected}" in message


@pytest.mark.parametrize("share", [99, 1.01, 0, -0.5])
def test_goodput_share_is_a_share(write_plan, capcon, share):
    workload = changed(BASE_PLAN["workloads"][0], {"targets": {"goodput_share": share}})
    path = write_plan({"workloads": [workload]})
    message = _error(capcon, path)
    expected = "at most 1" if share > 1 else "a number > 0 and <= 1"
    assert (
        f"{path}:{_line_of(path, 'goodput_share')}: workloads[0].targets.goodput_share: got {share:g}; expected {expected}"
        in message
    )


def test_goodput_share_of_one_is_accepted(write_plan):
    workload = changed(BASE_PLAN["workloads"][0], {"targets": {"goodput_share": 1}})
    assert load_plan(write_plan({"workloads": [workload]})).workloads[0].targets.goodput_share == 1.0


def test_plan_error_is_a_user_error_from_the_pure_loader(tmp_path):
    with pytest.raises(PlanError) as caught:
        parse_plan("model: {}\n", "inline.yaml")
    assert isinstance(caught.value, UserError)
    assert str(caught.value) == "inline.yaml:1: missing key 'gpu'; expected gpu to be set"
    with pytest.raises(PlanError):
        load_plan(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    "line, tag",
    [
        ("  layers: !!int abc", "!!int 'abc'"),  # a tag whose value does not hold
        ("  layers: !!python/object:os.system x", "!!python/object:os.system 'x'"),  # a tag safe loading refuses
    ],
)
def test_explicit_yaml_tags_that_do_not_hold_are_one_line(tmp_path, capcon, line, tag):
    lines = yaml.safe_dump(BASE_PLAN, default_flow_style=False, width=1000).splitlines()
    index = next(i for i, text in enumerate(lines) if text.strip().startswith("layers:"))
    lines[index] = line
    path = tmp_path / "tagged.yaml"
    path.write_text("\n".join(lines) + "\n")
    message = _error(capcon, path)
    assert f"{path}:{index + 1}: model.layers: got " in message
    assert tag in message
    assert "expected a whole number >= 1" in message


def test_lead_time_longer_than_a_day_is_refused(write_plan, capcon):
    path = write_plan({"lead_time_minutes": 100000})
    message = _error(capcon, path)
    assert f":{_line_of(path, 'lead_time_minutes')}: lead_time_minutes: got 100000" in message
    assert "expected at most 1440 minutes" in message
