"""Slow clients cannot starve real ones: header and idle timeouts, a cap on open connections, a slowloris held off.

Real sockets throughout: raw asyncio connections that send a request's head a byte at a time, beside a real
client whose requests must keep being answered.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import aiohttp
import pytest

from console.gateway.connections import connection_cap

from .conftest import completion, gateway, metric, metric_values, send, until
from .fake_upstreams import scripted

pytestmark = pytest.mark.timeout(60)

HEAD = (
    b"POST /v1/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
    b"X-Padding: " + b"s" * 200 + b"\r\n"
)  # never ends: the blank line never comes


async def closed_by_the_gateway(reader: asyncio.StreamReader) -> bytes:
    """What the gateway sent before it closed the connection (b'' when it said nothing)."""
    try:
        return await reader.read(65536)
    except ConnectionError:
        return b""


async def slow_client(host: str, port: int, stop: asyncio.Event, seen: dict, byte_every: float) -> None:
    """A slowloris connection: its head a byte at a time; when the gateway closes it, another at the next tick."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            seen["refused_connects"] += 1
            await asyncio.sleep(byte_every)
            continue
        seen["connections"] += 1
        closed = asyncio.ensure_future(closed_by_the_gateway(reader))
        for byte in HEAD:
            if stop.is_set() or closed.done():
                break
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.wait({closed}, timeout=byte_every)
        if stop.is_set() and not closed.done():
            seen["open_at_stop"] += 1
        said = await closed  # after the stop too: the gateway must close what is left by itself
        seen["answered"] += bool(said)
        seen["closed"] += 1
        writer.close()
        await asyncio.sleep(byte_every)  # another at the next tick, as slowloris tools do


async def test_a_slowloris_is_closed_while_real_requests_keep_being_answered():
    slow, seconds = 300, 3.0
    async with (
        scripted() as upstream,
        gateway([upstream.url], header_timeout=1.0, idle_timeout=5.0, max_connections=250) as server,
        aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=20), connector=aiohttp.TCPConnector(force_close=True)
        ) as session,
    ):
        host, port = server.url.removeprefix("http://").split(":")
        stop = asyncio.Event()
        seen = dict.fromkeys(("connections", "closed", "answered", "open_at_stop", "refused_connects"), 0)
        attackers = [asyncio.create_task(slow_client(host, int(port), stop, seen, 0.2)) for _ in range(slow)]
        await asyncio.sleep(0.3)  # the attack is on before the first real request
        answers = []
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:  # a real client, a new connection per request
            answers.append(await send(session, server.url, completion()))
            await asyncio.sleep(0.05)
        stop.set()
        # What was still open when the attack stopped is closed by the header timeout, not left hanging.
        assert await until(lambda: server.connections.open == 0, timeout=20)
        await asyncio.gather(*attackers)
        async with aiohttp.ClientSession() as fresh, fresh.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())

    assert len(answers) >= 10 and [a.status for a in answers] == [200] * len(answers)
    assert seen["answered"] == 0  # no slow head was ever answered: each was closed
    assert seen["connections"] > slow and seen["open_at_stop"] > 0, seen
    closed = {r: metric(values, "capcon_gateway_connections_closed_total", reason=r) for r in server.connections.closed}
    assert closed["header_timeout"] > 0 and closed["evicted"] > 0, closed
    assert closed["header_timeout"] + closed["evicted"] + closed["refused"] == seen["connections"], (closed, seen)
    assert closed["idle_timeout"] == 0


async def test_an_idle_kept_alive_connection_is_closed_and_a_full_gateway_refuses_at_once():
    async with (
        scripted() as upstream,
        gateway([upstream.url], header_timeout=5.0, idle_timeout=0.3) as server,
        aiohttp.ClientSession() as session,
    ):
        assert (await send(session, server.url, completion())).status == 200
        assert await until(lambda: server.connections.closed["idle_timeout"] == 1, timeout=10)
        assert server.connections.open == 0
        # The pool's connection was closed under it: the next request opens another, answered as ever.
        assert (await send(session, server.url, completion())).status == 200
    async with scripted() as upstream, gateway([upstream.url], max_connections=2) as server:
        host, port = server.url.removeprefix("http://").split(":")
        async with aiohttp.ClientSession() as session:
            # Two connections each in a request (their bodies not yet sent) fill the cap: none waits for a head.
            held = []
            for _ in range(2):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(HEAD + b"Content-Length: 100\r\n\r\n")
                held.append((reader, writer))
            guard = server.connections
            assert await until(lambda: guard.open == 2 and guard.waiting() == 0)
            refused = await send(session, server.url, completion())
            assert refused.status == -1  # closed at once, no answer
            assert server.connections.closed["refused"] >= 1
            for reader, writer in held:
                writer.write(b"{" + b" " * 98 + b"}")  # the body at last: a request in progress was never closed
                assert (await reader.read(65536)).startswith(b"HTTP/1.1 200")
                writer.close()


def test_the_open_files_limit_is_raised_to_the_hard_one_and_the_cap_kept_under_it():
    script = (
        "import resource\n"
        "from console.gateway.connections import raise_open_files_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))\n"
        "before, after = raise_open_files_limit()\n"
        "print(before, after, hard)\n"
    )
    before, after, hard = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert int(before) == min(256, int(hard)) and after == hard
    assert connection_cap(1024) == 480  # each client connection may hold an upstream one; 64 files kept aside
    assert connection_cap(None) is None and connection_cap(10) == 1
