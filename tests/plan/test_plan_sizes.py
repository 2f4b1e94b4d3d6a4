"""`capcon plan --sizes` sizes the plan's own fleet as the report above it does.

plans/assistant-70b.yaml writes its capacity by hand (5 rps a replica at TP 2): the report says
2 replicas at $10/h. The table once called the same size 15 replicas at $75/h, from the simulated
replica's 0.37 rps, and recommended TP 4 from the same uncorrected simulation.
"""

from __future__ import annotations

import json
import re

import pytest

PLAN = "plans/assistant-70b.yaml"


def run(capcon, *argv):
    code, out, err = capcon("plan", *argv)
    assert code == 0, err
    return out


def test_the_plans_own_size_row_is_the_reports_fleet_in_text_and_json(capcon):
    figures = json.loads(run(capcon, PLAN, "--sizes", "--json"))
    rows = {row["tensor_parallel"]: row for row in figures["sizes"]}
    own = rows[figures["gpus_per_replica"]]
    assert own["capacity_from"] == "hand-written"  # capacity.source: manual, as the report says
    assert own["rps_per_replica"] == figures["rps_per_replica_measured"] == 5
    assert own["replicas"] == figures["replicas_with_redundancy"] == 2
    assert own["cost_per_hour"] == figures["fleet_cost_per_hour"] == 10

    text = run(capcon, PLAN, "--sizes")
    assert "fleet cost              $10.00/h       2 replicas x 2 GPUs" in text
    line = next(line for line in text.splitlines() if line.endswith("<- this plan's"))
    assert line.split()[:7] == ["2", "5.00", "2.50", "2", "4", "$10.00", "hand-written"]


def test_the_other_sizes_are_scaled_by_the_plans_capacity_over_the_simulated_one(capcon):
    figures = json.loads(run(capcon, PLAN, "--sizes", "--json"))
    correction = figures["sizes_correction"]
    simulated = correction["simulated_rps_per_replica_at_plan_size"]
    assert 0 < simulated < 5  # the simulated replica carries far less than the hand-written 5 rps
    assert correction["factor"] == pytest.approx(5 / simulated)
    peak = figures["peak_rps"]
    for row in figures["sizes"]:
        if row["tensor_parallel"] == 2 or row["replicas"] is None:
            continue
        assert row["capacity_from"] == "simulated, corrected"
        if row["simulated_rps_per_replica"] is not None:
            assert row["rps_per_replica"] == pytest.approx(row["simulated_rps_per_replica"] * correction["factor"])
        if row["covers_peak"]:
            assert row["replicas"] == 1 + 1  # N+1
        else:
            assert row["rps_per_replica"] < peak
    # Corrected, no other size carries the peak on fewer GPUs than TP 2 does (four): the plan's size is the cheapest.
    text = run(capcon, PLAN, "--sizes")
    factor = re.search(r"^Correction x([\d.]+): the plan's 5\.00 rps per replica at TP 2 \(hand-written\)", text, re.M)
    assert factor and float(factor.group(1)) == pytest.approx(correction["factor"], rel=0.01)
    assert "This plan's size, TP 2, is the cheapest for the peak." in text
    assert "Cheapest for the peak: TP 4" not in text
    assert re.search(r"differ [\d.]+-fold: one of them is off", text)  # 5 rps by hand against about 0.4 simulated


def test_an_estimated_plan_uses_one_estimate_for_its_size_and_the_report(tmp_path, capcon):
    from tests.plan.test_estimate import without_capacity

    path = tmp_path / "assistant-70b.yaml"
    path.write_text(without_capacity("assistant-70b.yaml"))
    figures = json.loads(run(capcon, path, "--sizes", "--json"))
    own = next(row for row in figures["sizes"] if row["tensor_parallel"] == figures["gpus_per_replica"])
    assert own["capacity_from"] == "estimated"
    assert own["rps_per_replica"] == figures["rps_per_replica_measured"]
    assert own["replicas"] == figures["replicas_with_redundancy"]
    assert own["cost_per_hour"] == figures["fleet_cost_per_hour"]
    assert figures["sizes_correction"]["factor"] is None
    assert all(row["capacity_from"] == "simulated" for row in figures["sizes"] if row is not own)
    assert "Correction x" not in run(capcon, path, "--sizes")
