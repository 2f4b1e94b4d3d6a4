"""The gateway's clients on their own, over real loopback sockets: health checks (health.py), the relay to a
replica (replica_client.py) and the hosted endpoint's client (hosted_client.py), each behind a one-route
aiohttp front rather than the whole gateway."""

from __future__ import annotations

import contextlib
import json
import socket

import aiohttp
from aiohttp import web

from console.gateway.health import HealthChecks
from console.gateway.hosted_client import HostedClient
from console.gateway.relay_io import CLIENT_TIMES
from console.gateway.replica_client import ReplicaClient
from console.gateway.replicas import Replica, ReplicaSet
from console.gateway.telemetry import ClientTimes, Telemetry

from .fake_upstreams import COMPLETION, OK_STREAM, RESET_STREAM, raw_upstream, scripted, sse


def telemetry() -> Telemetry:
    return Telemetry([], queue_length=lambda q: 0, in_flight=lambda n: 0, healthy=lambda n: True)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Wired:
    """A replica client and its health checks, wired as the gateway wires them; what they said is kept."""

    def __init__(self) -> None:
        self.answered: list[tuple[str, str]] = []
        self.ended: list[tuple[Replica, bool]] = []
        self.back = 0
        self.telemetry = telemetry()
        self.health = HealthChecks(lambda: self.client.session, 5.0, 1.0, 1 << 20, on_back=self._back)
        self.client = ReplicaClient(
            self.telemetry,
            self.health,
            answered=lambda outcome, kind: self.answered.append((outcome, kind)),
            retry_seconds=lambda fallback=5.0: 3,
            end_lease=lambda replica, reached, began: self.ended.append((replica, reached)),
            clock=lambda: 0.0,
            connect_timeout=1.0,
            upstream_timeout=5.0,
            max_response_bytes=1 << 20,
        )

    def _back(self) -> None:
        self.back += 1


@contextlib.asynccontextmanager
async def front(handler):
    """A one-route server whose handler is `handler(request)`, and a client session to it."""

    async def route(request: web.Request) -> web.StreamResponse:
        request[CLIENT_TIMES] = ClientTimes(0.0)
        answer = await handler(request)
        return answer if answer is not None else web.Response(status=599, text="handed back")

    app = web.Application()
    app.router.add_post("/v1/completions", route)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/completions"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            yield url, http
    finally:
        await runner.cleanup()


async def test_health_checks_read_the_models_skip_a_dead_replica_and_say_when_it_is_back():
    wired = Wired()
    wired.client.open()
    try:
        async with scripted() as upstream:
            replica = Replica(upstream.url)
            await wired.health.check(replica)
            assert replica.healthy and replica.models == {"llama-70b"} and replica.checks == 1
            dead = Replica(f"http://127.0.0.1:{closed_port()}")
            await wired.health.check(dead)
            assert not dead.healthy and "ClientConnectorError" in dead.problem and wired.back == 0
            dead.base = upstream.url  # the replica answers again
            await wired.health.check(dead)
            assert dead.healthy and dead.problem == "" and wired.back == 1
            newcomer = Replica(f"http://127.0.0.1:{closed_port()}")
            await wired.health.check(newcomer, quiet=True)  # not in rotation yet: set, not announced
            assert not newcomer.healthy and wired.back == 1
    finally:
        await wired.client.close()


async def test_the_relay_passes_a_stream_on_and_ends_a_broken_one_with_an_error_event():
    wired = Wired()
    wired.client.open()
    try:
        async with raw_upstream(OK_STREAM, RESET_STREAM) as upstream:
            pool = ReplicaSet([upstream.url])
            replica = pool.replicas[0]

            async def handler(request):
                pool.lease(replica.name)
                return await wired.client.forward(request, replica, "/v1/completions", b"{}", "rid-1", "interactive")

            async with front(handler) as (url, http):
                async with http.post(url, json={}) as whole:
                    body = await whole.read()
                assert whole.status == 200 and body.endswith(b"data: [DONE]\n\n")
                async with http.post(url, json={}) as broken:
                    body = await broken.read()
                assert broken.status == 200 and b"[DONE]" not in body and b'"error"' in body
        assert wired.answered == [("local", "interactive"), ("upstream_error", "interactive")]
        assert [reached for _, reached in wired.ended] == [True, True]
    finally:
        await wired.client.close()


