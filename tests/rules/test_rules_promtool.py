"""The rule file through promtool: `check rules` passes, and `test rules` fires what the console flags, in its words.

The unit test feeds Prometheus series to promtool and asks for the alerts at a moment; the
expected annotations are what console.fleet.flags says for the same figures (computed here
from the same counters and buckets), so a change of wording on either side fails here.
"""

from __future__ import annotations

import pytest
import yaml

from console.engines.rules import ALERT_FLAGS
from console.fleet.flags import FlagInputs, Thresholds, readings
from console.fleet.plan_now import plan_now
from console.metrics.figures import FLEET_TOTAL, Figures, FleetFigures, ReplicaState
from console.metrics.window import histogram_quantile
from console.plan.schema import load_plan
from tests.plan.conftest import BASE_PLAN

from .conftest import plan_file, rules_text

EVAL = 180  # seconds after the start of the test's series (1970-01-01 00:00 UTC, a Thursday)
STEP = 15  # seconds between the series' samples
# TTFT and TPOT observations per step, all in one bucket: p95 is interpolated inside it.
TTFT_BOUNDS = (0.5, 1.0, 2.5, float("inf"))
TPOT_BOUNDS = (0.025, 0.05, 0.1, float("inf"))


def counter(per_step: float, steps: int = 40) -> str:
    return f"0+{per_step:g}x{steps}"


def histogram(name: str, bounds, per_step: tuple[float, ...], instance: str) -> list[dict]:
    out = []
    for bound, count in zip(bounds, per_step):
        le = "+Inf" if bound == float("inf") else f"{bound:g}"
        out.append({"series": f'{name}_bucket{{job="vllm",instance="{instance}",le="{le}"}}', "values": counter(count)})
    return out


def busy_fleet_series() -> list[dict]:
    """Replica a:8000 queued with its KV full and preempting, 20 requests/s; b:8000 down."""
    a = "a:8000"
    series = [
        {"series": f'up{{job="vllm",instance="{a}"}}', "values": "1x40"},
        {"series": 'up{job="vllm",instance="b:8000"}', "values": "0x40"},
        {"series": f'vllm:num_requests_waiting{{job="vllm",instance="{a}",engine="0"}}', "values": "3x40"},
        {"series": f'vllm:num_requests_running{{job="vllm",instance="{a}",engine="0"}}', "values": "8x40"},
        {"series": f'vllm:kv_cache_usage_perc{{job="vllm",instance="{a}",engine="0"}}', "values": "0.95x40"},
        # An OpenMetrics-escaped counter: the rules read both spellings.
        {"series": f'vllm_num_preemptions_total{{job="vllm",instance="{a}",engine="0"}}', "values": counter(7.5)},
        {
            "series": f'vllm:request_success_total{{job="vllm",instance="{a}",engine="0",finished_reason="stop"}}',
            "values": counter(300),
        },
    ]
    series += histogram("vllm:time_to_first_token_seconds", TTFT_BOUNDS, (0, 0, 300, 300), a)
    series += histogram("vllm:request_time_per_output_token_seconds", TPOT_BOUNDS, (0, 150, 300, 300), a)
    return series


def console_words(plan_path) -> dict[str, tuple[str, str, str]]:
    """flag id -> (severity, why, todo) the console gives for the figures the series above make."""
    plan = load_plan(str(plan_path))
    a = Figures(
        name="a:8000",
        url="a:8000",
        state=ReplicaState.UP,
        waiting=3.0,
        running=8.0,
        kv_usage=0.95,
        preemptions_per_second=7.5 / STEP,
        requests_per_second=300 / STEP,
    )
    b = Figures(
        name="b:8000",
        url="b:8000",
        state=ReplicaState.DOWN,
        error="Prometheus' last scrape of this target failed (up == 0)",
    )
    fleet = Figures(
        name=FLEET_TOTAL,
        url="",
        state=ReplicaState.UP,
        requests_per_second=300 / STEP,
        ttft_p95_seconds=histogram_quantile(0.95, TTFT_BOUNDS, (0, 0, 20, 20)),
        tpot_p95_seconds=histogram_quantile(0.95, TPOT_BOUNDS, (0, 10, 20, 20)),
    )
    found = readings(
        FlagInputs(FleetFigures(60.0, "prometheus", (a, b), fleet, EVAL), plan_now(plan, EVAL)), Thresholds()
    )
    return {r.id: (r.severity, r.why, r.todo) for r in found if r.raise_}


