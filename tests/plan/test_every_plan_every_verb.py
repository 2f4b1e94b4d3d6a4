"""Every shipped plan works with every verb that reads a plan: exit 0 and something printed.

`capcon rules plans/assistant-70b.yaml` once failed with exit 2 ("no selector for the fleet's
series"): no shipped plan names a Prometheus selector. The history verb gets an empty history file
(nothing recorded yet); the simulator starts the plan's fleet and is stopped at once.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from console.store.database import Store
from tests.sim.running import start_sim

PLANS = sorted((Path(__file__).resolve().parents[2] / "plans").glob("*.yaml"))


def test_the_shipped_plans_are_here():
    assert len(PLANS) >= 3


VERBS = [
    ("plan",),
    ("plan", "--schedule"),
    pytest.param(("plan", "--sizes"), marks=pytest.mark.slow),  # every size simulated: a long run
    ("plan", "--json"),
    ("plan", "--schedule", "--format", "json"),
    ("plan", "--schedule", "--format", "keda"),
    ("rules",),
    ("history", "--plan"),
    ("history", "--plan", "--json"),
]


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.name)
def test_every_verb_on_every_shipped_plan_exits_0_and_prints(tmp_path, capcon, verb, path):
    name, *options = verb
    if name == "history":
        empty = tmp_path / "history.sqlite"
        Store.open(empty).close()  # a history file nothing has been recorded into
        argv = ["history", "--db", empty, "--plan", path, *options[1:]]
    else:
        argv = [name, path, *options]
    code, out, err = capcon(*argv)
    assert code == 0, err
    assert out.strip(), f"capcon {' '.join(map(str, argv))} printed nothing"
    assert "Traceback" not in err
    if "--json" in options or "json" in options:
        json.loads(out)
    if name == "rules":
        assert list(yaml.safe_load_all(out))  # YAML, comments and all
    if "keda" in options:
        objects = list(yaml.safe_load_all(out))
        # KEDA takes no ScaledObject without a trigger: a flat week without a Prometheus is said instead.
        assert all(o["kind"] == "ScaledObject" and o["spec"]["triggers"] for o in objects), out
        assert objects or out.startswith(f"# {yaml.safe_load(path.read_text())['name']}: the schedule is flat")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.name)
def test_the_simulator_starts_every_shipped_plan(path):
    process, urls, lines = start_sim(str(path), "--status-every", "0")
    try:
        assert urls and lines[0].startswith(f"simulated fleet of plan {yaml.safe_load(path.read_text())['name']!r}")
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        process.reader.join(timeout=10)
    stderr = process.stderr.read()
    assert "Traceback" not in stderr, stderr
