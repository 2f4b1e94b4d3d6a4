"""The GPUs' counters through a real Prometheus: `capcon watch --once --json --source prometheus --dcgm-selector`
on the simulated fleet shows each replica's GPU figures as reading its dcgm-exporter pages directly does.

Debian's `prometheus` scrapes the simulator's replicas (job capcon-sim) and their dcgm-exporter pages
(job capcon-sim-dcgm) every second. The scrape configuration labels the targets as Kubernetes
discovery's relabelling would: each replica's target with its pod and namespace, the exporters'
with the exporter's own pod, so the pages' `pod` labels arrive as `exported_pod` (honor_labels
off, Prometheus' default). All replicas share 127.0.0.1: only the pod labels can pair them.

Under a spike the two routes read a moving figure a scrape apart, so they agree within the GPU
window's movement; once the traffic has stopped and the engines are idle they read the same
state, and must agree to rounding.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx
import pytest
import yaml

from console.fleet.gpu_view import fleet_gpu
from console.live.gpu_watch import GpuWatch
from console.metrics.figures import Figures, ReplicaState
from console.plan.schema import load_plan
from console.sim.fleet import SimFleet
from tests.plan.conftest import BASE_PLAN, changed

from .conftest import unavailable
from .processes import Unavailable
from .prometheus_harness import start_prometheus

pytestmark = [pytest.mark.real_prometheus, pytest.mark.timeout(180)]

REPLICAS = 2
EXPORTER_POD = "nvidia-dcgm-exporter-x7k2p"
# A flat week of 2 rps, answers short enough that a spike's queue drains in seconds once it stops.
PLAN = changed(
    BASE_PLAN,
    {
        "name": "gpu-lane",
        "replica": {"max_num_seqs": 8},
        "workloads": [
            {
                "name": "chat",
                "kind": "interactive",
                "arrivals": {"weekday": [2.0] * 24, "weekend": [2.0] * 24},
                "tokens": {"input_mean": 500, "input_p95": 1000, "output_mean": 40, "output_max": 80},
                "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.2},
            }
        ],
    },
)
FIGURES = ("sm_active", "tensor_active", "dram_active")


def scrape_config(sim: SimFleet) -> str:
    addresses = sim.replica_addresses()
    replicas = [
        {"targets": [url.removeprefix("http://")], "labels": {"pod": a.pod, "namespace": a.namespace}}
        for url, a in zip(sim.urls, addresses, strict=True)
    ]
    exporters = [
        {
            "targets": [str(url).removeprefix("http://").split("/", 1)[0] for url in sim.gpu_urls],
            "labels": {"pod": EXPORTER_POD, "namespace": "gpu-operator"},
        }
    ]
    return yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "capcon-sim", "static_configs": replicas},
                {"job_name": "capcon-sim-dcgm", "static_configs": exporters},
            ],
        }
    )


async def watch_json(prometheus: str) -> dict:
    """`capcon watch --once --json` through Prometheus, the GPUs' series included: its JSON."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "console",
        "watch",
        "--once",
        "--json",
        "--source",
        "prometheus",
        "--prometheus",
        prometheus,
        "--selector",
        'job="capcon-sim"',
        "--dcgm-selector",
        'job="capcon-sim-dcgm"',
        "--window",
        "5",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def direct(sim: SimFleet) -> dict[str, dict]:
    """Each replica's GPU figures read from its page directly (the demo's route), by the name Prometheus gives it."""
    pods = {a.name: (a.pod, a.namespace) for a in sim.replica_addresses()}
    watch = GpuWatch([str(u) for u in sim.gpu_urls], pods=pods)
    try:
        pages = await watch.poll()
    finally:
        await watch.aclose()
    replicas = [Figures(name=a.name, url=a.name, state=ReplicaState.UP) for a in sim.replica_addresses()]
    return {name: g.as_dict() for name, g in fleet_gpu(replicas, pages).by_replica.items()}


