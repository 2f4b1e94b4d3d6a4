"""The waiting room under load: the bound holds, refusals come at once with Retry-After, deadlines are kept."""

from __future__ import annotations

import asyncio
import collections
import random

import pytest

from .conftest import (
    completion,
    gateway,
    metric,
    metric_values,
    replica_requests,
    send,
    sim_fleet,
    state,
    switch,
    until,
)

pytestmark = pytest.mark.timeout(90)


def check_refusal(answer) -> None:
    """Every non-200 carries Retry-After (whole seconds, at least 1) and an OpenAI-style error body."""
    assert answer.status != -1, answer.body
    assert int(answer.headers["Retry-After"]) >= 1, answer.headers
    error = answer.error
    assert error is not None and error["message"] and error["type"] and error["code"], answer.body


async def open_loop(
    session, url, rate: float, seconds: float, seed: int = 1, body=None, headers=None, streams: float = 0.3
):
    """Poisson arrivals at `rate` for `seconds`; every answer, in order of sending."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    tasks = []
    while loop.time() < end:
        kind = body or completion(max_tokens=8, stream=rng.random() < streams)
        tasks.append(asyncio.create_task(send(session, url, kind, headers)))
        await asyncio.sleep(rng.expovariate(rate))
    return await asyncio.gather(*tasks)


@pytest.mark.slow  # overload: a soak
async def test_three_times_overload_the_queue_never_passes_its_bound(session):
    # 2 replicas x cap 2, answers of 8 tokens (about 0.2 s): about 20 requests/s; offered 60/s for 8 s.
    async with sim_fleet(2) as fleet, gateway(fleet.urls, planned_cap=2) as server:
        bound = server.policy().max_queue
        samples = []
        stop = asyncio.Event()

        async def sample():
            while not stop.is_set():
                seen = await state(session, server)
                samples.append(seen["queue"]["interactive"])
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        answers = await open_loop(session, server.url, rate=60.0, seconds=8.0)
        stop.set()
        await sampler
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())

        assert len(samples) > 50 and max(samples) <= bound
        assert 0 < metric(values, "capcon_gateway_queue_length_max", queue="interactive") <= bound
        statuses = collections.Counter(a.status for a in answers)
        assert statuses[200] > 0 and statuses[429] > 0, statuses  # overloaded: some served, some shed at once
        assert set(statuses) <= {200, 429, 503}, statuses
        for answer in answers:
            if answer.status != 200:
                check_refusal(answer)
        assert len({a.request_id for a in answers}) == len(answers)
        assert all(a.headers.get("x-request-id") == a.request_id for a in answers)
        assert await replica_requests(session, fleet) == statuses[200] == server.state()["totals"]["local"]
        assert metric(values, "capcon_gateway_retry_after_seconds_count") == len(answers) - statuses[200]


async def test_a_request_that_outwaits_its_deadline_gets_503_and_one_that_finds_it_full_429_at_once(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        await switch(session, server, mode="bounded_queue", max_queue=2, max_wait_seconds=0.3)
        holder = asyncio.create_task(send(session, server.url, completion(max_tokens=60, stream=True)))
        assert await until(lambda: server.in_flight() == 1)
        waiting = [asyncio.create_task(send(session, server.url, completion())) for _ in range(2)]
        assert await until(lambda: len(server.queue) == 2)
        full = await send(session, server.url, completion())
        assert full.status == 429 and full.error["code"] == "queue_full"
        assert len(server.queue) == 2  # refused at once: the two waiting are still waiting
        check_refusal(full)
        for answer in await asyncio.gather(*waiting):
            assert answer.status == 503 and answer.error["code"] == "queue_timeout"
            check_refusal(answer)
        assert (await holder).done
        seen = await state(session, server)
        assert seen["totals"]["timed_out"] == 2 and seen["totals"]["rejected"] == 1


async def test_queued_requests_are_served_first_come_first_served(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        await switch(session, server, mode="bounded_queue", max_queue=10, max_wait_seconds=30)
        holder = asyncio.create_task(send(session, server.url, completion(max_tokens=10)))
        assert await until(lambda: server.in_flight() == 1)
        order = []

        async def one(i):
            answer = await send(session, server.url, completion(max_tokens=2))
            order.append(i)
            return answer

        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(one(i)))
            assert await until(lambda i=i: len(server.queue) == i + 1)
        assert all(a.status == 200 for a in await asyncio.gather(*tasks))
        assert order == [0, 1, 2, 3, 4]
        await holder


async def test_switching_to_pass_releases_the_queue_and_switches_keep_queued_deadlines(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        await switch(session, server, mode="bounded_queue", max_queue=10, max_wait_seconds=30)
        holder = asyncio.create_task(send(session, server.url, completion(max_tokens=200, stream=True)))
        assert await until(lambda: server.in_flight() == 1)
        waiting = [asyncio.create_task(send(session, server.url, completion(max_tokens=2))) for _ in range(4)]
        assert await until(lambda: len(server.queue) == 4)
        # A switch to a shorter wait applies to new arrivals; those queued keep their 30 s deadline.
        await switch(session, server, mode="bounded_queue", max_queue=10, max_wait_seconds=0.2)
        late = await send(session, server.url, completion())
        assert late.status == 503 and late.error["code"] == "queue_timeout"
        assert len(server.queue) == 4
        response = await switch(session, server, mode="pass")
        assert response.status == 200
        assert all(a.status == 200 for a in await asyncio.gather(*waiting))  # released at once, not at the cap
        assert not holder.done()  # ... while the long stream still holds its slot
        holder.cancel()


async def test_drain_rate_sets_retry_after(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        await switch(session, server, mode="bounded_queue", max_queue=0, max_wait_seconds=1)
        for _ in range(4):
            assert (await send(session, server.url, completion(max_tokens=1))).status == 200
        holder = asyncio.create_task(send(session, server.url, completion(max_tokens=40, stream=True)))
        assert await until(lambda: server.in_flight() == 1)
        refused = await send(session, server.url, completion())
        rate = server.state()["completions_per_second"]
        assert refused.status == 429 and rate > 0
        from console.overflow.admission import retry_after

        assert int(refused.headers["Retry-After"]) == retry_after(0, rate, 1.0)
        await holder
