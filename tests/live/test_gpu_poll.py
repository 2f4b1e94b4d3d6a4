"""The fleet's dcgm-exporter pages are read in the same poll step as its replicas, on the real simulator: each
replica's GPU counters rise with its own load (an idle neighbour's stay low), and a page that cannot be read
leaves its GPUs unknown and is named, never failing the poll."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from console.live.feed import PollFeed
from console.live.loop import Cadence, poll_loop
from console.live.setup import handle_on_urls
from tests.gateway.conftest import completion, send, sim_fleet
from tests.gateway.plans import gateway_plan

pytestmark = pytest.mark.timeout(60)


async def _poll(feed: PollFeed) -> object:
    views, failures = [], []
    await poll_loop(feed, Cadence(0.01), views.append, failures.append, polls=1)
    assert not failures, failures
    return views[-1]


async def test_each_replica_reads_its_own_gpus_and_they_rise_with_its_load():
    plan = gateway_plan()
    async with aiohttp.ClientSession() as session, sim_fleet(2, plan) as fleet:
        pods = [(a.pod, a.namespace) for a in fleet.replica_addresses()]
        # A third page nothing answers on: its failure is named, the other two are read.
        pages = [*fleet.gpu_urls, "127.0.0.1:1"]
        handle = handle_on_urls(plan.name, plan, fleet.metrics_urls, 30.0, 1.0, dcgm=pages, pods=pods)
        feed = PollFeed(handle)
        try:
            idle = await _poll(feed)
            load = asyncio.gather(*(send(session, fleet.urls[0], completion(max_tokens=400)) for _ in range(24)))
            await asyncio.sleep(1.2)  # a whole window of the GPU's counters under load
            busy = await _poll(feed)
            load.cancel()
        finally:
            await feed.aclose()
    before, after = idle.row("replica-0").gpu, busy.row("replica-0").gpu
    neighbour = busy.row("replica-1").gpu
    assert after.gpus == neighbour.gpus >= 1 and after.how == "pod capcon-sim-0" and neighbour.how == "pod capcon-sim-1"
    assert after.sm_active > before.sm_active + 0.3, (before, after)
    assert after.dram_active > before.dram_active + 0.1, (before, after)
    assert neighbour.sm_active < after.sm_active / 2  # the idle neighbour is not credited with the load
    assert after.fb_used_bytes == before.fb_used_bytes > 0  # vLLM reserves its memory at start
    assert busy.gpu.pages == 3 and len(busy.gpu.errors) == 1 and "127.0.0.1:1" in busy.gpu.errors[0]
    assert busy.gpu.fleet.sm_active == pytest.approx((after.sm_active + neighbour.sm_active) / 2)
    assert busy.total.gpu == busy.gpu.fleet


async def test_pages_that_all_fail_leave_the_gpus_unknown_and_the_poll_goes_on():
    plan = gateway_plan()
    async with sim_fleet(1, plan) as fleet:
        handle = handle_on_urls(plan.name, plan, fleet.metrics_urls, 30.0, 1.0, dcgm=["127.0.0.1:1"])
        feed = PollFeed(handle)
        try:
            view = await _poll(feed)
        finally:
            await feed.aclose()
    assert view.row("replica-0").figures.state == "up"
    gpu = view.row("replica-0").gpu
    assert (gpu.sm_active, gpu.tensor_active, gpu.dram_active, gpu.fb_used_bytes) == (None, None, None, None)
    assert "not read" in gpu.how and "cannot connect" in gpu.how
    assert view.gpu.fleet.sm_active is None and view.gpu.fleet.gpus == 0