def saturation_words(plan_path, waiting: float, kv: float) -> dict[str, str]:
    """The console's why and todo for a replica a:8000 with `waiting` and `kv` (no preemptions), raised or not."""
    plan = load_plan(str(plan_path))
    a = Figures(name="a:8000", url="a:8000", state=ReplicaState.UP, waiting=waiting, kv_usage=kv)
    fleet = Figures(name=FLEET_TOTAL, url="", state=ReplicaState.UP)
    found = readings(
        FlagInputs(FleetFigures(60.0, "prometheus", (a,), fleet, EVAL), plan_now(plan, EVAL)), Thresholds()
    )
    (reading,) = [r for r in found if r.kind == "saturation"]
    return {"why": reading.why, "do": reading.todo}


def unit_test(rules_name: str, series: list[dict], alerts: list[dict], eval_time: int = EVAL) -> str:
    return yaml.safe_dump(
        {
            "rule_files": [rules_name],
            "evaluation_interval": f"{STEP}s",
            "tests": [
                {
                    "interval": f"{STEP}s",
                    "input_series": series,
                    "alert_rule_test": [dict(alert, eval_time=f"{eval_time}s") for alert in alerts],
                }
            ],
        },
        sort_keys=False,
        width=1_000_000,
    )


def test_check_rules_passes_for_every_shipped_plan(tmp_path, promtool):
    from tests.plan.conftest import PLANS

    for path in sorted(PLANS.glob("*.yaml")):
        rules = tmp_path / f"{path.stem}.yml"
        rules.write_text(rules_text(path))
        done = promtool("check", "rules", str(rules))
        assert done.returncode == 0, (path.name, done.stdout, done.stderr)
        assert "SUCCESS" in done.stdout


def test_alerts_fire_with_the_consoles_words(tmp_path, promtool):
    path = plan_file(tmp_path)
    (tmp_path / "rules.yml").write_text(rules_text(path, first_year=1970))
    words = console_words(path)
    name = load_plan(str(path)).name
    expected_kinds = {
        "saturation:a:8000",
        "replica_down:b:8000",
        "slo_breach_ttft:" + FLEET_TOTAL,
        "slo_breach_tpot:" + FLEET_TOTAL,
        "above_plan:" + FLEET_TOTAL,
        "n_plus_1_at_risk:" + FLEET_TOTAL,
        "schedule_lag:" + FLEET_TOTAL,
    }
    assert expected_kinds <= set(words), sorted(words)
    alerts = []
    for alert, kind in ALERT_FLAGS.items():
        ids = [i for i in words if i.split(":", 1)[0] == kind]
        exp = []
        for flag_id in ids:
            severity, why, todo = words[flag_id]
            labels = {"severity": severity, "capcon_plan": name, "capcon_flag": kind}
            subject = flag_id.split(":", 1)[1]
            if subject != FLEET_TOTAL:
                labels["instance"] = subject
            exp.append({"exp_labels": labels, "exp_annotations": {"why": why, "do": todo}})
        alerts.append({"alertname": alert, "exp_alerts": exp})
    (tmp_path / "test.yml").write_text(unit_test("rules.yml", busy_fleet_series(), alerts))
    done = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_for_holds_an_alert_pending_as_the_console_holds_a_flag(tmp_path, promtool):
    """30 s after the figures turn, the console shows nothing yet and Prometheus fires nothing yet."""
    path = plan_file(tmp_path)
    (tmp_path / "rules.yml").write_text(rules_text(path, first_year=1970))
    series = [
        {"series": 'up{job="vllm",instance="a:8000"}', "values": "1x40"},
        {"series": 'up{job="vllm",instance="c:8000"}', "values": "1x40"},
        # Idle, then 3 waiting from 120 s on: pending at 135 s (15 s), firing from 150 s (30 s).
        {"series": 'vllm:num_requests_waiting{job="vllm",instance="a:8000"}', "values": "0x7 3x30"},
        {"series": 'vllm:kv_cache_usage_perc{job="vllm",instance="a:8000"}', "values": "0.2x40"},
    ]
    tests = []
    for at, firing in ((135, False), (150, True)):
        exp = []
        if firing:
            labels = {"severity": "warning", "capcon_plan": "base", "capcon_flag": "saturation", "instance": "a:8000"}
            exp = [{"exp_labels": labels, "exp_annotations": saturation_words(path, 3.0, 0.2)}]
        tests.append({"alertname": "CapconSaturation", "eval_time": f"{at}s", "exp_alerts": exp})
    document = yaml.safe_load(unit_test("rules.yml", series, []))
    document["tests"][0]["alert_rule_test"] = tests
    (tmp_path / "test.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    done = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "values, firing_at_end",
    [
        ("3x12 0.7x20", True),  # firing, then between the clear (0.5) and raise (1) lines: stays, as a flag does
        ("3x12 0.3x20", False),  # below the clear line: resolved
        ("0x8 3x1 0.7x20", False),  # raised for 15 s only (pending), then in the band: dropped, never fired
    ],
)
def test_clear_thresholds_hold_as_the_consoles_hysteresis(tmp_path, promtool, values, firing_at_end):
    path = plan_file(tmp_path)
    (tmp_path / "rules.yml").write_text(rules_text(path, first_year=1970))
    series = [
        {"series": 'up{job="vllm",instance="a:8000"}', "values": "1x40"},
        {"series": 'up{job="vllm",instance="c:8000"}', "values": "1x40"},
        {"series": 'vllm:num_requests_waiting{job="vllm",instance="a:8000"}', "values": values},
        {"series": 'vllm:gpu_cache_usage_perc{job="vllm",instance="a:8000"}', "values": "0.2x40"},  # the old KV name
    ]
    labels = {"severity": "warning", "capcon_plan": "base", "capcon_flag": "saturation", "instance": "a:8000"}
    expected = [{"exp_labels": labels, "exp_annotations": saturation_words(path, 0.7, 0.2)}] if firing_at_end else []
    alerts = [{"alertname": "CapconSaturation", "exp_alerts": expected}]
    (tmp_path / "test.yml").write_text(unit_test("rules.yml", series, alerts, eval_time=450))
    done = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_plan_name_with_template_and_quote_characters_is_the_alerts_label_as_is(tmp_path, promtool):
    name = 'chat "eu" {{ .x }} `a` %d \\ ü 🚀'
    path = plan_file(tmp_path, {"name": name})
    (tmp_path / "rules.yml").write_text(rules_text(path, first_year=1970))
    series = [
        {"series": 'up{job="vllm",instance="a:8000"}', "values": "1x40"},
        {"series": 'up{job="vllm",instance="c:8000"}', "values": "1x40"},
        {"series": 'vllm:num_requests_waiting{job="vllm",instance="a:8000"}', "values": "3x40"},
        {"series": 'vllm:kv_cache_usage_perc{job="vllm",instance="a:8000"}', "values": "0.2x40"},
    ]
    labels = {"severity": "warning", "capcon_plan": name, "capcon_flag": "saturation", "instance": "a:8000"}
    expected = [{"exp_labels": labels, "exp_annotations": saturation_words(path, 3.0, 0.2)}]
    alerts = [{"alertname": "CapconSaturation", "exp_alerts": expected}]
    (tmp_path / "test.yml").write_text(unit_test("rules.yml", series, alerts))
    done = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


