"""The plan's fleet.dcgm_targets: the dcgm-exporter pages of the fleet's GPUs, checked as replica targets are."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.plan.schema import PlanError, parse_plan

REPO = Path(__file__).resolve().parents[2]
BASE = (REPO / "plans" / "internal-assistant-18rps.yaml").read_text()


def plan(fleet: str):
    return parse_plan(BASE + "\n" + fleet, "p.yaml")


def test_dcgm_targets_beside_targets_and_beside_prometheus():
    p = plan(
        "fleet:\n  targets: [http://10.0.0.11:8000]\n  dcgm_targets: [10.0.0.11:9400, http://node-b:9400/metrics]\n"
    )
    assert p.fleet.dcgm_targets == ("10.0.0.11:9400", "http://node-b:9400/metrics")
    q = plan("fleet:\n  prometheus_url: http://prom:9090\n  dcgm_targets: [http://node-a:9400]\n")
    assert q.fleet.dcgm_targets == ("http://node-a:9400",)
    assert plan("fleet:\n  targets: [http://10.0.0.11:8000]\n").fleet.dcgm_targets == ()


@pytest.mark.parametrize(
    "value, words",
    [
        ("[]", "fleet.dcgm_targets: an empty list"),
        ("http://node:9400", "a list of dcgm-exporter URLs"),
        ("['ftp://node:9400']", "fleet.dcgm_targets[0]"),
        ("['http://u:hunter2@node:9400/x y']", "fleet.dcgm_targets[0]"),
    ],
)
def test_bad_dcgm_targets_say_where(value, words):
    with pytest.raises(PlanError) as error:
        plan(f"fleet:\n  targets: [http://10.0.0.11:8000]\n  dcgm_targets: {value}\n")
    message = str(error.value)
    assert words in message and "hunter2" not in message and "p.yaml:" in message
