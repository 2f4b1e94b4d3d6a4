"""A simulated replica over real HTTP on loopback: OpenAI-style API, vLLM /metrics, faults."""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.sim.server import CHAT_TOKENS_PER_MESSAGE, ReplicaServer
from console.sim.shape import replica_shape
from console.sim.traffic import LengthSampler

from .sim_plans import example_a

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def replica():
    plan = example_a(bandwidth_efficiency=1.0, compute_efficiency=1.0, flops_per_second=math.inf)
    shape = replica_shape(plan)
    server = ReplicaServer(shape, seed=3, answer_sampler=LengthSampler(plan.workloads[0].tokens, 8192))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def client():
    async with httpx.AsyncClient(timeout=30) as http:
        yield http


async def scrape(client, replica) -> dict[tuple[str, tuple], float]:
    response = await client.get(f"{replica.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[
                (
                    sample.name,
                    tuple(sorted((k, v) for k, v in sample.labels.items() if k not in ("engine", "model_name"))),
                )
            ] = sample.value
    return values


def value(values, name, **labels) -> float:
    return values[(name, tuple(sorted(labels.items())))]


async def stream_tokens(client, url, body) -> tuple[int, dict | None, str | None]:
    """(content chunks received, usage, finish_reason) of one streamed call."""
    chunks, usage, reason = 0, None, None
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        done = False
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk["choices"]:
                text = choice.get("text", choice.get("delta", {}).get("content"))
                if text:
                    chunks += 1
                reason = choice.get("finish_reason") or reason
        assert done
    return chunks, usage, reason


async def test_completion_reports_usage_and_metrics_count_it(replica, client):
    response = await client.post(
        f"{replica.url}/v1/completions", json={"prompt": list(range(300)), "max_tokens": 25, "ignore_eos": True}
    )
    body = response.json()
    assert response.status_code == 200 and body["object"] == "text_completion"
    assert body["usage"] == {
        "prompt_tokens": 300,
        "completion_tokens": 25,
        "total_tokens": 325,
        "prompt_tokens_details": None,
    }
    assert body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["text"].split()) == 25
    values = await scrape(client, replica)
    assert value(values, "vllm:generation_tokens_total") == 25
    assert value(values, "vllm:prompt_tokens_total") == 300
    assert value(values, "vllm:request_success_total", finished_reason="length") == 1
    assert value(values, "http_requests_total", handler="/v1/completions", method="POST", status="2xx") == 1


