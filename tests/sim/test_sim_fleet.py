"""SimFleet: what `capcon demo` and the console's tests drive."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from console.sim.fleet import SimFleet

from .sim_plans import office_assistant

pytestmark = pytest.mark.timeout(60)


def counter(page: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)", page, re.M))


async def pages(fleet: SimFleet) -> list[str]:
    async with httpx.AsyncClient(timeout=5) as client:
        return [(await client.get(url)).text for url in fleet.metrics_urls]


async def wait_for(condition, seconds: float = 15.0) -> None:
    for _ in range(int(seconds / 0.1)):
        if await condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


async def test_in_process_traffic_reaches_every_replica():
    # Monday 10:00 at real time: 18 rps over 3 replicas.
    async with SimFleet(office_assistant(), replicas=3, seed=1, speed=1.0, start_week_seconds=10 * 3600) as fleet:
        assert len(set(fleet.urls)) == 3

        async def all_generating():
            return all(counter(p, "vllm:generation_tokens_total") > 0 for p in await pages(fleet))

        await wait_for(all_generating)
        status = fleet.status()
        assert status["week_time"].startswith("mon 10:0")
        assert status["offered_rps"] == pytest.approx(18.0)
        assert status["sent"] > 0


async def test_spike_raises_the_offered_rate_for_a_while():
    async with SimFleet(office_assistant(), replicas=1, seed=1, speed=1.0, start_week_seconds=10 * 3600) as fleet:
        fleet.spike(3.0, 0.5)
        assert fleet.status()["offered_rps"] == pytest.approx(54.0)
        await asyncio.sleep(0.6)
        assert fleet.status()["offered_rps"] == pytest.approx(18.0)


async def test_fault_down_moves_traffic_and_clear_brings_a_fresh_replica():
    async with SimFleet(office_assistant(), replicas=2, seed=2, speed=1.0, start_week_seconds=10 * 3600) as fleet:
        await fleet.fault(0, "down")
        async with httpx.AsyncClient(timeout=5) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(fleet.metrics_urls[0])
        sent_before = fleet.traffic.stats.sent
        await asyncio.sleep(0.5)
        assert fleet.traffic.stats.sent > sent_before
        assert fleet.traffic.stats.refused == 0  # all of it went to the live replica
        await fleet.clear_fault(0, "down")
        async with httpx.AsyncClient(timeout=5) as client:
            assert (await client.get(fleet.metrics_urls[0])).status_code == 200
        with pytest.raises(ValueError, match="no replica 7"):
            await fleet.fault(7, "down")
        with pytest.raises(ValueError, match="unknown fault"):
            await fleet.fault(0, "melt")


async def test_http_traffic_goes_through_the_api():
    async with SimFleet(
        office_assistant(), replicas=2, seed=3, speed=1.0, start_week_seconds=10 * 3600, traffic="http"
    ) as fleet:

        async def answered():
            return sum(counter(p, "http_requests_total") for p in await pages(fleet)) >= 10

        await wait_for(answered)
        total = sum(counter(p, "vllm:request_success_total") for p in await pages(fleet))
        assert total > 0


async def test_fleet_closes_every_port():
    fleet = SimFleet(office_assistant(), replicas=3, seed=4, traffic="off")
    async with fleet:
        urls = fleet.metrics_urls
    async with httpx.AsyncClient(timeout=2) as client:
        for url in urls:
            with pytest.raises(httpx.ConnectError):
                await client.get(url)
