"""The streaming client: what it measures from a server-sent event stream, and how it fails."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
from aiohttp import web

from console.bench.client import StreamingClient, StreamTimes, percentile, prompts

FIRST_TOKEN_DELAY = 0.2
IN_FLIGHT = web.AppKey("in_flight", list)
PEAK = web.AppKey("peak", list)


async def completions(request: web.Request) -> web.StreamResponse:
    """An OpenAI-style stream: a pause before the first token, then one chunk per token, then usage."""
    body = await request.json()
    if body["prompt"] == "fail":
        return web.json_response({"error": "boom"}, status=500)
    in_flight = request.app[IN_FLIGHT]
    in_flight.append(None)
    request.app[PEAK].append(len(in_flight))
    try:
        return await stream(request, body)
    finally:
        in_flight.pop()


async def stream(request: web.Request, body: dict) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)

    async def send(payload) -> None:
        await response.write(f"data: {json.dumps(payload) if not isinstance(payload, str) else payload}\n\n".encode())

    await asyncio.sleep(FIRST_TOKEN_DELAY)
    for index in range(body["max_tokens"]):
        last = index == body["max_tokens"] - 1
        await send({"choices": [{"index": 0, "text": f"t{index}", "finish_reason": "length" if last else None}]})
    await send(
        {
            "choices": [],
            "usage": {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": body["max_tokens"]},
        }
    )
    await send("[DONE]")
    return response


@pytest.fixture
async def server():
    app = web.Application()
    app[IN_FLIGHT], app[PEAK] = [], []
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield f"http://127.0.0.1:{port}", app
    await runner.cleanup()


async def test_a_stream_gives_ttft_tokens_and_gaps(server):
    server, _app = server
    client = StreamingClient(server, "m")
    async with httpx.AsyncClient() as http:
        result = await client.complete(http, "three word prompt", max_tokens=5)
    assert result.ok and result.error == "" and result.status == 200
    assert result.prompt_tokens == 3 and result.output_tokens == 5 and result.finish_reason == "length"
    assert result.ttft_seconds >= FIRST_TOKEN_DELAY  # the client's clock includes the server's pause
    assert result.e2e_seconds >= result.ttft_seconds
    assert len(result.chunk_gaps_seconds) == 4


async def test_a_load_runs_every_prompt_with_bounded_concurrency(server):
    server, app = server
    load = await StreamingClient(server, "m").run(prompts(10, words=4), concurrency=3, max_tokens=2)
    assert len(load.results) == 10 and not load.failed
    assert load.total("output_tokens") == 20
    assert load.total("prompt_tokens") == sum(len(p.split()) for p in prompts(10, words=4))
    assert load.quantile("ttft_seconds", 0.95) >= FIRST_TOKEN_DELAY
    assert max(app[PEAK]) == 3  # never more in flight than asked, and that many reached


async def test_server_errors_and_refusals_are_results_not_exceptions(server):
    server, _app = server
    async with httpx.AsyncClient() as http:
        failed = await StreamingClient(server, "m").complete(http, "fail", max_tokens=2)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        refused = await StreamingClient(f"http://127.0.0.1:{closed}", "m").complete(http, "x", max_tokens=2)
    assert not failed.ok and failed.status == 500 and failed.error.startswith("HTTP 500")
    assert not refused.ok and refused.status is None and "ConnectError" in refused.error


def test_percentile_interpolates_like_numpy():
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.95) == pytest.approx(3.85)


def test_prompts_are_distinct_and_deterministic():
    assert prompts(5) == prompts(5)
    assert len(set(prompts(50))) == 50


def test_the_first_token_is_the_first_chunk_with_output_on_the_clients_clock():
    """A role chunk at 0.01 s, an empty delta, the first content at 0.5 s: TTFT is 0.5 s, and the gaps run
    between chunks with output (the finish chunk is one; the usage chunk is none)."""
    now = [10.0]
    times = StreamTimes(10.0, clock=lambda: now[0])

    def at(moment: float, chunk: dict | str) -> bool:
        now[0] = 10.0 + moment
        return times.read(chunk if isinstance(chunk, str) else json.dumps(chunk))

    def delta(**fields) -> dict:
        finish = fields.pop("finish", None)
        return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}

    at(0.01, delta(role="assistant", content=""))
    at(0.02, delta(content=""))
    at(0.5, delta(content=" the"))
    at(0.6, delta(content=" plan"))
    at(0.7, delta(content="", finish="stop"))
    at(0.8, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    assert at(0.9, "[DONE]")
    result = times.result(200)
    assert result.ok and result.ttft_seconds == pytest.approx(0.5)
    assert result.chunk_gaps_seconds == pytest.approx((0.1, 0.1))
    assert result.last_token_seconds == pytest.approx(0.7) and result.e2e_seconds == pytest.approx(0.9)
    assert result.finish_reason == "stop" and result.output_tokens == 2