async def test_tokens_streamed_equal_generation_tokens_counted(replica, client):
    calls = []
    for i in range(12):
        if i % 2:
            body = {
                "messages": [{"role": "user", "content": "word " * (50 + i)}],
                "max_tokens": 30 + i,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            calls.append(stream_tokens(client, f"{replica.url}/v1/chat/completions", body))
        else:
            body = {
                "prompt": "word " * (100 + i),
                "max_tokens": 40,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            calls.append(stream_tokens(client, f"{replica.url}/v1/completions", body))
    results = await asyncio.gather(*calls)
    streamed = sum(chunks for chunks, _, _ in results)
    assert all(chunks == usage["completion_tokens"] for chunks, usage, _ in results)
    assert {reason for _, _, reason in results} <= {"stop", "length"}
    values = await scrape(client, replica)
    assert value(values, "vllm:generation_tokens_total") == streamed
    assert value(values, "vllm:prompt_tokens_total") == sum(u["prompt_tokens"] for _, u, _ in results)
    finished = sum(value(values, "vllm:request_success_total", finished_reason=r) for r in ("stop", "length"))
    assert finished == 12
    assert value(values, "vllm:time_to_first_token_seconds_count") == 12
    assert value(values, "vllm:num_requests_running") == 0


async def events_with_times(client, url, body) -> tuple[float, list[tuple[float, dict]]]:
    """(the loop's time at send, each data event of a stream with the loop's time it was read)."""
    clock = asyncio.get_running_loop().time
    events = []
    sent_at = clock()
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append((clock(), json.loads(line[6:])))
    return sent_at, events


async def test_the_role_chunk_comes_with_the_first_token_after_prefill(client):
    """As vLLM sends a chat: its role chunk once prefill is done, just before the first token, not on arrival.

    The replica runs on the event loop's clock, the client reads it too: the role chunk cannot be read before the
    simulated TTFT (arrival to first token) has passed, the prefill of 2,000 prompt tokens included.
    """
    plan = example_a()  # finite compute: a long prompt's prefill takes a step of its own length
    server = ReplicaServer(replica_shape(plan), seed=3)
    await server.start()
    try:
        prompt = 2000 - CHAT_TOKENS_PER_MESSAGE
        body = {"messages": [{"role": "user", "content": "word " * prompt}], "max_tokens": 3, "stream": True}
        sent_at, events = await events_with_times(client, f"{server.url}/v1/chat/completions", body)
        values = await scrape(client, server)
        prefill = server._started_engine().decode_step_seconds(2000, 2000)
    finally:
        await server.stop()
    deltas = [chunk["choices"][0]["delta"] for _, chunk in events]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": " the"},
        {"content": " plan"},
        {"content": " holds"},
    ]
    assert value(values, "vllm:time_to_first_token_seconds_count") == 1
    ttft = value(values, "vllm:time_to_first_token_seconds_sum")
    assert ttft >= prefill * (1 - 1e-9) and prefill > 0.05  # an idle engine: TTFT is the prefill step
    role_at, first_at = events[0][0], events[1][0]
    assert role_at - sent_at >= ttft and first_at >= role_at


async def test_a_completion_streams_no_role_chunk(replica, client):
    """vLLM's /v1/completions has no role chunk: its first event is the first token."""
    body = {"prompt": "word " * 20, "max_tokens": 2, "stream": True}
    _, events = await events_with_times(client, f"{replica.url}/v1/completions", body)
    assert [chunk["choices"][0]["text"] for _, chunk in events] == [" the", " plan"]


async def test_client_that_leaves_mid_stream_is_aborted(replica, client, caplog):
    body = {"prompt": "hello " * 20, "max_tokens": 2000, "ignore_eos": True, "stream": True}
    async with client.stream("POST", f"{replica.url}/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                break  # leave after the first token
    for _ in range(100):
        values = await scrape(client, replica)
        if value(values, "vllm:request_success_total", finished_reason="abort") == 1:
            break
        await asyncio.sleep(0.05)
    assert value(values, "vllm:request_success_total", finished_reason="abort") == 1
    assert value(values, "vllm:num_requests_running") == 0
    assert value(values, "vllm:kv_cache_usage_perc") == 0
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


async def test_stopping_mid_stream_and_mid_hang_logs_no_error(replica, client, caplog):
    body = {"prompt": "hello " * 20, "max_tokens": 2000, "ignore_eos": True, "stream": True}
    await replica.apply_fault("metrics_hang")
    hung = asyncio.create_task(client.get(f"{replica.url}/metrics", timeout=10))
    received = []

    async def listen():
        try:
            async with client.stream("POST", f"{replica.url}/v1/completions", json=body) as response:
                async for line in response.aiter_lines():
                    received.append(line)
        except httpx.HTTPError:
            pass  # the server went away mid-answer, as a killed vLLM would

    listener = asyncio.create_task(listen())
    while not received:  # noqa: ASYNC110 - the listener appends as it reads; an Event would only move this poll
        await asyncio.sleep(0.02)
    await replica.stop()
    await asyncio.wait_for(listener, 10)
    assert "data: [DONE]" not in received
    try:
        await hung
    except httpx.HTTPError:
        pass
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


async def test_models_health_version(replica, client):
    models = (await client.get(f"{replica.url}/v1/models")).json()
    assert models["data"][0]["id"] == "llama-70b"
    assert models["data"][0]["max_model_len"] == 8192
    assert (await client.get(f"{replica.url}/health")).status_code == 200
    assert (await client.get(f"{replica.url}/version")).json() == {"version": "0.32.0"}


@pytest.mark.parametrize(
    "body, words",
    [
        ({"prompt": list(range(8000)), "max_tokens": 400}, "maximum context length is 8192"),
        ({"prompt": {"not": "a prompt"}}, "prompt must be"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens must be at least 1"),
    ],
)
async def test_bad_requests_get_400_with_a_reason(replica, client, body, words):
    response = await client.post(f"{replica.url}/v1/completions", json=body)
    assert response.status_code == 400
    assert words in response.json()["message"]
    values = await scrape(client, replica)
    assert value(values, "http_requests_total", handler="/v1/completions", method="POST", status="4xx") == 1


async def test_metrics_faults_error_garbage_and_hang(replica, client):
    await replica.apply_fault("metrics_error")
    assert (await client.get(f"{replica.url}/metrics")).status_code == 500
    await replica.apply_fault("metrics_garbage")
    garbage = await client.get(f"{replica.url}/metrics")
    assert garbage.status_code == 200
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(garbage.text))
    await replica.apply_fault("metrics_hang")
    with pytest.raises(httpx.ReadTimeout):
        await client.get(f"{replica.url}/metrics", timeout=0.3)
    hung = asyncio.create_task(client.get(f"{replica.url}/metrics", timeout=10))
    await asyncio.sleep(0.1)
    await replica.clear_fault("metrics_hang")
    assert (await hung).status_code == 200
    # The API keeps serving through metrics faults.
    assert (await client.get(f"{replica.url}/health")).status_code == 200


async def test_down_then_back_is_a_new_process(replica, client):
    await client.post(f"{replica.url}/v1/completions", json={"prompt": "a b c", "max_tokens": 5, "ignore_eos": True})
    before = await scrape(client, replica)
    port = replica.port
    await replica.apply_fault("down")
    with pytest.raises(httpx.ConnectError):
        await client.get(f"{replica.url}/metrics")
    await asyncio.sleep(0.05)  # a restarted process has a later start time
    await replica.clear_fault("down")
    assert replica.port == port
    after = await scrape(client, replica)
    assert value(before, "vllm:generation_tokens_total") == 5
    assert value(after, "vllm:generation_tokens_total") == 0
    assert value(after, "process_start_time_seconds") > value(before, "process_start_time_seconds")
    assert value(after, "vllm:prompt_tokens_created") > value(before, "vllm:prompt_tokens_created")


async def test_slow_replica_stretches_time_per_token(replica, client):
    async def tpot_of_one_request() -> float:
        before = await scrape(client, replica)
        await client.post(
            f"{replica.url}/v1/completions", json={"prompt": "x " * 100, "max_tokens": 20, "ignore_eos": True}
        )
        after = await scrape(client, replica)
        name = "vllm:request_time_per_output_token_seconds_sum"
        return value(after, name) - value(before, name)

    normal = await tpot_of_one_request()
    await replica.apply_fault("slow", factor=3.0)
    slow = await tpot_of_one_request()
    await replica.clear_fault("slow")
    assert slow == pytest.approx(3 * normal, rel=0.02)
