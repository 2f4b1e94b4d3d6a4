"""The sweep's aiohttp streaming request: what it times, and every way a server can fail it."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from aiohttp import web

from console.bench.measure import figures
from console.bench.stream import SessionClient

GAP = 0.02
PREFILL = 0.1  # the server's pause before its first token


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    mode = body.get("prompt") or body["messages"][-1]["content"]
    if mode == "fail":
        return web.json_response({"error": "boom"}, status=500)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    if mode == "garbage":
        await response.write(b"data: {not json\n\n")
        return response
    if mode == "empty":
        await response.write(b"data: [DONE]\n\n")
        return response
    if mode in ("role first", "role only"):
        # A chat's role chunk on arrival, before the pause, as a server might send it (vLLM sends it with the token).
        role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        await response.write(f"data: {json.dumps(role)}\n\n".encode())
    if mode == "role only":
        await response.write(b"data: [DONE]\n\n")
        return response
    await asyncio.sleep(PREFILL)
    tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    for index in range(tokens):
        choice = {"index": 0, "text": f"t{index}", "delta": {"content": f"t{index}"}, "finish_reason": None}
        # Two events in one write: each is its own chunk, as vLLM's client reads them.
        await response.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        await asyncio.sleep(GAP)
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tokens}}
    await response.write(f": keep-alive\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    return response


@pytest.fixture
async def server():
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_stream_is_timed_per_chunk_with_the_servers_token_count(server):
    async with SessionClient(server, "m") as client:
        result = await client.complete("hello", 5)
        chat = await client.complete("", 4, messages=[{"role": "user", "content": "hello"}])
    assert result.ok and result.output_tokens == 5 and result.prompt_tokens == 3
    assert result.ttft_seconds >= PREFILL and len(result.chunk_gaps_seconds) == 4
    assert all(gap >= GAP * 0.5 for gap in result.chunk_gaps_seconds)
    f = figures(result)
    assert f.tpot == pytest.approx((f.e2e - f.ttft) / 4)
    assert chat.ok and chat.output_tokens == 4


async def test_a_role_chunk_before_the_pause_is_not_the_first_token(server):
    """TTFT ends at the first chunk with content, as the answer's first token; the role chunk is no gap either."""
    async with SessionClient(server, "m") as client:
        chat = await client.complete("", 4, messages=[{"role": "user", "content": "role first"}])
        empty = await client.complete("", 4, messages=[{"role": "user", "content": "role only"}])
    assert chat.ok and chat.ttft_seconds >= PREFILL
    assert len(chat.chunk_gaps_seconds) == 3 and figures(chat).output_tokens == 4
    assert not empty.ok and empty.error == "the stream ended without a token"


async def test_failures_are_results_never_exceptions(server):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    async with SessionClient(server, "m") as client:
        failed = await client.complete("fail", 3)
        garbage = await client.complete("garbage", 3)
        empty = await client.complete("empty", 3)
    async with SessionClient(f"http://127.0.0.1:{closed_port}", "m", timeout=5) as nowhere:
        refused = await nowhere.complete("x", 3)
    assert (failed.ok, failed.status) == (False, 500) and "HTTP 500" in failed.error
    assert not garbage.ok and "JSONDecodeError" in garbage.error
    assert not empty.ok and "without a token" in empty.error
    assert not refused.ok and refused.status is None
