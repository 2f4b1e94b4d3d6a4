"""Client connections at the door: a slow client cannot starve the real ones.

aiohttp's server has no header-read timeout of its own (its keep-alive timer, in recent releases, also
bounds a first request's head, but as one figure with the idle time between requests), so each
connection is wrapped in a `GuardedConnection`, a protocol that passes everything to aiohttp's own
handler and keeps three rules beside it:

- header timeout: a request's head must arrive whole within `header_timeout` of its first byte (of
  the connection's start, for its first request), else the connection is closed;
- idle timeout: a kept-alive connection with no new request for `idle_timeout` is closed;
- a cap on open connections, kept below the open-files limit: at the cap, a new connection takes the
  place of the one waiting longest for its first whole request (the slowloris), else of the longest idle
  one; with neither, it is closed at once. A request in progress is never closed for another.

A request counts as in progress from its head read (the app's middleware says so) to its handler's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger("capcon.gateway")

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 75.0  # nginx's keep-alive default: longer than common load balancers' 60 s idle
# Open files kept for other uses than client connections: the listeners, the history file, logs, DNS.
RESERVED_FILES = 64
CLOSE_REASONS = ("header_timeout", "idle_timeout", "evicted", "refused")


# No open-files limit to read on Windows (a platform check, which mypy follows, rather than a failed import).
if sys.platform != "win32":
    import resource


def raise_open_files_limit() -> tuple[int | None, int | None]:
    """Raise the soft RLIMIT_NOFILE to the hard one, as servers do. (before, after); None where unknown."""
    if sys.platform == "win32":
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_files_limit() -> int | None:
    if sys.platform == "win32":
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(open_files: int | None) -> int | None:
    """The most client connections the limit allows: each may hold one upstream connection too, and some files
    are kept for the rest. None: no limit known."""
    if open_files is None:
        return None
    return max(1, (open_files - RESERVED_FILES) // 2)


class ConnectionGuard:
    """The three rules for every connection of one listener; counts what it closed, by reason."""

    def __init__(
        self,
        header_timeout: float | None,
        idle_timeout: float | None,
        max_connections: int | None,
        on_closed: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self.header_timeout = header_timeout or None  # 0: none
        self.idle_timeout = idle_timeout or None
        self.max_connections = max_connections or None
        self.on_closed = on_closed
        self.open = 0
        self.closed = dict.fromkeys(CLOSE_REASONS, 0)
        # Connections not in a request, oldest first: those that never finished a head, then idle ones.
        self._fresh: OrderedDict[GuardedConnection, None] = OrderedDict()
        self._idle: OrderedDict[GuardedConnection, None] = OrderedDict()

    def protocol_factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        """What `loop.create_server` is given in place of aiohttp's `Server` (it makes the handlers)."""

        def make() -> asyncio.Protocol:
            if self.max_connections is not None and self.open >= self.max_connections:
                oldest = self._slowest()
                if oldest is None:
                    self._count("refused")
                    return _Refused()
                oldest.close("evicted")
            return GuardedConnection(self, server())

        return make

    def _slowest(self) -> GuardedConnection | None:
        """The connection to give way: the one waiting longest for its first head (a real client's head comes in
        a packet or two, so the oldest waiting is the slowest), else the longest idle one."""
        return next(iter(self._fresh), None) or next(iter(self._idle), None)

    def waiting(self) -> int:
        """Open connections not in a request (waiting for a head, or idle)."""
        return len(self._fresh) + len(self._idle)

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """The app's middleware: a request in progress from its head read to its handler's end."""
        transport = request.transport
        connection = transport.get_protocol() if transport is not None else None
        if not isinstance(connection, GuardedConnection):
            return await handler(request)
        connection.head_read()
        try:
            return await handler(request)
        finally:
            connection.request_done()

    def _count(self, reason: str) -> None:
        self.closed[reason] += 1
        self.on_closed(reason)


class _Refused(asyncio.Protocol):
    """Over the cap with no connection to give way: closed as soon as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class GuardedConnection(asyncio.Protocol):
    """One client connection: aiohttp's handler does the HTTP; this keeps the timers and the guard's lists."""

    def __init__(self, guard: ConnectionGuard, handler: asyncio.Protocol) -> None:
        self.guard = guard
        self.handler = handler
        self.transport: asyncio.BaseTransport | None = None
        self.busy = False  # a request in progress
        self.served = 0  # requests whose handler has ended
        self._timer: asyncio.TimerHandle | None = None
        self._timer_reason = ""
        self._heard = False  # bytes of the next request have come since the last one ended

    # asyncio.Protocol: each call goes on to aiohttp's handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.guard.open += 1
        self.guard._fresh[self] = None
        self._arm(self.guard.header_timeout, "header_timeout")
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy and not self._heard and data:
            self._heard = True
            if self.served:  # a kept-alive connection's next request begins: its head is timed from here
                self._arm(self.guard.header_timeout, "header_timeout")
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        self.handler.connection_lost(exc)

    # the request's life, told by the middleware

    def head_read(self) -> None:
        self.busy = True
        self._disarm()
        self.guard._fresh.pop(self, None)
        self.guard._idle.pop(self, None)

    def request_done(self) -> None:
        self.busy = False
        self.served += 1
        self._heard = False
        if self.transport is not None and not self.transport.is_closing():
            self.guard._idle[self] = None
            self._arm(self.guard.idle_timeout, "idle_timeout")

    def close(self, reason: str) -> None:
        """Close for `reason` (a timer ran out, or another connection took this one's place)."""
        if self.transport is None or self.busy:
            return
        self.guard._count(reason)
        self.transport.close()  # connection_lost follows, from the transport
        self._release()  # counted out now: the place is free for the connection that took it

    def _release(self) -> None:
        if self.transport is None:
            return
        self.transport = None
        self.guard.open -= 1
        self._disarm()
        self.guard._fresh.pop(self, None)
        self.guard._idle.pop(self, None)

    # timers

    def _arm(self, seconds: float | None, reason: str) -> None:
        self._disarm()
        if seconds is None:
            return
        self._timer_reason = reason
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        self.close(self._timer_reason)
