"""A real vLLM's streamed chunks, read one by one with their times: what `capcon bench` times, what the simulator copies.

vLLM writes a chat's role chunk (`{"delta": {"role": "assistant", "content": ""}}`) with the engine's first
output, just before the first token; a completion has no role chunk. `capcon bench` times the first chunk with
output (console/token_chunks.py). Here the same requests go to the real vLLM and to a simulated replica in the
same run: the bench's TTFT read from the real stream's recorded chunks is the first content chunk's time, and the
simulator's chunks come in the real server's order.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import aiohttp
import pytest

from console.bench.client import StreamTimes
from console.plan.schema import load_plan
from console.sim.server import ReplicaServer
from console.sim.shape import replica_shape
from console.token_chunks import carries_token

from .vllm_harness import SERVED_MODEL

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

FAST_PLAN = Path(__file__).resolve().parents[1] / "bench" / "fixtures" / "fast-replica.yaml"  # model tiny-8b
ANSWER = 8
PROMPT = " ".join(f"w{j}" for j in range(200))


def body(chat: bool, model: str) -> dict:
    request: dict = {
        "model": model,
        "max_tokens": ANSWER,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if chat:
        request["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        request["prompt"] = PROMPT
    return request


async def recorded(base_url: str, chat: bool, model: str) -> tuple[float, list[tuple[float, str]]]:
    """One streamed request read as the bench's client reads it: (the monotonic clock at send, each `data:`
    payload with the clock's reading when its line was read)."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    events: list[tuple[float, str]] = []
    async with aiohttp.ClientSession(trust_env=False) as session:
        sent = time.monotonic()
        async with session.post(base_url + path, json=body(chat, model)) as response:
            assert response.status == 200, await response.text()
            buffer = b""
            async for data in response.content.iter_any():
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line = raw.strip()
                    if line.startswith(b"data:"):
                        events.append((time.monotonic(), line[5:].strip().decode()))
    return sent, events


def replayed_ttft(sent: float, events: list[tuple[float, str]]) -> float | None:
    """The bench's own reader (StreamTimes) over the recorded chunks, each read at its recorded time."""
    now = [sent]
    times = StreamTimes(sent, clock=lambda: now[0])
    for at, payload in events:
        now[0] = at
        if times.read(payload):
            break
    return times.result(200).ttft_seconds


def kinds(events: list[tuple[float, str]]) -> list[str]:
    """Each chunk as what it carries: role, token, empty (a choice with neither), usage; [DONE] as done."""
    out = []
    for _, payload in events:
        if payload == "[DONE]":
            out.append("done")
            continue
        chunk = json.loads(payload)
        choices = chunk.get("choices") or []
        if any("role" in (choice.get("delta") or {}) for choice in choices):
            out.append("role")
        elif carries_token(chunk):
            out.append("token")
        else:
            out.append("empty" if choices else "usage")
    return out


def role_delta(events: list[tuple[float, str]]) -> dict:
    return json.loads(events[0][1])["choices"][0]["delta"]


@pytest.fixture
async def sim_url():
    replica = ReplicaServer(replica_shape(load_plan(FAST_PLAN)), seed=0)
    await replica.start()
    try:
        yield replica.url
    finally:
        await replica.stop()


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completion"])
async def test_bench_times_a_real_vllm_stream_at_its_first_content_chunk(vllm_server, chat, report):
    sent, events = await recorded(vllm_server.base_url, chat, SERVED_MODEL)
    first_content = next(at for at, payload in events if payload != "[DONE]" and carries_token(json.loads(payload)))
    first_choice = next(at for at, payload in events if payload != "[DONE]" and json.loads(payload).get("choices"))
    assert replayed_ttft(sent, events) == first_content - sent
    report(
        f"real vLLM {'chat' if chat else 'completion'} stream: first chunk with a choice (vllm bench serve's TTFT) "
        f"{(first_choice - sent) * 1000:.2f} ms, first with content (capcon bench's) {(first_content - sent) * 1000:.2f} "
        f"ms after the send; chunks {kinds(events)}"
    )


async def test_the_simulator_streams_a_chat_in_the_real_vllms_order(vllm_server, sim_url):
    _, real = await recorded(vllm_server.base_url, True, SERVED_MODEL)
    _, simulated = await recorded(sim_url, True, "tiny-8b")
    for events in (real, simulated):
        order = kinds(events)
        # One role chunk, first, and right after it the first chunk of the engine's output: never usage or the end.
        assert order[0] == "role" and order.count("role") == 1, order
        assert order[1] in ("token", "empty") and order[-2:] == ["usage", "done"], order
    real_role, simulated_role = role_delta(real), role_delta(simulated)
    assert simulated_role["role"] == real_role["role"] == "assistant"
    assert not simulated_role.get("content") and not real_role.get("content")
    assert kinds(simulated).count("token") == ANSWER


async def test_a_completion_has_no_role_chunk_in_either(vllm_server, sim_url):
    _, real = await recorded(vllm_server.base_url, False, SERVED_MODEL)
    _, simulated = await recorded(sim_url, False, "tiny-8b")
    for events in (real, simulated):
        order = kinds(events)
        assert "role" not in order and order[0] in ("token", "empty") and order[-2:] == ["usage", "done"], order