async def test_a_refused_connection_is_handed_back_undecided_and_the_replica_skipped():
    wired = Wired()
    wired.client.open()
    try:
        replica = Replica(f"http://127.0.0.1:{closed_port()}")

        async def handler(request):
            return await wired.client.forward(request, replica, "/v1/completions", b"{}", "rid-2", "interactive")

        async with front(handler) as (url, http), http.post(url, json={}) as answer:
            assert answer.status == 599  # None: the gateway decides again
        assert not replica.healthy and replica.refused == 1
        assert wired.ended == [(replica, False)] and wired.answered == []
    finally:
        await wired.client.close()


async def test_a_replica_error_is_a_normalized_error_answer_counted_once():
    wired = Wired()
    wired.client.open()
    try:
        async with scripted((500, "application/json", b"[" * 60_000)) as upstream:
            replica = Replica(upstream.url)

            async def handler(request):
                return await wired.client.forward(request, replica, "/v1/completions", b"{}", "rid-3", "interactive")

            async with front(handler) as (url, http), http.post(url, json={}) as answer:
                body = await answer.json()
                assert answer.status == 500 and answer.headers["Retry-After"] == "3"
            assert body["error"]["type"] and wired.answered == [("error", "interactive")]
    finally:
        await wired.client.close()


def hosted_client(url: str, answered: list, key: str | None = "k-1") -> HostedClient:
    return HostedClient(
        url + "/v1",
        key,
        {"*": "hosted-big"},
        2.0,
        telemetry(),
        answered=lambda outcome, kind: answered.append(outcome),
        clock=lambda: 0.0,
        connect_timeout=1.0,
        upstream_timeout=5.0,
        max_response_bytes=1 << 20,
    )


async def test_the_hosted_client_counts_usage_and_hands_back_a_200_that_is_no_completion():
    answered: list[str] = []
    async with scripted((200, "application/json", COMPLETION), (200, "application/json", b"<html>")) as upstream:
        client = hosted_client(upstream.url, answered)
        client.open()
        try:

            async def handler(request):
                return await client.serve(request, "/v1/completions", {"model": "llama-70b"}, "rid-4", "interactive")

            async with front(handler) as (url, http):
                async with http.post(url, json={}) as good:
                    assert good.status == 200 and good.headers["x-capcon-outcome"] == "hosted"
                async with http.post(url, json={}) as garbage:
                    assert garbage.status == 599  # handed back: the bounded queue decides it
        finally:
            await client.close()
        assert answered == ["hosted"]
        assert client.usage == {"prompt_tokens": 5, "completion_tokens": 1}
        assert upstream.authorizations[-1] == "Bearer k-1"
        assert client.target("/v1/chat/completions") == upstream.url + "/v1/chat/completions"


async def test_the_hosted_stream_gets_its_usage_chunk_cut_unless_the_client_asked_for_it():
    usage = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}
    stream = sse({"choices": [{"index": 0, "text": " a"}]}, usage)
    answered: list[str] = []
    async with scripted((200, "text/event-stream", stream)) as upstream:
        client = hosted_client(upstream.url, answered, key=None)
        client.open()
        try:

            async def handler(request):
                payload = json.loads(await request.read())
                return await client.serve(request, "/v1/completions", payload, "rid-5", "interactive")

            async with front(handler) as (url, http):
                async with http.post(url, json={"stream": True}) as plain:
                    body = await plain.read()
                assert b'"usage"' not in body and body.endswith(b"data: [DONE]\n\n")
                opts = {"include_usage": True}
                async with http.post(url, json={"stream": True, "stream_options": opts}) as asked:
                    assert b'"usage"' in await asked.read()
        finally:
            await client.close()
        assert answered == ["hosted", "hosted"] and client.usage == {"prompt_tokens": 14, "completion_tokens": 4}
