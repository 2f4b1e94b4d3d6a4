"""With a bounded-queue gateway in front of a saturated replica, the console's poll step reads what the clients
waited (within 10 % of their own p95) and judges the TTFT target on it, while vLLM's own p95 is inside it."""

from __future__ import annotations

import asyncio
import math

import aiohttp
import pytest

from console.live.feed import PollFeed, gateway_watch
from console.live.handle import FleetHandle
from console.live.loop import Cadence, poll_loop
from console.live.watcher import Watcher
from console.sources.scrape import ScrapeSource
from console.targets import Target
from tests.gateway.conftest import completion, gateway, send, sim_fleet, switch
from tests.gateway.plans import gateway_plan

pytestmark = pytest.mark.timeout(90)

CLIENTS = 40  # two at a time on the replica, the rest waiting in the gateway's queue


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


async def test_the_ttft_target_is_judged_on_what_the_clients_waited():
    plan = gateway_plan(max_queue=CLIENTS, max_wait_seconds=60.0)
    target = plan.workloads[0].targets.ttft_p95_seconds
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        sim_fleet(1, plan) as fleet,
        gateway(fleet.urls, plan=plan, planned_cap=1) as server,
    ):
        assert (
            await switch(
                session,
                server,
                mode="bounded_queue",
                max_queue=CLIENTS,
                max_wait_seconds=60,
                max_inflight_per_replica=2,
            )
        ).status == 200
        source = ScrapeSource([Target("replica-0", fleet.metrics_urls[0])], timeout=2.0)
        handle = FleetHandle(plan.name, plan, Watcher(source, 300.0, interval_seconds=1.0), gateways=(server.url,))
        feed = PollFeed(handle, gateways=gateway_watch(handle))
        views, failures = [], []
        try:
            await poll_loop(feed, Cadence(0.01), views.append, failures.append, polls=1)
            answers = await asyncio.gather(
                *(send(session, server.url, completion(max_tokens=8, stream=True)) for _ in range(CLIENTS))
            )
            await poll_loop(feed, Cadence(0.01), views.append, failures.append, polls=1)
        finally:
            await feed.aclose()
    assert not failures and all(a.status == 200 and a.done for a in answers), [a.status for a in answers]
    clients_p95 = nearest_rank([a.ttft for a in answers], 0.95)
    view = views[-1]
    seen = view.gateway.client_ttft_p95_seconds
    assert seen == pytest.approx(clients_p95, rel=0.10), (seen, clients_p95)
    replicas_p95 = view.figures.fleet.ttft_p95_seconds
    assert replicas_p95 is not None and replicas_p95 < target < clients_p95  # the queue, not the replica, was slow
    breach = [p for p in view.pending if p.kind == "slo_breach_ttft"]  # raised once it lasts its minimum
    assert breach and breach[0].why.startswith("client p95 TTFT"), view.pending
    assert view.gateway.share(view.gateway.refused_per_second) == 0.0
