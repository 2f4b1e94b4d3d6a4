"""The modes against real parts: hosted (a second simulator checking the bearer token), defer, and switches
between all of them while traffic flows."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import random
from dataclasses import replace

import pytest

from console.gateway.config import policy_from_plan

from .conftest import (
    HOSTED_KEY,
    HOSTED_MODEL,
    completion,
    gateway,
    hosted_endpoint,
    metric,
    metric_values,
    replica_requests,
    send,
    sim_fleet,
    state,
    switch,
    until,
)
from .plans import gateway_plan
from .test_queue import check_refusal

pytestmark = pytest.mark.timeout(90)

ALLOWED = gateway_plan(prompts_may_leave=True)


def hosted_options(endpoint, key: str = HOSTED_KEY, **more) -> dict:
    return {
        "plan": ALLOWED,
        "hosted_url": endpoint.url,
        "hosted_models": {"*": HOSTED_MODEL},
        "hosted_key": key,
        **more,
    }


async def busy(session, server, tokens: int = 60):
    """A long stream holding the only slot (cap 1)."""
    holder = asyncio.create_task(send(session, server.url, completion(max_tokens=tokens, stream=True)))
    assert await until(lambda: server.in_flight() == 1)
    return holder


async def test_hosted_is_refused_while_prompts_may_not_leave(session):
    async with (
        hosted_endpoint() as endpoint,
        sim_fleet(1) as fleet,
        gateway(fleet.urls, planned_cap=1, hosted_url=endpoint.url, hosted_key=HOSTED_KEY) as server,
    ):
        async with session.put(
            server.admin_url + "/admin/policy",
            json={"mode": "hosted", "reason": "spike"},
            headers={"Authorization": "Bearer admin-token-0123456789abcdef"},
        ) as response:
            assert response.status == 400
            error = (await response.json())["error"]
            assert error["param"] == "mode" and "prompts_may_leave" in error["message"]
        assert server.policy().mode == "bounded_queue"
        holder = await busy(session, server)
        answers = await asyncio.gather(*(send(session, server.url, completion()) for _ in range(12)))
        assert all(a.headers.get("x-capcon-outcome") != "hosted" for a in answers)
        assert endpoint.requests == 0 and endpoint.refused_tokens == 0
        await holder


async def test_hosted_past_the_threshold_maps_the_model_and_counts_its_tokens(session):
    async with (
        hosted_endpoint() as endpoint,
        sim_fleet(1) as fleet,
        gateway(fleet.urls, planned_cap=1, hosted_price_per_million=2.0, **hosted_options(endpoint)) as server,
    ):
        assert (await switch(session, server, mode="hosted", hosted_after_queue=0)).status == 200
        holder = await busy(session, server)
        whole = await send(session, server.url, completion(max_tokens=6))
        assert whole.status == 200 and whole.headers["x-capcon-outcome"] == "hosted"
        assert json.loads(whole.body)["model"] == HOSTED_MODEL
        streamed = await send(session, server.url, completion(max_tokens=5, stream=True))
        assert streamed.status == 200 and streamed.done
        assert streamed.chunks == 5  # the usage chunk the gateway asked for is not passed on: not asked for
        assert endpoint.requests == 2 and endpoint.seen_models == [HOSTED_MODEL, HOSTED_MODEL]
        usage = server.state()["hosted_usage"]
        assert usage["completion_tokens"] == 11 and usage["prompt_tokens"] > 0
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())
        assert metric(values, "capcon_gateway_hosted_tokens_total", kind="completion") == 11
        total = usage["completion_tokens"] + usage["prompt_tokens"]
        assert metric(values, "capcon_gateway_hosted_cost_dollars_total") == pytest.approx(total * 2.0 / 1e6)
        assert metric(values, "capcon_gateway_requests_total", outcome="hosted", **{"class": "interactive"}) == 2
        assert metric(values, "capcon_gateway_mode", mode="hosted") == 1.0
        await holder
        assert (await send(session, server.url, completion(max_tokens=2))).headers["x-capcon-outcome"] == "local"


@pytest.mark.parametrize("failure", ["wrong key", "server error", "unreachable"])
async def test_a_failing_hosted_endpoint_falls_back_to_the_bounded_queue(session, failure):
    async with hosted_endpoint() as endpoint, sim_fleet(1) as fleet:
        options = hosted_options(endpoint, key="not-the-key" if failure == "wrong key" else HOSTED_KEY)
        if failure == "unreachable":
            options["hosted_url"] = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
        endpoint.failing = failure == "server error"
        async with gateway(fleet.urls, planned_cap=1, **options) as server:
            await switch(session, server, mode="hosted", hosted_after_queue=0, max_queue=4, max_wait_seconds=30)
            holder = await busy(session, server, tokens=20)
            answer = await send(session, server.url, completion(max_tokens=2))
            assert answer.status == 200 and answer.headers["x-capcon-outcome"] == "local"  # waited, then served
            assert endpoint.requests == 0
            assert endpoint.refused_tokens == (1 if failure == "wrong key" else 0)
            await holder
            assert server.state()["totals"]["hosted"] == 0


async def test_defer_refuses_deferrable_work_until_off_peak_and_keeps_interactive_traffic(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, off_peak=lambda now: 7200.0) as server:
        await switch(session, server, mode="defer")
        deferred = await send(session, server.url, completion(), headers={"x-capcon-class": "deferrable"})
        assert deferred.status == 429 and deferred.error["code"] == "deferred"
        assert deferred.headers["Retry-After"] == "7200"
        check_refusal(deferred)
        assert (await send(session, server.url, completion(max_tokens=2))).status == 200
        totals = server.state()["counters"]
        assert totals["deferred"]["deferrable"] == 1 and totals["local"]["interactive"] == 1


async def test_defer_hold_releases_the_batch_queue_only_while_the_fleet_has_room(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=2, batch_release_share=0.5) as server:
        await switch(session, server, mode="defer", defer_action="hold", max_batch_queue=2)
        holder = await busy(session, server, tokens=30)  # 1 in flight: at half the cap of 2, no room for batch
        held = [
            asyncio.create_task(
                send(session, server.url, completion(max_tokens=2), headers={"x-capcon-class": "deferrable"})
            )
            for _ in range(2)
        ]
        assert await until(lambda: len(server.batch) == 2)
        full = await send(session, server.url, completion(), headers={"x-capcon-class": "deferrable"})
        assert full.status == 429 and full.error["code"] == "batch_queue_full"
        interactive = await send(session, server.url, completion(max_tokens=2))
        assert interactive.status == 200 and len(server.batch) == 2  # interactive traffic keeps the free slot
        await holder
        assert all(a.status == 200 for a in await asyncio.gather(*held))
        assert server.state()["counters"]["local"]["deferrable"] == 2


@pytest.mark.slow  # switches under load: a soak
async def test_switches_between_all_modes_under_load_give_every_request_exactly_one_answer(session):
    async with (
        hosted_endpoint() as endpoint,
        sim_fleet(2) as fleet,
        gateway(fleet.urls, planned_cap=2, off_peak=lambda now: 3600.0, **hosted_options(endpoint)) as server,
    ):
        switches = itertools.cycle(
            [
                {"mode": "pass"},
                {"mode": "bounded_queue", "max_queue": 3, "max_wait_seconds": 0.5},
                {"mode": "hosted", "hosted_after_queue": 2},
                {"mode": "defer", "defer_action": "reject"},
                {"mode": "defer", "defer_action": "hold", "max_batch_queue": 5},
                {"mode": "pass", "max_inflight_per_replica": 1},
                {"mode": "bounded_queue", "max_queue": 0, "max_wait_seconds": 0.2},
            ]
        )
        done = asyncio.Event()
        applied = []

        async def switcher():
            while not done.is_set():
                body = next(switches)
                response = await switch(session, server, **body, reason=f"load test: {body['mode']}")
                applied.append(response.status)
                await asyncio.sleep(0.35)

        rng = random.Random(5)
        loop = asyncio.get_running_loop()
        switching = asyncio.create_task(switcher())
        tasks, end = [], loop.time() + 7.0
        while loop.time() < end or len(applied) < 21:  # 20 switches at least, every mode three times
            headers = {"x-capcon-class": "deferrable"} if rng.random() < 0.2 else None
            body = completion(max_tokens=6, stream=rng.random() < 0.4)
            tasks.append(asyncio.create_task(send(session, server.url, body, headers)))
            await asyncio.sleep(rng.expovariate(45.0))
        done.set()
        await switching
        await switch(session, server, mode="pass")  # release whatever is still held
        answers = await asyncio.gather(*tasks)

        assert len(applied) >= 21 and set(applied) == {200}
        assert len(answers) == len(tasks)
        assert len({a.request_id for a in answers}) == len(answers)
        assert all(a.status != -1 for a in answers), [a.body for a in answers if a.status == -1][:3]
        assert all(a.headers.get("x-request-id") == a.request_id for a in answers)
        for answer in answers:
            if answer.status != 200:
                check_refusal(answer)
            elif answer.body == b"":  # a stream: it ran to its end
                assert answer.done
        seen = await state(session, server)
        totals = seen["totals"]
        assert sum(totals.values()) == len(answers)
        assert await replica_requests(session, fleet) == totals["local"]
        assert endpoint.requests == totals["hosted"]
        statuses = collections.Counter(a.status for a in answers)
        assert statuses[200] == totals["local"] + totals["hosted"]
        assert totals["hosted"] > 0 and totals["deferred"] + totals["rejected"] > 0  # the modes took turns
        assert seen["in_flight"] == 0 and seen["queue"]["interactive"] == 0 and seen["queue"]["batch"] == 0


async def test_the_plan_policy_comes_from_the_plans_overflow_section():
    plan = gateway_plan(mode="defer", max_queue=4, max_wait_seconds=2.5)
    policy = policy_from_plan(plan, replicas=3, instances=2)
    assert (policy.mode, policy.max_queue, policy.max_wait_seconds, policy.from_plan) == ("defer", 6, 2.5, True)
    assert policy_from_plan(replace(plan, data=replace(plan.data, prompts_may_leave=True)), 1).hosted_allowed
