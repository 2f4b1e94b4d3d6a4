"""The latency clients see through the gateway: its histograms hold the clients' own waits, queue wait included."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from aiohttp import web

from console.gateway.telemetry import CLIENT_E2E_BUCKETS, CLIENT_TTFT_BUCKETS, ClientTimes, Telemetry

from .conftest import completion, gateway, metric, metric_values, send, switch
from .fake_upstreams import COMPLETION, scripted

pytestmark = pytest.mark.timeout(60)

FIRST_EVENT_AFTER = 0.3  # the slow replica's time to its first event with a token
STREAM_ENDS_AFTER = 0.2  # then its [DONE], this much later
# How much sooner the gateway may start its clock than the client (connecting, sending the request) and stop it
# (the bytes on their way back): generous, for a loaded machine. The queue adds 0.5 s per place, so a histogram
# without the queue wait could not meet the test's bounds.
SLACK = 0.25


TOKEN_EVENT = b'data: {"choices": [{"index": 0, "text": " x"}]}\n\n'
ROLE_CHUNK = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}


@contextlib.asynccontextmanager
async def slow_replica(role_first: bool = False):
    """One replica that streams each answer slowly: an event after FIRST_EVENT_AFTER, [DONE] STREAM_ENDS_AFTER later.

    With `role_first`, a chat's role chunk goes out at once, before the pause, as a server that sends it on arrival
    (not after prefill, as vLLM does) would.
    """

    async def health(request: web.Request) -> web.Response:
        if request.path == "/v1/models":
            return web.json_response({"data": [{"id": "llama-70b"}]})
        return web.json_response({})

    async def generate(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        if role_first:
            await response.prepare(request)
            await response.write(b"data: " + json.dumps(ROLE_CHUNK).encode() + b"\n\n")
        await asyncio.sleep(FIRST_EVENT_AFTER)
        await response.prepare(request)
        chunk = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": " x"}]}
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await asyncio.sleep(STREAM_ENDS_AFTER)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", health)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def cumulative(values: dict, name: str, bounds) -> list[float]:
    return [metric(values, name + "_bucket", le=str(float(b))) for b in bounds]


def check_buckets(gateway_counts: list[float], bounds, seen: list[float]) -> None:
    """Each bucket holds at least the clients that measured under its bound, at most those within SLACK over it."""
    for bound, counted in zip(bounds, gateway_counts, strict=True):
        at_least = sum(t <= bound for t in seen)
        at_most = sum(t <= bound + SLACK for t in seen)
        assert at_least <= counted <= at_most, (bound, counted, sorted(seen))


async def test_client_ttft_and_e2e_hold_the_clients_own_waits_queue_included(session):
    async with slow_replica() as url, gateway([url], planned_cap=1) as server:
        await switch(
            session, server, mode="bounded_queue", max_queue=5, max_wait_seconds=30, max_inflight_per_replica=1
        )
        clients = 3  # one in flight, two waiting: 0.5 s and 1.0 s in the queue
        answers = await asyncio.gather(*(send(session, server.url, completion(stream=True)) for _ in range(clients)))
        assert all(a.status == 200 and a.done for a in answers), answers
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())

    ttfts = [a.ttft for a in answers]
    ends = [a.ended_at - a.sent_at for a in answers]
    assert max(ttfts) > FIRST_EVENT_AFTER + 2 * (FIRST_EVENT_AFTER + STREAM_ENDS_AFTER) - SLACK  # the queue was felt
    name = "capcon_gateway_client_ttft_seconds"
    assert metric(values, name + "_count") == clients
    check_buckets(cumulative(values, name, CLIENT_TTFT_BUCKETS), CLIENT_TTFT_BUCKETS, ttfts)
    assert sum(ttfts) - clients * SLACK <= metric(values, name + "_sum") <= sum(ttfts)
    name = "capcon_gateway_client_e2e_seconds"
    assert metric(values, name + "_count") == clients
    check_buckets(cumulative(values, name, CLIENT_E2E_BUCKETS), CLIENT_E2E_BUCKETS, ends)
    assert sum(ends) - clients * SLACK <= metric(values, name + "_sum") <= sum(ends)


async def test_refusals_and_whole_answers_each_count_as_what_the_client_got(session):
    """A refused request is no answer (counted in neither); a streamed answer counts in both."""
    async with slow_replica() as url, gateway([url], planned_cap=1) as server:
        await switch(session, server, mode="bounded_queue", max_queue=0, max_wait_seconds=1, max_inflight_per_replica=1)
        holder = asyncio.create_task(send(session, server.url, completion(stream=True)))
        await asyncio.sleep(0.1)
        refused = await send(session, server.url, completion(stream=True))
        assert refused.status == 429
        assert (await holder).status == 200
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())
    assert metric(values, "capcon_gateway_client_ttft_seconds_count") == 1
    assert metric(values, "capcon_gateway_client_e2e_seconds_count") == 1


def test_only_answers_from_a_replica_or_the_hosted_endpoint_are_observed():
    telemetry = Telemetry([], lambda q: 0, lambda r: 0, lambda r: True)
    begun = ClientTimes(10.0)
    begun.wrote(10.4, TOKEN_EVENT)  # a client that left mid-answer: a first token, no last byte
    whole = ClientTimes(20.0)
    whole.wrote(21.0, TOKEN_EVENT)
    whole.ended(23.0)
    for outcome in ("local", "hosted", "upstream_error", "rejected"):
        for times in (begun, whole):
            telemetry.client_first_token(outcome, times)
            telemetry.client_last_byte(outcome, times)
    text = telemetry.render().decode()
    values = metric_values(text)
    assert metric(values, "capcon_gateway_client_ttft_seconds_count") == 4
    assert metric(values, "capcon_gateway_client_ttft_seconds_sum") == pytest.approx(2 * (0.4 + 1.0))
    assert metric(values, "capcon_gateway_client_e2e_seconds_count") == 2
    assert metric(values, "capcon_gateway_client_e2e_seconds_sum") == pytest.approx(2 * 3.0)
    under_one = max(b for b in CLIENT_TTFT_BUCKETS if b < 1.0)  # holds the 0.4 s ones, not the 1.0 s ones
    assert metric(values, "capcon_gateway_client_ttft_seconds_bucket", le=str(under_one)) == 2
    under_three = max(b for b in CLIENT_E2E_BUCKETS if b < 3.0)
    assert metric(values, "capcon_gateway_client_e2e_seconds_bucket", le=str(under_three)) == 0


async def test_a_whole_answer_counts_in_end_to_end_only_once_written(session):
    """A non-stream answer's first byte is its last: no time to first token to hold a TTFT target to (the demo's
    whole answers read a client TTFT of 19 s beside the replicas' 1.8 s when they were counted there)."""
    async with scripted() as upstream, gateway([upstream.url]) as server:
        answer = await send(session, server.url, completion())
        assert answer.status == 200 and answer.body == COMPLETION
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())
    assert metric(values, "capcon_gateway_client_ttft_seconds_count") == 0
    assert metric(values, "capcon_gateway_client_e2e_seconds_count") == 1
    assert 0 < metric(values, "capcon_gateway_client_e2e_seconds_sum") <= answer.ended_at - answer.sent_at


