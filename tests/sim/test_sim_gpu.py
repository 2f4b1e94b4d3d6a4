"""The simulated replica's GPUs in dcgm-exporter's format: counters that move with the load for the right reason.

The engine is driven in simulated time (no wall clock): a batch of decodes reads weights and KV
from memory (DRAM active up, tensor barely), long prompts are prefill (tensor active up), an
idle replica reads 0. The page parses with the console's own dcgm reader.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from console.metrics.dcgm import MIB, parse_dcgm
from console.sim.engine import Engine, SimRequest
from console.sim.fleet import SimFleet
from console.sim.gpu import GpuWindow, pod_name, render_page
from console.sim.shape import replica_shape

from .sim_plans import example_a

pytestmark = pytest.mark.timeout(60)


def run(plan, requests: list[tuple[int, int]], seconds: float = 4.0, every: float = 0.25):
    """Submit (prompt, answer) requests at t=0 and read the GPU window every `every` s; the readings."""
    shape = replica_shape(plan)
    engine = Engine(shape)
    window = GpuWindow(shape)
    for i, (prompt, answer) in enumerate(requests):
        engine.submit(SimRequest(f"r{i}", prompt, answer, answer, 0.0))
    readings = []
    now = 0.0
    while now < seconds:
        now += every
        engine.advance(now)
        readings.append(window.shares(now, engine.gpu_work, engine))
    return shape, readings


def test_idle_gpus_read_zero():
    _, readings = run(example_a(), [])
    assert all((r.sm_active, r.tensor_active, r.dram_active) == (0.0, 0.0, 0.0) for r in readings)


def test_decode_is_bandwidth_bound_and_dram_active_rises_with_the_batch():
    plan = example_a()  # 70B INT8 on TP 2 of 2 TB/s GPUs at 0.70 of bandwidth
    _, one = run(plan, [(16, 2000)])
    _, many = run(plan, [(16, 2000)] * 64)
    # Decoding a batch of one reads the weights every step: DRAM near the bandwidth efficiency, tensor idle.
    assert 0.6 <= one[-1].dram_active <= 0.71
    assert one[-1].tensor_active < 0.01
    # SM active reads the GPU busy all the time either way: it says little about how much is done.
    assert one[-1].sm_active > 0.9 and many[-1].sm_active > 0.9
    # A batch of 64 does 64 times the useful work per step: tensor active moves with it; DRAM stays at its ceiling.
    assert many[-1].tensor_active > 20 * one[-1].tensor_active
    assert many[-1].dram_active >= one[-1].dram_active - 0.01


def test_prefill_is_compute_bound_and_drives_tensor_active():
    plan = example_a(compute_efficiency=0.57)
    _, readings = run(plan, [(6000, 1)] * 40, seconds=2.0)
    busiest = max(readings, key=lambda r: r.tensor_active)
    assert busiest.tensor_active > 0.4  # near the compute efficiency: prefill fills the tensor pipes
    assert busiest.tensor_active > busiest.dram_active


def test_the_page_parses_with_the_consoles_reader_and_rises_with_load():
    plan = example_a()
    shape, idle = run(plan, [])
    _, busy = run(plan, [(100, 2000)] * 32)
    pages = [parse_dcgm(render_page(shape, 3, r[-1], plan.gpu.name)) for r in (idle, busy)]
    for parsed in pages:
        assert parsed.errors == 0 and len(parsed.gpus) == shape.tensor_parallel == 2
        assert {g.pod for g in parsed.gpus} == {pod_name(3)} and len({g.uuid for g in parsed.gpus}) == 2
        assert all(g.model_name == plan.gpu.name for g in parsed.gpus)
        # vLLM reserves its share of the GPU at start: memory used does not move with load.
        assert all(g.fb_used_bytes == round(shape.gpu_memory_bytes / MIB * 0.90) * MIB for g in parsed.gpus)
    quiet, loaded = (p.gpus[0] for p in pages)
    assert quiet.sm_active == quiet.dram_active == quiet.tensor_active == quiet.gpu_util == 0.0
    assert loaded.dram_active > 0.5 and loaded.tensor_active > quiet.tensor_active and loaded.gpu_util > 0.9


def test_a_restarted_engine_starts_a_new_series():
    plan = example_a()
    shape = replica_shape(plan)
    window = GpuWindow(shape)
    first = Engine(shape)
    first.submit(SimRequest("a", 16, 500, 500, 0.0))
    first.advance(1.0)
    window.shares(1.0, first.gpu_work, first)
    first.advance(2.0)
    assert window.shares(2.0, first.gpu_work, first).dram_active > 0.5
    fresh = Engine(shape)
    assert window.shares(2.5, fresh.gpu_work, fresh).dram_active == 0.0


async def test_each_replica_serves_its_gpus_on_a_port_of_its_own():
    async with SimFleet(example_a(), replicas=2, traffic="off") as fleet:
        urls = fleet.gpu_urls
        assert all(u is not None for u in urls) and len(set(urls)) == 2
        assert not set(urls) & {f"{u}/metrics" for u in fleet.urls}
        async with httpx.AsyncClient(timeout=10) as http:
            pages = [parse_dcgm((await http.get(url)).text) for url in urls]
            # The vLLM page and the GPU page are different pages.
            assert "DCGM_FI_" not in (await http.get(fleet.metrics_urls[0])).text
        assert [{g.pod for g in p.gpus} for p in pages] == [{pod_name(0)}, {pod_name(1)}]
        # A replica that goes down leaves its GPU page up, as dcgm-exporter outlives a dead vLLM.
        await fleet.fault(0, "down")
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(urls[0])).status_code == 200
    assert all(r.gpu_url is None for r in fleet.replicas)


def test_capcon_sim_says_where_the_gpu_pages_are():
    from tests.bench.conftest import FAST_PLAN
    from tests.sim.running import start_sim

    process, urls, lines = start_sim(str(FAST_PLAN), "--replicas", "2", "--traffic", "off", "--status-every", "0")
    try:
        pages = [line.split(": ", 1)[1].strip() for line in lines if line.startswith("  replica ")]
        assert len(urls) == 2 and len(pages) == 2 and all(p.endswith("/metrics") for p in pages)
        assert any("job_name: capcon-sim-dcgm" in line for line in lines)
        parsed = [parse_dcgm(httpx.get(page, timeout=10).text) for page in pages]
        assert [len(p.gpus) for p in parsed] == [1, 1] and parsed[0].gpus[0].pod == pod_name(0)
    finally:
        process.terminate()
        process.wait(15)


async def test_the_console_pairs_each_simulated_replica_with_its_own_gpus():
    from console.fleet.gpus import gpu_by_replica
    from console.sources.dcgm import DcgmSource

    async with SimFleet(example_a(), replicas=2, traffic="off") as fleet:
        fleet.replicas[1].engine.submit(SimRequest("x", 16, 4000, 4000, fleet.replicas[1].now()))
        await asyncio.sleep(0.3)
        pages = fleet.gpu_urls
        addresses = fleet.replica_addresses()
        source = DcgmSource([u for u in pages if u is not None])
        try:
            results = await source.fetch()
        finally:
            await source.aclose()
        async with httpx.AsyncClient(timeout=10) as http:
            said = (await http.get(f"{fleet.urls[1]}/version")).json()["capcon_sim"]
    assert said["pod"] == pod_name(1) and said["gpu_page"] == pages[1]
    paired = gpu_by_replica(addresses, [g for r in results for g in r.gpus], tensor_parallel=2)
    idle, busy = (paired[a.name] for a in addresses)
    assert idle.gpus == busy.gpus == 2 and idle.how == f"pod {pod_name(0)}"
    assert idle.dram_active == 0.0 < busy.dram_active  # the one decoding reads its weights; the idle one nothing
