"""A plan with no measured capacity: the planner estimates it on the plan's simulated replica and marks
every figure that rests on it; a measured offline throughput sizes deferrable work in GPU-hours."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from console.bench import estimate, estimate_store
from console.bench.estimate import _targets_and_settings, estimate_capacity, parse_plan
from console.bench.planfile import write_capacity, write_throughput
from console.bench.simulated import plan_lengths, simulated_step
from console.plan.model import ESTIMATED, Capacity, Plan
from console.plan.report import ESTIMATED_KEYS, to_json
from console.plan.schedule import schedule
from console.plan.schema import PlanError
from console.plan.schema import load_plan as load_measured
from console.plan.sizing import size

PLANS = Path(__file__).resolve().parents[2] / "plans"


def without_capacity(name: str) -> str:
    """The shipped plan's text with its capacity block taken out (and nothing else)."""
    lines = (PLANS / name).read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("capacity:"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(" "))
    return "".join(lines[:start] + lines[end:])


@pytest.fixture(scope="module")
def unmeasured(tmp_path_factory) -> Path:
    # The 70B plan: its replica sweeps in about a second (its capacity is low, so are the steps).
    path = tmp_path_factory.mktemp("estimate") / "assistant-70b.yaml"
    path.write_text(without_capacity("assistant-70b.yaml"))
    return path


def test_a_plan_without_capacity_is_refused_by_a_reader_that_does_not_estimate(unmeasured):
    with pytest.raises(PlanError) as raised:
        load_measured(unmeasured)
    assert f"{unmeasured}:1: capacity: no rps_per_replica" in str(raised.value)
    assert "capcon bench" in str(raised.value)


@pytest.fixture(scope="module")
def sharp() -> Plan:
    # Its goodput falls steeply past the knee (queueing), so where the estimate sits can be checked.
    return parse_plan(without_capacity("internal-assistant-18rps.yaml"), "internal-assistant-18rps.yaml")


def _goodput_at(plan: Plan, rate: float, seeds: int = 3) -> float:
    """Mean goodput share of a step at `rate` over a few seeds (one step is noisy at a 99 % share)."""
    targets, settings = _targets_and_settings(plan)
    tp = size(plan).gpus_per_replica
    at_size = replace(plan, replica=replace(plan.replica, tensor_parallel=tp))
    shares = [
        simulated_step(
            at_size, plan_lengths(at_size, settings.count(rate), 100 + seed), rate, replace(settings, seed=100 + seed),
            targets,
        ).goodput_share
        for seed in range(seeds)
    ]  # fmt: skip
    return sum(shares) / len(shares)


def test_the_estimate_sits_where_the_simulated_replica_stops_meeting_the_goodput_share(sharp):
    assert sharp.capacity.estimated and sharp.capacity.source == ESTIMATED
    assert "capcon bench --target URL --prompts FILE --plan internal-assistant-18rps.yaml" in sharp.capacity.note
    rps = sharp.capacity.rps_per_replica
    share = sharp.interactive[0].targets.goodput_share
    # On draws the estimate never saw: it holds below the estimate, falls above it.
    assert _goodput_at(sharp, rps * 0.8) >= share
    assert _goodput_at(sharp, rps * 1.3) < share - 0.03


def test_the_estimate_has_a_band_from_its_sweeps_and_says_what_it_rests_on(sharp):
    capacity = sharp.capacity
    assert capacity.low is not None and capacity.high is not None
    assert capacity.low <= capacity.rps_per_replica <= capacity.high
    assert capacity.high / capacity.low < 1.5  # a sharp knee: the sweeps agree
    assert f"{estimate.SEEDS} sweeps of at least 300 requests a step" in capacity.note  # 3 misses at 99 %
    assert "computed " in capacity.note and " by capcon " in capacity.note


