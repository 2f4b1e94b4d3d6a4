"""Loopback HTTP servers for source tests: real aiohttp apps and one raw socket server.

Every server binds 127.0.0.1 on a free port and is stopped when its context ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serve(handler: Handler, path: str = "/metrics", ssl_context=None) -> AsyncIterator[str]:
    """An aiohttp server answering `path` with `handler`; yields its base URL."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    scheme = "https" if ssl_context else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def pages_in_turn(*pages: str) -> Handler:
    """Answer each request with the next page; the last one repeats."""
    served = {"count": 0}

    async def handler(request: web.Request) -> web.Response:
        index = min(served["count"], len(pages) - 1)
        served["count"] += 1
        return web.Response(text=pages[index], content_type="text/plain")

    return handler


@contextlib.asynccontextmanager
async def raw_server(answer: bytes) -> AsyncIterator[str]:
    """A socket server that reads a request, writes `answer` verbatim and closes."""

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
