"""The rule file's shape, `capcon rules` end to end, and hostile plans and selectors through promtool."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.cli import main
from console.engines.rules import ALERT_FLAGS, RuleOptions, offset_transitions, rule_file
from console.fleet.flags import Thresholds
from console.metrics.vllm import COUNTERS, GAUGES, HISTOGRAMS
from console.plan.schedule import schedule
from console.plan.schema import load_plan
from tests.plan.conftest import PLANS

from .conftest import SELECTOR, plan_file, rules_text


def rules_of(text: str) -> list[dict]:
    (group,) = yaml.safe_load(text)["groups"]
    return group["rules"]


def test_every_alert_waits_its_flags_minimum_duration_and_says_what_the_console_says(tmp_path):
    rules = rules_of(rules_text(PLANS / "internal-assistant-18rps.yaml"))
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    t = Thresholds()
    assert set(ALERT_FLAGS) - {"CapconSloBreachE2e"} <= set(alerts)  # the plan sets no end-to-end target
    for name, rule in alerts.items():
        if name == "CapconPlanRulesOutdated":
            continue
        wanted = t.down_after_seconds if name == "CapconReplicaDown" else t.min_duration_seconds
        assert rule["for"] == f"{wanted:g}s", name
        assert rule["labels"]["capcon_flag"] == ALERT_FLAGS[name]
        assert rule["labels"]["capcon_plan"] == "internal-assistant-18rps"
        assert rule["annotations"]["do"].strip() and rule["annotations"]["why"].strip()
    assert alerts["CapconSaturation"]["annotations"]["do"].startswith("Replica saturated: add a replica")
    assert "(docs/method.md, 'Keeping N+1')" in alerts["CapconNPlus1AtRisk"]["annotations"]["do"]


def test_every_vllm_name_is_read_in_both_spellings_under_the_selector():
    text = rules_text(PLANS / "assistant-70b.yaml", selector='namespace="prod", app=~"vllm-.*"')
    exprs = " ".join(r["expr"] for r in rules_of(text))
    read = {"requests", "prompt_tokens", "generation_tokens", "preemptions"}
    names = [n for c in read for n in COUNTERS[c]] + [n for ns in GAUGES.values() for n in ns]
    names += [n for c in ("ttft", "itl", "tpot", "e2e", "queue") for n in HISTOGRAMS[c]]
    for name in names:
        for spelling in (name, name.replace("vllm:", "vllm_", 1)):
            assert re.search(re.escape(spelling) + r'(_bucket)?\{namespace="prod", app=~"vllm-\.\*"\}', exprs), spelling
    # No vLLM series is read without the selector.
    assert {after for _name, after in re.findall(r"(vllm[:_][a-z0-9_]+)(.)", exprs)} == {"{"}


def test_the_hour_of_week_rule_holds_the_schedule_run_by_run():
    """capcon:plan_replicas_scheduled is a chain of `(hour >= a < b) * 0 + n`: read back, it is the table."""
    plan = load_plan(str(PLANS / "chat-8b-l40s.yaml"))
    rules = rules_of(rules_text(PLANS / "chat-8b-l40s.yaml"))
    (expr,) = [r["expr"] for r in rules if r.get("record") == "capcon:plan_replicas_scheduled"]
    pieces = re.findall(r">= (\d+) < (\d+)\) \* 0 \+ (\d+)", expr)
    flat = [None] * 168
    for a, b, n in pieces:
        for hour in range(int(a), int(b)):
            assert flat[hour] is None
            flat[hour] = int(n)
    table = schedule(plan).replicas_by_hour
    assert flat == [table[d][h] for d in range(7) for h in range(24)]


@pytest.mark.parametrize("zone", ["Europe/Warsaw", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"])
def test_the_offset_follows_the_zone_to_the_second(zone):
    first, changes = offset_transitions(zone, 2026, 3)
    info = ZoneInfo(zone)

    def offset(at: float) -> int:
        return int(datetime.fromtimestamp(at, info).utcoffset().total_seconds())

    assert first == offset(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    for at, value in changes:
        assert offset(at) == value and offset(at - 1) != value
    if zone in ("UTC", "Asia/Kolkata"):
        assert changes == []
    else:
        assert len(changes) == 6  # twice a year; Lord Howe moves by 30 minutes


def run(*args) -> tuple[int, str, str]:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def test_the_command_writes_a_file_promtool_accepts(tmp_path, promtool):
    target = tmp_path / "capcon.rules.yml"
    code, out, err = run("rules", PLANS / "internal-assistant-18rps.yaml", "--selector", SELECTOR, "--output", target)
    assert (code, out, err) == (0, "", "")
    assert target.read_text().startswith("# Prometheus rules for plan 'internal-assistant-18rps'")
    done = promtool("check", "rules", str(target))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_plans_own_selector_is_used(tmp_path):
    path = plan_file(tmp_path, {"fleet": {"prometheus_url": "http://prom:9090", "selector": 'job="llm"'}})
    code, out, err = run("rules", path)
    assert code == 0, err
    assert 'vllm:num_requests_waiting{job="llm"}' in out


def test_without_a_selector_the_rules_select_job_vllm_and_say_so(tmp_path):
    """A plan with no fleet section: exit 2 once ("no selector for the fleet's series"); now vLLM's example job."""
    code, out, err = run("rules", plan_file(tmp_path))
    assert code == 0, err
    assert 'vllm:num_requests_waiting{job="vllm"}' in out
    assert '# The plan gives no fleet.selector: these rules select job="vllm" (the job name in vLLM' in out
    assert err.count("\n") == 1 and err.startswith('capcon rules: no fleet.selector: the rules select job="vllm"')
    assert "give --selector" in err