def test_the_estimate_is_the_same_every_time_and_kept_for_the_next_command(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    text = without_capacity("chat-8b-l40s.yaml")
    estimate._estimates.clear()
    estimate._sweeps.clear()
    first = parse_plan(text, "chat-8b-l40s.yaml").capacity
    assert estimate.last_budget is not None and estimate.last_budget.used > 0
    assert len(list((tmp_path / "capcon" / estimate_store.FOLDER).glob("*.json"))) == 1
    estimate._estimates.clear()
    estimate._sweeps.clear()
    estimate.last_budget = None
    kept = parse_plan(text, "elsewhere/chat.yaml").capacity  # the same content read from another path
    assert estimate.last_budget is None  # read back, nothing simulated
    assert (kept.rps_per_replica, kept.low, kept.high) == (first.rps_per_replica, first.low, first.high)
    assert "--plan elsewhere/chat.yaml" in kept.note
    # A kept file that is not an estimate is passed over and computed again, the same.
    for path in (tmp_path / "capcon" / estimate_store.FOLDER).glob("*.json"):
        path.write_text("{not json")
    estimate._estimates.clear()
    estimate._sweeps.clear()
    again = parse_plan(text, "chat-8b-l40s.yaml").capacity
    assert estimate.last_budget is not None and estimate.last_budget.used > 0
    assert again.rps_per_replica == first.rps_per_replica


def test_the_report_marks_every_figure_resting_on_an_estimate_and_says_how_to_measure(unmeasured, capcon):
    code, out, err = capcon("plan", unmeasured, "--schedule")
    assert code == 0, err
    assert "ESTIMATED, not measured" in out
    assert f"capcon bench --target URL --prompts FILE --plan {unmeasured} --write-plan" in " ".join(out.split())
    rows = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines() if line.startswith("  ")}
    assert rows["replicas for"].split()[4].startswith("~")
    assert "estimated)" in rows["replicas for"]
    assert rows["fleet cost"].split()[2].startswith("~$")
    assert "~: an estimated capacity, so every count below is an estimate" in out
    code, body, _ = capcon("plan", unmeasured, "--schedule", "--json")
    figures = json.loads(body)
    assert figures["capacity_source"] == ESTIMATED and figures["capacity_estimated"] is True
    assert {"replicas_for_peak", "cost_per_million_tokens_peak", "replicas_by_hour"} <= set(figures["estimated_keys"])


def test_a_measured_plan_lists_no_estimated_figure(plan_json):
    figures = plan_json(PLANS / "assistant-70b.yaml", "--schedule")
    assert figures["capacity_estimated"] is False and figures["estimated_keys"] == []


@pytest.mark.parametrize("name", ["assistant-70b.yaml", "chat-8b-l40s.yaml", "internal-assistant-18rps.yaml"])
def test_estimated_keys_cover_every_figure_that_moves_with_the_capacity(name):
    plan = load_measured(PLANS / name)
    base = to_json(size(plan), schedule(plan))
    moved = set()
    for factor in (0.3, 0.6, 1.4, 2.5, 4.0):
        other = replace(plan, capacity=replace(plan.capacity, rps_per_replica=plan.capacity.rps_per_replica * factor))
        figures = to_json(size(other), schedule(other))
        moved |= {key for key in base if figures[key] != base[key]}
    assert moved, "the capacity moves nothing?"
    assert moved <= set(ESTIMATED_KEYS), moved - set(ESTIMATED_KEYS)


