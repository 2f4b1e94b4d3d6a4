"""`capcon plan` output: the JSON keys scripts rely on, the text report's figures and its warnings in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import BASE_PLAN, changed

PLANS = Path(__file__).resolve().parents[2] / "plans"

ISSUE_KEYS = {
    "kv_bytes_per_token", "weight_bytes", "gpus_per_replica", "usable_bytes_per_replica", "kv_budget_bytes",
    "time_in_system_seconds", "concurrency", "kv_needed_bytes", "kv_margin_share", "decode_step_seconds",
    "stream_tokens_per_second", "aggregate_decode_tokens_per_second", "required_decode_tokens_per_second",
    "prefill_flops_per_second", "single_stream_ceiling_tokens_per_second", "replicas_for_peak",
    "replicas_with_redundancy", "fleet_cost_per_hour", "cost_per_million_tokens_peak", "cost_per_million_tokens_mean",
    "expected_decode_step_seconds", "expected_stream_tokens_per_second", "expected_aggregate_decode_tokens_per_second",
}  # fmt: skip
SCHEDULE_KEYS = {"replicas_by_hour", "gpu_hours_month_schedule", "gpu_hours_month_always_on", "saving_share"}


@pytest.mark.parametrize("plan", sorted(PLANS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_plan_reports_in_text_and_json(capcon, plan):
    code, text, err = capcon("plan", plan, "--schedule")
    assert code == 0 and err == ""
    for heading in ("Memory (one replica)", "At the peak, per replica", "Fleet and cost", "Week schedule"):
        assert heading in text
    code, out, _ = capcon("plan", plan, "--json", "--schedule")
    figures = json.loads(out)
    assert figures.keys() >= ISSUE_KEYS | SCHEDULE_KEYS
    assert all(isinstance(figures[k], (int, float)) for k in ISSUE_KEYS - {"kv_margin_share"})


def test_schedule_keys_only_with_schedule(plan_json):
    figures = plan_json(PLANS / "assistant-70b.yaml")
    assert figures.keys() >= ISSUE_KEYS
    assert not SCHEDULE_KEYS & figures.keys()
    assert isinstance(figures["warnings"], list)


def test_text_report_shows_ideal_and_expected_side_by_side_with_inputs(capcon):
    code, text, _ = capcon("plan", PLANS / "assistant-70b.yaml")
    assert code == 0
    lines = text.splitlines()
    step = next(line for line in lines if line.strip().startswith("decode step"))
    assert "30.4 ms" in step and "51.4 ms" in step and "2.00 TB/s" in step and "35.0 GB weights" in step
    kv = next(line for line in lines if line.strip().startswith("KV per token"))
    assert "327,680 B" in kv and "80 layers" in kv and "8 KV heads" in kv
    assert any("ideal" in line and "expected" in line and "x 0.7" in line for line in lines)
    cost = next(line for line in lines if line.strip().startswith("per M tokens, mean"))
    assert "$4.63" in cost and "2.16 M output tokens/h" in cost


def _warnings(plan_json, write_plan, changes) -> list[str]:
    return plan_json(write_plan(changes))["warnings"]


def test_a_comfortable_plan_has_no_warnings(plan_json, write_plan):
    # 8B in bf16 on an H100 SXM: a capacity within 2x of its roofline (27.1 rps, compute-bound).
    assert _warnings(plan_json, write_plan, {"capacity": {"rps_per_replica": 20}}) == []


def test_a_capacity_far_under_the_roofline_is_warned_with_the_limit_each_sees(plan_json, write_plan):
    found = _warnings(plan_json, write_plan, {"capacity": {"rps_per_replica": 5}})
    (warning,) = [w for w in found if "under the roofline" in w]
    assert warning.startswith("hand-written capacity is 5.4x under the roofline: 5.00 rps per replica")
    assert "it sees compute" in warning and "what was written in the plan" in warning


def test_a_capacity_far_over_the_roofline_is_called_optimistic(plan_json, write_plan):
    found = _warnings(plan_json, write_plan, {"capacity": {"rps_per_replica": 60}})
    (warning,) = [w for w in found if "optimistic" in w]
    assert warning.startswith("hand-written capacity looks optimistic: 60.0 rps per replica")
    assert "2.2x the roofline's 27.1 rps" in warning


def test_warns_when_weights_do_not_fit(plan_json, write_plan):
    changes = {"model": {"parameters": "70B"}, "gpu": {"preset": "L4-24GB"}, "replica": {"tensor_parallel": 2}}
    found = _warnings(plan_json, write_plan, changes)
    assert any(w.startswith("does not fit: 140.0 GB of weights exceed the 43.2 GB usable") for w in found)


def test_warns_when_decode_has_no_margin(plan_json, write_plan):
    # 8B BF16 on an L4: a step reads 16 GB at 300 GB/s, over 50 ms before any KV.
    found = _warnings(plan_json, write_plan, {"gpu": {"preset": "L4-24GB"}, "capacity": {"rps_per_replica": 1}})
    assert any(w.startswith("no decode margin") for w in found)
    assert any(w.startswith("streaming under target") for w in found)


def test_warns_about_prefill_bursts(plan_json, write_plan):
    workload = changed(BASE_PLAN["workloads"][0], {"tokens": {"input_mean": 30000, "input_p95": 60000}})
    changes = {"workloads": [workload], "model": {"max_model_len": None}}
    found = _warnings(plan_json, write_plan, changes)
    assert any(w.startswith("prefill will push streaming under target during bursts") for w in found)


def test_warns_without_redundancy(plan_json, write_plan):
    found = _warnings(plan_json, write_plan, {"redundancy": 0})
    assert any(w.startswith("no redundancy") for w in found)


def test_advises_a_context_cap(plan_json, write_plan):
    found = _warnings(plan_json, write_plan, {"model": {"max_model_len": None}})
    assert any(w.startswith("context cap advised: no model.max_model_len") and "4,000 tokens" in w for w in found)
    found = _warnings(plan_json, write_plan, {"model": {"max_model_len": 131072}})
    assert any(w.startswith("context cap advised: one request at max_model_len 131,072") for w in found)


def test_warns_when_kv_cannot_hold_the_peak(plan_json, write_plan):
    # 8B on an L4 holds 5.6 GB of KV; long contexts at 4 rps need far more.
    workload = changed(BASE_PLAN["workloads"][0], {"tokens": {"input_mean": 6000, "input_p95": 7000}})
    changes = {"workloads": [workload], "gpu": {"preset": "L4-24GB"}, "replica": {"tensor_parallel": 1}}
    found = _warnings(plan_json, write_plan, changes)
    assert any(w.startswith("KV cache short") for w in found)


def test_warnings_are_printed_in_the_text_report(capcon, write_plan):
    code, text, _ = capcon("plan", write_plan({"redundancy": 0}))
    assert code == 0
    assert "Warnings (judged on the expected figures)" in text
    assert "  ! no redundancy:" in text


def test_help_text_lists_options_presets_and_exit_status(capsys):
    from console.cli import main

    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = capsys.readouterr().out
    for needle in ("--schedule", "--json", "FILE", "H100-80GB-SXM", "L4-24GB", "exit status", "expected_*"):
        assert needle in text


# --- several plans in one run ------------------------------------------------


def test_several_plans_give_one_report_each_in_order_each_under_its_heading(capcon):
    first, second = PLANS / "chat-8b-l40s.yaml", PLANS / "assistant-70b.yaml"
    code, text, err = capcon("plan", first, second, "--schedule")
    assert code == 0 and err == ""
    headings = [line for line in text.splitlines() if line.startswith("capcon plan: ")]
    assert headings == [f"capcon plan: chat-8b-l40s  ({first})", f"capcon plan: assistant-70b  ({second})"]
    alone = [capcon("plan", path, "--schedule")[1] for path in (first, second)]
    assert text == "\n".join(alone)  # each report exactly as it prints alone, a blank line between


def test_several_plans_in_json_are_one_entry_each_as_watch_once_gives_several_fleets(capcon, plan_json):
    first, second = PLANS / "chat-8b-l40s.yaml", PLANS / "assistant-70b.yaml"
    code, out, err = capcon("plan", first, second, "--json", "--schedule")
    assert code == 0, err
    report = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert list(report) == ["plans"]
    a, b = report["plans"]
    assert (a["plan"], a["plan_file"], b["plan"], b["plan_file"]) == (
        "chat-8b-l40s",
        str(first),
        "assistant-70b",
        str(second),
    )
    for entry, path in ((a, first), (b, second)):
        alone = plan_json(path, "--schedule")
        assert {k: v for k, v in entry.items() if k not in ("plan", "plan_file")} == alone
    alone = plan_json(first)  # one file: the object as before, not wrapped
    assert alone.keys() >= ISSUE_KEYS and "plans" not in alone and "plan_file" not in alone


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_bad_plan_among_several_stops_with_its_file_and_line_and_prints_nothing(capcon, write_plan, json_flag):
    good = PLANS / "chat-8b-l40s.yaml"
    bad = write_plan({"model": {"layers": 0}}, name="bad.yaml")
    code, out, err = capcon("plan", good, bad, good, *json_flag)
    assert code == 2 and out == ""
    assert err.startswith(f"capcon plan: {bad}:") and "model.layers: got 0; expected a whole number >= 1" in err
    assert err.count("\n") == 1


def test_a_missing_plan_among_several_is_named(capcon, tmp_path):
    code, out, err = capcon("plan", PLANS / "chat-8b-l40s.yaml", tmp_path / "nope.yaml")
    assert code == 2 and out == ""
    assert err == f"capcon plan: {tmp_path / 'nope.yaml'}: no such file; expected a plan file (YAML)\n"