def test_a_plan_with_targets_selects_exactly_their_instances(tmp_path):
    targets = ["http://10.0.0.11:8000", "10.0.0.12:8000", "https://vllm-a.example:8443/metrics", "http://vllm-b"]
    code, out, err = run("rules", plan_file(tmp_path, {"fleet": {"targets": targets}}))
    assert code == 0, err
    # Dots escaped for RE2, the backslash doubled inside the PromQL string; a URL without a port matches with the
    # scheme's port too (Prometheus before 3.0 adds it to the instance label).
    matcher = r'instance=~"10\\.0\\.0\\.11:8000|10\\.0\\.0\\.12:8000|vllm-a\\.example:8443|vllm-b|vllm-b:80"'
    assert f"vllm:num_requests_waiting{{{matcher}}}" in out
    assert f"these rules select {matcher} (the plan's fleet.targets" in out
    assert "no fleet.selector: the rules select instance=~" in err
    assert 'job="vllm"' not in out


def test_the_selector_option_wins_and_says_nothing(tmp_path):
    path = plan_file(tmp_path, {"fleet": {"targets": ["http://10.0.0.11:8000"]}})
    code, out, err = run("rules", path, "--selector", 'job="mine"')
    assert (code, err) == (0, "")
    assert 'vllm:num_requests_waiting{job="mine"}' in out and "instance=~" not in out and "no fleet.selector" not in out


@pytest.mark.parametrize(
    "args, message",
    [
        (("--selector", "job=vllm"), "not a Prometheus label selector at character 1"),
        (("--selector", ""), "no selector"),
        (("--window", "0"), "expected a positive number of seconds"),
        (("--selector", SELECTOR, "--output", "/"), "is a folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    code, out, err = run("rules", plan_file(tmp_path), *args)
    assert (code, out) == (2, "")
    assert message in err and err.count("\n") == 1 and err.startswith("capcon rules: "), err


def test_a_missing_or_broken_plan_is_one_line_and_exit_2(tmp_path):
    code, _, err = run("rules", tmp_path / "none.yaml", "--selector", SELECTOR)
    assert code == 2 and err.count("\n") == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [")
    code, _, err = run("rules", broken, "--selector", SELECTOR)
    assert code == 2 and err.count("\n") == 1 and "broken.yaml" in err


LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
VALUE = st.text(st.characters(whitelist_categories=("L", "N", "P", "S", "Zs")), max_size=12)
NAME = st.text(st.characters(whitelist_categories=("L", "N", "P", "S", "Zs")), min_size=1, max_size=30).filter(
    lambda s: s.strip() and s == s.strip() and s.isprintable()
)


MATCHER = st.one_of(
    st.tuples(LABEL, st.sampled_from(["=", "!="]), VALUE),
    st.tuples(LABEL, st.sampled_from(["=~", "!~"]), st.sampled_from(["vllm-.*", "prod|canary", ".+"])),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAME, matchers=st.lists(MATCHER, min_size=1, max_size=3))
def test_hostile_names_and_selectors_give_rules_promtool_accepts(tmp_path_factory, promtool, name, matchers):
    """Plan names with quotes, backslashes, backticks, `{{`, `%` or emoji, and selectors with any values."""
    selector = ", ".join(f"{label}{op}{_promql_quoted(value)}" for label, op, value in matchers)
    directory = tmp_path_factory.mktemp("hostile")
    path = plan_file(directory, {"name": name})
    plan = load_plan(str(path))
    assert plan.name == name
    document = rule_file(plan, RuleOptions(selector=selector, window_seconds=60.0, first_year=2026))
    rules = directory / "rules.yml"
    rules.write_text(yaml.safe_dump(document, sort_keys=False, width=1_000_000, allow_unicode=True))
    done = promtool("check", "rules", str(rules))
    assert done.returncode == 0, (name, selector, done.stdout, done.stderr)


def _promql_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
