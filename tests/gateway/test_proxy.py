"""The proxy in front of simulated replicas: streams passed on as they come, leases, health, bad input."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from .conftest import (
    MODEL,
    completion,
    gateway,
    metric,
    metric_values,
    replica_requests,
    running,
    send,
    sim_fleet,
    state,
    until,
)

pytestmark = pytest.mark.timeout(60)


async def test_streams_are_passed_on_chunk_by_chunk_and_whole_answers_intact(session):
    async with sim_fleet(2) as fleet, gateway(fleet.urls) as server:
        body = completion(max_tokens=12, stream=True, stream_options={"include_usage": True})
        async with session.post(server.url + "/v1/completions", json=body) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            assert response.headers["x-capcon-outcome"] == "local"
            events = []
            async for line in response.content:
                if line.startswith(b"data:"):
                    if not events:
                        # Not buffered: the first token is here while the replica is still generating.
                        assert running(fleet) == 1
                    events.append(line)
        assert events[-1].strip() == b"data: [DONE]"
        assert len(events) == 12 + 2  # one chunk per token, the usage chunk, [DONE]

        whole = await send(session, server.url, completion(max_tokens=5))
        assert whole.status == 200
        import json

        data = json.loads(whole.body)
        assert data["usage"]["completion_tokens"] == 5 and data["choices"][0]["text"]

        chat = await send(
            session,
            server.url,
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True},
            path="/v1/chat/completions",
        )
        assert chat.status == 200 and chat.done and chat.chunks == 1 + 4  # the role chunk, then a token each

        async with session.get(server.url + "/v1/models") as response:
            assert response.status == 200
            assert [m["id"] for m in (await response.json())["data"]] == [MODEL]
        async with session.get(server.url + "/health") as response:
            assert response.status == 200
        assert await replica_requests(session, fleet) == 3
        seen = await state(session, server)
        assert seen["totals"]["local"] == 3 and seen["in_flight"] == 0


async def test_least_outstanding_requests_spread_the_load(session):
    async with sim_fleet(2) as fleet, gateway(fleet.urls, planned_cap=10) as server:
        tasks = [
            asyncio.create_task(send(session, server.url, completion(max_tokens=20, stream=True))) for _ in range(6)
        ]
        assert await until(lambda: server.in_flight() == 6)
        assert sorted(r.in_flight for r in server.replicas) == [3, 3]
        assert all(a.status == 200 and a.done for a in await asyncio.gather(*tasks))
        assert server.in_flight() == 0  # every lease ended with its response


async def test_a_client_that_disconnects_aborts_its_request_on_the_replica(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        async with aiohttp.ClientSession() as leaving:
            response = await leaving.post(server.url + "/v1/completions", json=completion(max_tokens=400, stream=True))
            assert response.status == 200
            await response.content.readline()  # the first chunk: the request is running on the replica
            assert running(fleet) == 1 and server.in_flight() == 1
            response.close()  # the client goes away mid-stream
        # The replica's engine sees the request end (its KV freed) and the gateway's lease is released.
        assert await until(lambda: running(fleet) == 0 and server.in_flight() == 0)
        engine = fleet.replicas[0].engine
        assert engine.kv_usage == 0.0


async def test_a_client_that_leaves_the_queue_leaves_no_trace(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        holder = asyncio.create_task(send(session, server.url, completion(max_tokens=30, stream=True)))
        assert await until(lambda: server.in_flight() == 1)
        async with aiohttp.ClientSession() as leaving:
            waiting = asyncio.create_task(leaving.post(server.url + "/v1/completions", json=completion()))
            assert await until(lambda: len(server.queue) == 1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert await until(lambda: len(server.queue) == 0)
        assert (await holder).done
        assert await until(lambda: server.in_flight() == 0)


async def test_a_replica_that_refuses_connections_is_skipped_then_used_again(session):
    async with sim_fleet(2) as fleet, gateway(fleet.urls, planned_cap=10) as server:
        await fleet.fault(0, "down")
        answers = [await send(session, server.url, completion(max_tokens=2)) for _ in range(6)]
        assert [a.status for a in answers] == [200] * 6  # a refused connection is decided again, on the other
        assert not server.replicas[0].healthy and server.replicas[1].answered == 6
        await fleet.clear_fault(0, "down")
        assert await until(lambda: server.replicas[0].healthy)  # the health checks retry it
        tasks = [
            asyncio.create_task(send(session, server.url, completion(max_tokens=10, stream=True))) for _ in range(4)
        ]
        await asyncio.gather(*tasks)
        assert server.replicas[0].answered >= 1


async def test_every_replica_down_is_503_with_retry_after(session):
    async with sim_fleet(2) as fleet, gateway(fleet.urls) as server:
        for i in range(2):
            await fleet.fault(i, "down")
        answer = await send(session, server.url, completion())
        assert answer.status == 503 and answer.error["code"] == "no_replica_available"
        assert int(answer.headers["Retry-After"]) >= 1
        assert await until(lambda: not any(r.healthy for r in server.replicas))
        async with session.get(server.url + "/health") as response:
            assert response.status == 503 and "Retry-After" in response.headers
        async with session.get(server.url + "/v1/models") as response:
            assert response.status == 503 and "Retry-After" in response.headers


@pytest.mark.parametrize(
    "data, headers, status, code",
    [
        (b"{not json", {}, 400, "invalid_json"),
        (b"[1, 2]", {}, 400, "invalid_json"),
        (b"\xff\xfe{}", {}, 400, "invalid_json"),
        (b"[" * 50_000 + b"]" * 50_000, {}, 400, "invalid_json"),
        (b'{"model": "llama-70b", "prompt": 12}', {}, 400, "400"),  # the replica's own refusal, in the same shape
        (b'{"model": 7, "prompt": "x"}', {}, 400, "invalid_model"),
        (b'{"model": "no-such-model", "prompt": "x"}', {}, 404, "model_not_found"),
        (b'{"model": "llama-70b", "prompt": "x"}', {"x-capcon-class": "urgent"}, 400, "invalid_class"),
        (b"x" * (200 * 1024 + 1), {}, 413, "request_too_large"),
    ],
)
async def test_bad_input_gets_an_error_body_and_retry_after_and_the_gateway_goes_on(
    session, data, headers, status, code
):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, max_body_bytes=200 * 1024) as server:
        async with session.post(
            server.url + "/v1/completions", data=data, headers={"Content-Type": "application/json", **headers}
        ) as response:
            assert response.status == status
            assert "Retry-After" in response.headers
            error = (await response.json())["error"]
            assert error["code"] == code and error["message"] and error["type"]
        assert (await send(session, server.url, completion(max_tokens=2))).status == 200


async def test_unknown_routes_and_methods_answer_in_the_same_shape(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        async with session.get(server.url + "/v1/completions") as response:
            assert response.status == 405 and "Retry-After" in response.headers
            assert (await response.json())["error"]["code"] == "method_not_allowed"
        async with session.get(server.url + "/nowhere") as response:
            assert response.status == 404 and (await response.json())["error"]["code"] == "not_found"
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())
        assert metric(values, "capcon_gateway_replica_healthy", replica=server.replicas[0].name) == 1.0
