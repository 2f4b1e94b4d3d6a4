"""A replica that breaks off mid-answer: the client sees a failure, never an answer that looks finished.

Real sockets throughout: the replica is a raw asyncio server (fake_upstreams.py) that resets, closes or
goes silent after the first events; the client is aiohttp reading the gateway's stream line by line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket

import pytest

from .conftest import HOSTED_KEY, completion, gateway, metric, metric_values, send, sim_fleet, switch, until
from .fake_upstreams import (
    CLOSE_JSON,
    CLOSE_STREAM,
    EOF_STREAM,
    HALF_EVENT_RESET,
    OK_JSON,
    OK_STREAM,
    RESET_JSON,
    RESET_STREAM,
    STALL_JSON,
    STALL_STREAM,
    raw_upstream,
)
from .plans import gateway_plan

pytestmark = pytest.mark.timeout(60)


def hosted_options(url: str) -> dict:
    return {"plan": gateway_plan(prompts_may_leave=True), "hosted_url": url, "hosted_key": HOSTED_KEY}


async def busy(session, server, tokens: int = 40) -> asyncio.Task:
    """A stream holding the only slot (cap 1), so the next request is not local."""
    holder = asyncio.create_task(send(session, server.url, completion(max_tokens=tokens, stream=True)))
    assert await until(lambda: server.in_flight() == 1)
    return holder


async def read_stream(session, url: str) -> tuple[int, list[bytes]]:
    """The status and every `data:` line of a streamed completion, read to the body's end."""
    async with session.post(url + "/v1/completions", json=completion(stream=True)) as response:
        lines = [line.rstrip(b"\r\n") async for line in response.content]
        return response.status, [line for line in lines if line.startswith(b"data:")]


async def outcomes(session, server) -> dict[str, float]:
    async with session.get(server.url + "/metrics") as response:
        values = metric_values(await response.text())
    return {
        o: metric(values, "capcon_gateway_requests_total", outcome=o, **{"class": "interactive"})
        for o in ("local", "hosted", "upstream_error", "error")
    }


def assert_quiet(caplog, expected_warnings: int = 1) -> None:
    """One warning line for the failure, and nothing with a traceback from any logger."""
    assert "Traceback" not in caplog.text
    assert all(r.exc_info is None for r in caplog.records)
    broke = [r for r in caplog.records if "broke off" in r.getMessage()]
    assert len(broke) == expected_warnings and all("\n" not in r.getMessage() for r in broke)


@pytest.mark.parametrize("behaviour", [RESET_STREAM, CLOSE_STREAM, STALL_STREAM, HALF_EVENT_RESET, EOF_STREAM])
async def test_a_stream_the_replica_breaks_off_ends_in_an_error_event_without_done(session, caplog, behaviour):
    caplog.set_level(logging.INFO)
    async with raw_upstream(behaviour, OK_STREAM) as upstream, gateway([upstream.url], upstream_timeout=1.0) as server:
        status, events = await read_stream(session, server.url)
        assert status == 200  # the headers went out with the first event; the failure is in the body
        assert b"data: [DONE]" not in events
        payloads = [json.loads(line[len(b"data:") :]) for line in events]  # every event whole, none cut in half
        assert [p["choices"][0]["text"] for p in payloads[:-1]] == [" t0", " t1", " t2"]
        error = payloads[-1]["error"]
        assert error["type"] == "upstream_error" and error["code"] == 502 and error["message"]
        assert (await outcomes(session, server))["upstream_error"] == 1

        # The gateway goes on: the next stream is whole, and counted local.
        status, events = await read_stream(session, server.url)
        assert status == 200 and events[-1] == b"data: [DONE]"
        counted = await outcomes(session, server)
        assert counted["local"] == 1 and counted["upstream_error"] == 1
        assert server.in_flight() == 0
    assert upstream.served == [behaviour, OK_STREAM]
    assert_quiet(caplog)


@pytest.mark.parametrize("behaviour", [RESET_JSON, CLOSE_JSON, STALL_JSON])
async def test_a_whole_answer_the_replica_breaks_off_is_a_502_with_an_error_body(session, caplog, behaviour):
    caplog.set_level(logging.INFO)
    async with raw_upstream(behaviour, OK_JSON) as upstream, gateway([upstream.url], upstream_timeout=1.0) as server:
        answer = await send(session, server.url, completion())
        assert answer.status == 502
        assert answer.error["code"] == "upstream_error" and answer.error["type"] == "server_error"
        assert answer.headers["x-capcon-outcome"] == "upstream_error" and "Retry-After" in answer.headers
        whole = await send(session, server.url, completion())
        assert whole.status == 200 and json.loads(whole.body)["choices"][0]["text"] == " whole"
        counted = await outcomes(session, server)
        assert counted["upstream_error"] == 1 and counted["local"] == 1
    assert_quiet(caplog)


async def test_a_refused_connection_is_still_decided_again_on_another_replica(session, caplog):
    caplog.set_level(logging.INFO)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    async with raw_upstream(OK_STREAM) as upstream, gateway([dead, upstream.url], health_interval=60) as server:
        for _ in range(3):
            status, events = await read_stream(session, server.url)
            assert status == 200 and events[-1] == b"data: [DONE]"
        counted = await outcomes(session, server)
        assert counted["local"] == 3 and counted["upstream_error"] == 0
    assert "Traceback" not in caplog.text


async def test_a_hosted_stream_that_breaks_off_ends_in_an_error_event_too(session, caplog):
    caplog.set_level(logging.INFO)
    async with (
        raw_upstream(RESET_STREAM, OK_STREAM) as hosted,
        sim_fleet(1) as fleet,
        gateway(fleet.urls, planned_cap=1, **hosted_options(hosted.url + "/v1")) as server,
    ):
        assert (await switch(session, server, mode="hosted", hosted_after_queue=0)).status == 200
        holder = await busy(session, server)  # the only slot is taken: the next request goes to the hosted endpoint
        status, events = await read_stream(session, server.url)
        assert status == 200 and b"data: [DONE]" not in events
        assert json.loads(events[-1][len(b"data:") :])["error"]["type"] == "upstream_error"
        assert len(events) == 4  # the three chunks that came, then the error
        status, events = await read_stream(session, server.url)  # the endpoint's next stream is whole
        assert status == 200 and events[-1] == b"data: [DONE]"
        assert (await holder).done
        counted = await outcomes(session, server)
        assert counted["upstream_error"] == 1 and counted["hosted"] == 1 and counted["local"] == 1
    assert hosted.served == [RESET_STREAM, OK_STREAM]
    assert_quiet(caplog)
