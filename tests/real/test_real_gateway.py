"""The gateway in front of a real vLLM: answers arrive intact, counts agree with vLLM's, a disconnect frees the slot.

Streaming and non-streaming completions go through `capcon gateway`'s server to
the real vLLM on CPU. Every stream must end with [DONE] after exactly its
max_tokens chunks of text, every whole answer must carry its usage, and vLLM's
own request counter must grow by exactly what the gateway says it forwarded. A
client that walks away from a long stream must make vLLM stop generating it:
its `vllm:num_requests_running` falls back to 0 well before the stream would
have ended.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from console.gateway.config import GatewayConfig
from console.gateway.server import Gateway
from console.overflow.policy import Policy

from . import raw_metrics
from .load import ACCEPT_TEXT
from .vllm_harness import SERVED_MODEL

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(900)]

SUCCESS = "vllm:request_success_total"
RUNNING = "vllm:num_requests_running"


async def metrics_text(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url, headers=ACCEPT_TEXT) as response:
        return await response.text()


async def settled_count(http: aiohttp.ClientSession, url: str) -> float:
    """vLLM's finished-request count once nothing is running (it is recorded just after the last token)."""
    for _ in range(200):
        text = await metrics_text(http, url)
        if raw_metrics.total(text, RUNNING) == 0 and raw_metrics.total(text, "vllm:num_requests_waiting") == 0:
            return raw_metrics.total(text, SUCCESS)
        await asyncio.sleep(0.1)
    raise AssertionError("vLLM never went idle")


def body(max_tokens: int, stream: bool, words: int = 12) -> dict:
    return {
        "model": SERVED_MODEL,
        "prompt": " ".join(["the plan holds at peak"] * (words // 5 + 1)),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
        "temperature": 0,
    }


async def streamed(http: aiohttp.ClientSession, url: str, max_tokens: int) -> tuple[int, int, bool]:
    """(status, completion tokens in the stream's usage, ended with [DONE])."""
    request = {**body(max_tokens, True), "stream_options": {"include_usage": True}}
    async with http.post(url + "/v1/completions", json=request) as response:
        tokens, done = 0, False
        async for line in response.content:
            if line.startswith(b"data: [DONE]"):
                done = True
            elif line.startswith(b"data:"):
                event = json.loads(line[5:])
                tokens = (event.get("usage") or {}).get("completion_tokens") or tokens
        return response.status, tokens, done


async def whole(http: aiohttp.ClientSession, url: str, max_tokens: int) -> tuple[int, int]:
    """(status, completion tokens in usage)."""
    async with http.post(url + "/v1/completions", json=body(max_tokens, False)) as response:
        answer = await response.json()
        return response.status, answer["usage"]["completion_tokens"]


@pytest.fixture
async def gateway(vllm_server):
    """A gateway in pass mode in front of the real vLLM."""
    server = Gateway(
        GatewayConfig(
            targets=(vllm_server.base_url,),
            plan_policy=Policy(mode="pass"),
            listen=("127.0.0.1", 0),
            health_interval=1.0,
        )
    )
    await server.start()
    yield server
    await server.stop(drain_timeout=5.0)


async def test_the_gateway_carries_real_vllm_answers_whole_and_counts_what_vllm_counts(vllm_server, gateway, report):
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        before = await settled_count(http, vllm_server.metrics_url)
        streams = [streamed(http, gateway.url, 24) for _ in range(6)]
        wholes = [whole(http, gateway.url, 16) for _ in range(4)]
        answers = await asyncio.gather(*streams, *wholes)
        after = await settled_count(http, vllm_server.metrics_url)
        async with http.get(gateway.url + "/metrics") as response:
            exposition = await response.text()
    stream_answers, whole_answers = answers[:6], answers[6:]
    assert all(answer == (200, 24, True) for answer in stream_answers), stream_answers
    assert all(answer == (200, 16) for answer in whole_answers), whole_answers
    forwarded = sum(
        value
        for labels, value in raw_metrics.samples(exposition, "capcon_gateway_requests_total")
        if labels.get("outcome") == "local"
    )
    report(
        f"real vLLM through the gateway: vLLM counted {after - before:.0f} requests, the gateway forwarded {forwarded:.0f}"
    )
    assert after - before == 10 == forwarded


def finished(text: str, reason: str) -> float:
    return sum(value for labels, value in raw_metrics.samples(text, SUCCESS) if labels.get("finished_reason") == reason)


async def test_a_client_that_leaves_a_real_stream_stops_vllm_generating_it(vllm_server, gateway, report):
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        await settled_count(http, vllm_server.metrics_url)
        idle = await metrics_text(http, vllm_server.metrics_url)
        # 900 tokens at a few tens a second on CPU: tens of seconds if nobody stopped it.
        response = await http.post(gateway.url + "/v1/completions", json=body(900, True))
        first = await response.content.readline()
        assert first.startswith(b"data:")
        # vLLM records its gauges beside sending the tokens, not before: the first chunk can reach the client while
        # its page still reads the step before. Read it again until the stream is counted (or give up: a failure).
        running = 0.0
        for _ in range(50):
            running = raw_metrics.total(await metrics_text(http, vllm_server.metrics_url), RUNNING)
            if running == 1:
                break
            await asyncio.sleep(0.1)
        assert running == 1
        response.close()  # the client walks away mid-stream
        loop = asyncio.get_running_loop()
        started = loop.time()
        freed = False
        for _ in range(300):
            text = await metrics_text(http, vllm_server.metrics_url)
            if raw_metrics.total(text, RUNNING) == 0:
                freed = True
                break
            await asyncio.sleep(0.1)
        freed_after = loop.time() - started
        generated = raw_metrics.total(text, "vllm:generation_tokens_total") - raw_metrics.total(
            idle, "vllm:generation_tokens_total"
        )
    report(
        f"real vLLM: a client leaving a 900-token stream freed vLLM's slot {freed_after:.1f} s later "
        f"(it had generated {generated:.0f} of its 900 tokens)"
    )
    assert freed, "vLLM went on generating a stream whose client had left"
    # vLLM stopped it early: it never ran out its 900 tokens.
    assert finished(text, "length") == finished(idle, "length")
    assert generated < 900