async def until_series(http: httpx.AsyncClient, query: str, count: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = (await http.get("/api/v1/query", params={"query": query})).json()
        if answer.get("status") == "success" and len(answer["data"]["result"]) >= count:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"Prometheus holds fewer than {count} series of {query} after {seconds:g} s")


def by_name(answer: dict) -> dict[str, dict]:
    return {r["name"]: r["gpu"] for r in answer["replicas"]}


async def test_gpu_figures_through_prometheus_equal_the_pages_read_directly(tmp_path, request, report):
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(PLAN))
    plan = load_plan(str(plan_path))
    async with SimFleet(plan, replicas=REPLICAS, seed=11) as sim:
        try:
            server = start_prometheus([], tmp_path / "prometheus", config=scrape_config(sim))
        except (Unavailable, OSError) as error:
            unavailable(request, "real_prometheus", str(error) or type(error).__name__)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as http:
                await until_series(http, 'DCGM_FI_PROF_SM_ACTIVE{exported_pod=~"capcon-sim-.*"}', REPLICAS)
                await until_series(http, 'up{job="capcon-sim", pod=~"capcon-sim-.*"} == 1', REPLICAS)
            sim.spike(30.0, 30.0)
            await asyncio.sleep(3.0)  # the spike's load in a whole GPU window, scraped
            busy, busy_direct = await asyncio.gather(watch_json(server.url), direct(sim))

            await sim.stop_traffic()
            deadline = time.monotonic() + 30.0
            while any(r["running"] or r["waiting"] for r in sim.status()["replicas"]):
                assert time.monotonic() < deadline, "the engines did not drain"
                await asyncio.sleep(0.2)
            await asyncio.sleep(2.5)  # a GPU window of idle, then a scrape of it
            idle, idle_direct = await asyncio.gather(watch_json(server.url), direct(sim))
        finally:
            server.stop()

    (tmp_path / "busy.json").write_text(json.dumps(busy, indent=1))
    (tmp_path / "idle.json").write_text(json.dumps(idle, indent=1))
    through, through_idle = by_name(busy), by_name(idle)
    assert set(through) == set(busy_direct) == set(idle_direct), (sorted(through), sorted(busy_direct))
    report("")
    report("GPU through Prometheus against the pages read directly (SM / tensor / DRAM, memory used):")
    for name in sorted(through):
        got, want = through[name], busy_direct[name]
        report(
            f"  {name} busy: "
            + "  ".join(f"{f} {got[f]:.3f} ({want[f]:.3f})" for f in FIGURES)
            + f"  {got['paired_by']}"
        )
        # Paired by the replica's pod (all share one host), with its GPUs, under load.
        assert got["paired_by"].startswith("pod capcon-sim-") and got["gpus"] == want["gpus"] >= 1, got
        assert got["sm_active"] > 0.1 and got["dram_active"] > 0.01, got
        for figure in FIGURES:  # a scrape (1 s) apart, on a GPU window (1 s) that moves
            assert got[figure] == pytest.approx(want[figure], abs=0.1), (name, figure, got, want)
        assert got["fb_used_bytes"] == pytest.approx(want["fb_used_bytes"], rel=1e-9)

        quiet, quiet_direct = through_idle[name], idle_direct[name]
        report(f"  {name} idle: " + "  ".join(f"{f} {quiet[f]:.3f} ({quiet_direct[f]:.3f})" for f in FIGURES))
        assert quiet["paired_by"] == got["paired_by"] and quiet["gpus"] == quiet_direct["gpus"]
        for figure in (*FIGURES, "fb_used_bytes"):
            assert quiet[figure] == pytest.approx(quiet_direct[figure], abs=1e-6, rel=1e-9), (name, figure)
        assert quiet["sm_active"] < got["sm_active"]  # the load moved the figures it read
    fleet = idle["fleet"]["gpu"]
    assert fleet["replicas_paired"] == REPLICAS and fleet["pages"] == REPLICAS and not fleet["page_errors"], fleet