def test_the_first_token_is_the_first_event_with_output_not_a_role_chunk():
    times = ClientTimes(10.0)
    times.wrote(10.1, b"data: " + json.dumps(ROLE_CHUNK).encode() + b"\n\n")
    times.wrote(10.2, b'data: {"choices": [{"index": 0, "delta": {"content": ""}}]}\n\n: ping\n\n')
    assert times.first_token is None
    times.wrote(10.5, b'data: {"choices": [{"index": 0, "delta": {"content": " x"}}]}\n\n')
    times.wrote(10.6, TOKEN_EVENT)
    assert times.first_token == 10.5


async def test_a_role_chunk_sent_before_the_pause_does_not_start_the_clients_ttft(session):
    """An upstream that sends a chat's role chunk on arrival and its first token FIRST_EVENT_AFTER later: the
    clients' TTFT is the token's time (it read about 0 s when the gateway timed the first byte)."""
    chat = {"model": "llama-70b", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with slow_replica(role_first=True) as url, gateway([url]) as server:
        answer = await send(session, server.url, chat, path="/v1/chat/completions")
        assert answer.status == 200 and answer.done and answer.chunks == 2
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())
    assert metric(values, "capcon_gateway_client_ttft_seconds_count") == 1
    assert metric(values, "capcon_gateway_client_ttft_seconds_sum") >= FIRST_EVENT_AFTER