def test_write_plan_turns_an_estimate_into_a_measurement(unmeasured, tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(unmeasured.read_text())
    write_capacity(path, 0.42, "capcon bench", "2026-12-02 against http://replica:8000")
    plan = load_measured(path)  # loads without an estimator now
    assert plan.capacity == Capacity(0.42, "capcon bench", "2026-12-02 against http://replica:8000")
    assert path.read_text().startswith(unmeasured.read_text().rstrip("\n"))  # the rest kept as it was


def test_a_throughput_alone_keeps_the_rps_estimated_and_sizes_deferrable_work_in_gpu_hours(tmp_path, capcon):
    path = tmp_path / "chat.yaml"
    path.write_text((PLANS / "chat-8b-l40s.yaml").read_text())
    before = schedule(load_measured(path)).deferrable
    assert before is not None and before.basis == "equivalents" and before.gpu_hours_week is None
    write_throughput(path, 1850.0, "capcon bench --throughput 2026-12-02")
    plan = load_measured(path)
    assert plan.capacity.rps_per_replica == 1.5 and plan.capacity.throughput_tokens_per_second == 1850.0
    fit = schedule(plan).deferrable
    assert fit is not None and fit.basis == "throughput"
    # 0.3 rps x 10 weekday hours x 5 days x 3,600 s x 300 output tokens, at 1,850 tokens/s.
    tokens = 0.3 * 10 * 5 * 3600 * 300
    assert fit.output_tokens_per_week == pytest.approx(tokens)
    assert fit.replica_hours_week == pytest.approx(tokens / 1850 / 3600)
    assert fit.gpu_hours_week == pytest.approx(fit.replica_hours_week * size(plan).gpus_per_replica)
    code, out, _ = capcon("plan", path, "--schedule")
    assert code == 0 and "at the measured batch throughput: 2.4 replica-hours" in out


@pytest.mark.parametrize(
    "capacity,needle",
    [
        ({"source": "manual"}, "capacity.source: source without rps_per_replica"),
        ({"rps_per_replica": 3}, "capacity: missing key 'source'"),
        ({"rps_per_replica": 3, "source": "estimate"}, "capacity.source: source 'estimate' with a number"),
        ({"throughput_source": "x"}, "a throughput_source without throughput_tokens_per_second"),
        ({"note": "n"}, "capacity.note: note without rps_per_replica"),
    ],
)
def test_capacity_keys_that_do_not_go_together_are_refused(write_plan, capacity, needle):
    path = write_plan({"capacity": None})
    text = yaml.safe_load(path.read_text())
    text["capacity"] = capacity
    path.write_text(yaml.safe_dump(text))
    with pytest.raises(PlanError) as raised:
        parse_plan(path.read_text(), str(path))
    assert needle in str(raised.value)


def test_an_empty_capacity_section_is_estimated(write_plan):
    path = write_plan({"capacity": None})
    text = path.read_text() + "capacity:\n"
    calls = []

    def estimate(draft):
        calls.append(draft.capacity)
        return Capacity(2.0, ESTIMATED, "test")

    from console.plan.schema import parse_plan as parse

    plan = parse(text, "p.yaml", estimate=estimate)
    assert plan.capacity == Capacity(2.0, ESTIMATED, "test")
    # The estimator got the provisional capacity: one replica for the whole interactive peak.
    assert calls == [Capacity(4.0, ESTIMATED)]


def test_the_estimate_is_computed_once_per_plan(unmeasured):
    draft = replace(parse_plan(unmeasured.read_text(), str(unmeasured)), capacity=Capacity(5.0, ESTIMATED))
    first = estimate_capacity(draft)
    assert estimate_capacity(draft) is first


def test_rules_and_the_keda_schedule_say_the_capacity_is_an_estimate(unmeasured, capcon):
    code, rules, err = capcon("rules", unmeasured, "--selector", 'job="vllm"')
    assert code == 0, err
    assert rules.startswith("# Prometheus rules") and "is ESTIMATED, not measured" in rules
    above = yaml.safe_load(rules)["groups"]
    annotations = [r["annotations"]["why"] for g in above for r in g["rules"] if r.get("alert") == "CapconAbovePlan"]
    assert annotations and all(" estimated)" in why for why in annotations)
    keda = ("plan", unmeasured, "--schedule", "--format", "keda", "--prometheus", "http://prometheus:9090")
    code, scaled, err = capcon(*keda)
    assert code == 0, err
    assert scaled.startswith("# The plan's capacity") and yaml.safe_load(scaled)["kind"] == "ScaledObject"
    code, schedule_json, _ = capcon("plan", unmeasured, "--schedule", "--format", "json")
    assert json.loads(schedule_json)["capacity_estimated"] is True


def test_sizes_compares_tensor_parallel_sizes_and_names_the_cheapest(unmeasured, capcon):
    code, out, err = capcon("plan", unmeasured, "--sizes", "--json")
    assert code == 0, err
    sizes = {one["tensor_parallel"]: one for one in json.loads(out)["sizes"]}
    assert set(sizes) == {1, 2, 4, 8}  # 70 GB of INT8 weights fit an 80 GB GPU, barely
    own = sizes[2]  # the planner's rule picks TP 2 at its own estimate
    assert own["rps_per_replica"] == pytest.approx(
        parse_plan(unmeasured.read_text(), str(unmeasured)).capacity.rps_per_replica
    )
    assert own["replicas"] == -(-5 // own["rps_per_replica"]) + 1 and own["gpus"] == own["replicas"] * 2
    # A larger size carries more per GPU here: the step is mostly reading the weights.
    assert sizes[4]["rps_per_replica"] / 4 > own["rps_per_replica"] / 2
    assert sizes[8]["covers_peak"] is True and sizes[8]["replicas"] == 2
    code, text, _ = capcon("plan", unmeasured, "--sizes")
    cheapest = min(
        (one for one in sizes.values() if one["cost_per_hour"]),
        key=lambda o: (o["cost_per_hour"], o["tensor_parallel"]),
    )
    assert f"Cheapest for the peak: TP {cheapest['tensor_parallel']} at ${cheapest['cost_per_hour']:,.2f}/h" in text
    assert "<- this plan's" in next(line for line in text.splitlines() if line.startswith("   2 "))


def test_an_estimate_past_its_simulation_budget_is_refused_in_one_line(monkeypatch, write_plan, capcon):
    from console.bench import estimate

    monkeypatch.setattr(estimate, "ESTIMATE_TOKENS", 200_000)  # a few steps of this plan
    path = write_plan({"capacity": None, "name": "budget"})
    code, out, err = capcon("plan", path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "estimating it would simulate more than 200,000 tokens" in err
    assert "capcon bench --target URL --prompts FILE" in err
    assert estimate.last_budget is not None and estimate.last_budget.used <= 200_000