# vLLM's TPOT bounds up to 100 ms, then +Inf: the 60 ms target below lies inside its 50-75 ms bucket.
VLLM_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, float("inf"))


@pytest.mark.parametrize(
    "per_step, firing",
    [
        ((0, 0, 92, 97, 100, 100), False),  # 3-8 % over 60 ms: undetermined in the console, so no alert
        ((0, 0, 0, 70, 100, 100), True),  # 30 % over 75 ms: a breach whatever the spread
    ],
)
def test_a_target_inside_a_bucket_fires_only_where_the_buckets_tell_a_breach(tmp_path, promtool, per_step, firing):
    workload = {**BASE_PLAN["workloads"][0], "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.06}}
    path = plan_file(tmp_path, {"workloads": [workload]})
    (tmp_path / "rules.yml").write_text(rules_text(path, first_year=1970))
    series = [{"series": 'up{job="vllm",instance="a:8000"}', "values": "1x40"}]
    series += histogram("vllm:request_time_per_output_token_seconds", VLLM_TPOT, per_step, "a:8000")
    expected = []
    if firing:
        plan = load_plan(str(path))
        p95 = histogram_quantile(0.95, VLLM_TPOT, per_step)
        fleet = Figures(name=FLEET_TOTAL, url="", state=ReplicaState.UP, tpot_p95_seconds=p95)
        found = readings(
            FlagInputs(FleetFigures(60.0, "prometheus", (), fleet, EVAL), plan_now(plan, EVAL)), Thresholds()
        )
        (breach,) = [r for r in found if r.kind == "slo_breach_tpot"]
        labels = {"severity": "critical", "capcon_plan": "base", "capcon_flag": "slo_breach_tpot"}
        note = (
            "The 60 ms target lies inside vLLM's 50-75 ms bucket: this alert fires when more than 5 % of requests "
            "took over 75 ms, the most the buckets can tell; put the target on a bound (50 ms or 75 ms) to judge it "
            "exactly."
        )
        annotations = {"why": breach.why, "do": breach.todo, "bucket": note}
        expected = [{"exp_labels": labels, "exp_annotations": annotations}]
    alerts = [{"alertname": "CapconSloBreachTpot", "exp_alerts": expected}]
    (tmp_path / "test.yml").write_text(unit_test("rules.yml", series, alerts))
    done = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
