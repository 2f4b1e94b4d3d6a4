"""What the replica client and the hosted client share when they pass an answer on to the client.

Writing to a client that has left raises ClientGone (never a traceback); a whole answer is written where
its client-seen time can be measured; an upstream's error is said in words with its secrets masked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from console.gateway.telemetry import ClientTimes, Telemetry
from console.redact import redact

CLIENT_TIMES = web.RequestKey("capcon_client_times", ClientTimes)  # kept on the aiohttp request


class ClientGone(Exception):
    """The client closed its connection while its answer was being written."""


async def to_client(write: Awaitable[object]) -> None:
    try:
        await write
    except (ConnectionError, RuntimeError) as error:  # aiohttp: ClientConnectionResetError, closed transport
        raise ClientGone() from error


async def written(
    request: web.Request, response: web.Response, outcome: str, telemetry: Telemetry, clock: Callable[[], float]
) -> web.Response:
    """Write a whole answer here rather than after the handler returns, so its client-seen time is known.

    A whole answer counts in the clients' end-to-end only: its first byte comes with its last, so it has no time
    to first token a TTFT target could be held to (the time it took is its end-to-end, judged on that target)."""
    try:
        await response.prepare(request)
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        return response  # the client left
    times: ClientTimes = request[CLIENT_TIMES]
    times.ended(clock())
    telemetry.client_last_byte(outcome, times)
    return response


def problem_of(error: BaseException) -> str:
    text = redact(str(error)) or type(error).__name__  # client errors often quote the URL, credentials and all
    return f"{type(error).__name__}: {text}"[:300]


def auth_header(value: str | None) -> dict[str, str] | None:
    return {"Authorization": value} if value else None
