"""`capcon sim` prints a plan's fleet section for the fleet it started: pasted into a plan, `capcon watch` pairs
every replica with its own GPUs by the pod the section names (the replicas share one host, so the host cannot)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from tests.sim.running import REPO, start_sim

pytestmark = pytest.mark.timeout(120)
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"  # no fleet section of its own


def _fleet_section(lines: list[str]) -> str:
    start = next(i for i, line in enumerate(lines) if line.startswith("a plan's fleet section"))
    section = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        section.append(line)
    return textwrap.dedent("".join(section))


def _watch_once(plan_file, *more: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "console", "watch", str(plan_file), "--once", "--json", "--interval", "0.5", *more],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_printed_fleet_section_pairs_each_replica_with_its_own_gpus(tmp_path):
    sim, urls, lines = start_sim(str(PLAN), "--replicas", "3", "--status-every", "0")
    try:
        section = _fleet_section(lines)
        fleet = yaml.safe_load(section)["fleet"]
        assert [t["url"] for t in fleet["targets"]] == urls and len(fleet["dcgm_targets"]) == 3
        plan_file = tmp_path / "sim-plan.yaml"
        plan_file.write_text(PLAN.read_text() + "\n" + section)
        paired = _watch_once(plan_file)
        # `--target` replaces the plan's targets, and with them the pods it named: the host is all there is.
        unpaired = _watch_once(plan_file, *(arg for url in urls for arg in ("--target", url)))
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    by_name = {r["name"]: r["gpu"] for r in paired["replicas"]}
    assert len(by_name) == 3
    for i, url in enumerate(urls):
        gpu = by_name[url.split("//", 1)[1]]
        assert gpu["paired_by"] == f"pod capcon-sim-{i}" and gpu["gpus"] == 1, gpu
        assert gpu["sm_active"] is not None and gpu["fb_used_bytes"] > 0
    for replica in unpaired["replicas"]:
        gpu = replica["gpu"]
        assert gpu["sm_active"] is None and gpu["gpus"] == 0
        assert "3 replicas share host 127.0.0.1" in gpu["paired_by"] and "fleet.targets" in gpu["paired_by"]
