"""Upstreams that misbehave on purpose, on real loopback sockets: raw asyncio servers speaking just enough HTTP/1.1.

A raw server, not aiohttp's, because the faults are below HTTP: a connection reset (SO_LINGER 0, then
abort: the kernel sends RST), a close in the middle of a chunked body (FIN), or silence. Each generation
request takes the next behaviour from `plan` (the last one repeats); /health and /v1/models always answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from dataclasses import dataclass, field

from aiohttp import web

MODEL = "llama-70b"

OK_STREAM = "ok_stream"  # SSE: 3 events, then [DONE], chunked
RESET_STREAM = "reset_stream"  # SSE headers and 3 events, then RST
CLOSE_STREAM = "close_stream"  # SSE headers and 3 events, then FIN inside the chunked body
STALL_STREAM = "stall_stream"  # SSE headers and 3 events, then nothing
HALF_EVENT_RESET = "half_event_reset"  # 3 events and half of a 4th, then RST
EOF_STREAM = "eof_stream"  # SSE without a length or chunks (the body ends at the close): 3 events, then FIN
OK_JSON = "ok_json"  # a whole completion
RESET_JSON = "reset_json"  # Content-Length 2000, 100 bytes sent, then RST
CLOSE_JSON = "close_json"  # Content-Length 2000, 100 bytes sent, then FIN
STALL_JSON = "stall_json"  # Content-Length 2000, 100 bytes sent, then nothing


def event(index: int) -> bytes:
    chunk = {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": f" t{index}"}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
COMPLETION = json.dumps(
    {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": MODEL,
        "choices": [{"index": 0, "text": " whole", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()


@dataclass
class RawUpstream:
    plan: list[str] = field(default_factory=lambda: [OK_STREAM])
    url: str = ""
    served: list[str] = field(default_factory=list)  # the behaviour each generation request got
    authorizations: list[str | None] = field(default_factory=list)  # each request's Authorization header
    _server: asyncio.AbstractServer | None = None
    _writers: set = field(default_factory=set)
    _tasks: set = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)  # each ends at its connection's end
        await self._server.wait_closed()

    def _next(self) -> str:
        behaviour = self.plan[0] if len(self.plan) == 1 else self.plan.pop(0)
        self.served.append(behaviour)
        return behaviour

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                length = int(headers.get("content-length", "0"))
                if length:
                    await reader.readexactly(length)
                self.authorizations.append(headers.get("authorization"))
                if method == "GET":
                    body = b"{}" if path == "/health" else json.dumps({"data": [{"id": MODEL}]}).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    await writer.drain()
                    continue
                if not await self._generate(self._next(), reader, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _generate(self, behaviour: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request as `behaviour` says; False when the connection is gone."""
        if behaviour.endswith("_json"):
            if behaviour == OK_JSON:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(COMPLETION)}\r\n\r\n".encode()
                    + COMPLETION
                )
                await writer.drain()
                return True
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2000\r\n\r\n")
            writer.write(COMPLETION[:100])
        elif behaviour == EOF_STREAM:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            writer.write(b"".join(event(i) for i in range(3)))
        else:
            writer.write(SSE_HEAD)
            for i in range(3):
                writer.write(chunked(event(i)))
                await writer.drain()
                await asyncio.sleep(0.01)  # separate packets, as a replica's tokens come
            if behaviour == OK_STREAM:
                writer.write(chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
                await writer.drain()
                return True
            if behaviour == HALF_EVENT_RESET:
                writer.write(chunked(event(3)[:20]))
        await writer.drain()
        await asyncio.sleep(0.05)  # let the gateway pass on what came so far
        if behaviour.startswith(("reset", "half_event")):
            reset(writer)
            return False
        if behaviour.startswith(("close", "eof")):
            writer.close()
            return False
        await reader.read()  # stall until the gateway gives up (--upstream-timeout) and closes the connection
        return False


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST, not FIN: SO_LINGER on with a zero timeout, then abort."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@contextlib.asynccontextmanager
async def raw_upstream(*plan: str):
    upstream = RawUpstream(list(plan) or [OK_STREAM])
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.close()


@dataclass
class Scripted:
    """An aiohttp server: GETs answered as a healthy replica, each POST from `answers` in turn (the last repeats).

    An answer is (status, content type, body). `authorizations` keeps each request's Authorization header.
    """

    answers: list[tuple[int, str, bytes]]
    models: bytes = json.dumps({"data": [{"id": MODEL}]}).encode()
    url: str = ""
    posts: int = 0
    authorizations: list[str | None] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def health(request: web.Request) -> web.Response:
            self.authorizations.append(request.headers.get("Authorization"))
            if request.path == "/v1/models":
                return web.Response(body=self.models, content_type="application/json")
            return web.Response(text="{}", content_type="application/json")

        async def post(request: web.Request) -> web.Response:
            self.authorizations.append(request.headers.get("Authorization"))
            await request.read()
            status, content_type, body = self.answers[min(self.posts, len(self.answers) - 1)]
            self.posts += 1
            return web.Response(status=status, body=body, headers={"Content-Type": content_type})

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", health)
        app.router.add_post("/{tail:.*}", post)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        await self._runner.cleanup()


@contextlib.asynccontextmanager
async def scripted(*answers: tuple[int, str, bytes], models: bytes | None = None):
    server = Scripted(list(answers) or [(200, "application/json", COMPLETION)])
    if models is not None:
        server.models = models
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def sse(*chunks: dict | str) -> bytes:
    """A whole event stream: each chunk a data event (a dict as JSON), then [DONE]."""
    events = [c if isinstance(c, str) else json.dumps(c) for c in chunks]
    return b"".join(f"data: {e}\n\n".encode() for e in [*events, "[DONE]"])
