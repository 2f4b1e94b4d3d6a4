"""The few HTTP requests a switch makes (a gateway's admin API, a webhook), on the standard library.

`capcon overflow set` and `status` are run from runbooks, often in a loop over gateways: the request itself
takes milliseconds, and importing aiohttp for it took about 180 ms of each call's start-up
(benchmarks/bench_startup.py). http.client costs a few: each request runs on a worker thread with the
deadline on its socket and on the wait for it, reads at most `limit` bytes, and never follows a redirect
(a token must not be sent on to another address).
"""

from __future__ import annotations

import asyncio
import base64
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, unquote, urlsplit

if TYPE_CHECKING:
    from http.client import HTTPConnection


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes  # at most the limit asked for


class HttpFailure(Exception):
    """The request got no answer; its words say why (no secret in them)."""


def failure_words(error: BaseException, timeout: float) -> str | None:
    """The usual failures in words; None for anything else (the caller names it)."""
    if isinstance(error, TimeoutError | socket.timeout):
        return f"no answer within {timeout:g} s"
    if isinstance(error, ConnectionRefusedError | socket.gaierror | ConnectionError) or (
        isinstance(error, OSError) and error.errno is not None
    ):
        return "not answering (connection refused or unreachable)"
    if isinstance(error, HttpFailure):
        return str(error)
    return None


def _connection(url: str, timeout: float) -> tuple[HTTPConnection, SplitResult]:
    import http.client  # noqa: PLC0415 - a few ms, only when a request is made

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpFailure("not a URL that can be asked")
    try:
        port = parts.port
    except ValueError:
        raise HttpFailure("not a URL that can be asked") from None
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, port, timeout=timeout), parts
    return http.client.HTTPConnection(parts.hostname, port, timeout=timeout), parts


def _request(
    method: str, url: str, headers: dict[str, str], body: bytes | None, timeout: float, limit: int
) -> HttpAnswer:
    connection, parts = _connection(url, timeout)
    sent = dict(headers)
    if parts.username is not None and "Authorization" not in sent:
        # Credentials in the URL are sent as basic auth, as other HTTP clients do.
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        sent["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return HttpAnswer(response.status, response.read(limit))
    finally:
        connection.close()


async def http_request(
    method: str, url: str, headers: dict[str, str], body: bytes | None, seconds: float, limit: int
) -> HttpAnswer:
    """One request, its answer's status and first `limit` bytes; raises what the socket raised, TimeoutError
    after `seconds` (the socket's deadline, and the wait's a second later), or HttpFailure for a URL that cannot be asked."""
    return await asyncio.wait_for(
        asyncio.to_thread(_request, method, url, headers, body, seconds, limit), timeout=seconds + 1.0
    )
