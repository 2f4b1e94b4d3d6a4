"""Source `scrape`: read every replica's /metrics directly, all at once.

One GET per target per refresh, all targets concurrently, each on its own
kept-alive httpx connection and with its own deadline. `Accept: text/plain` keeps vLLM's `vllm:` names (an
OpenMetrics answer may rewrite them to `vllm_`). Pages are streamed and cut off
at a size cap, so a runaway page cannot exhaust memory. Every failure becomes that
target's state; nothing is raised to the caller.
"""

from __future__ import annotations

import asyncio
import os
from typing import Sequence

import httpx

from console.errors import UserError
from console.metrics.exposition import ParseError, parse
from console.metrics.vllm import FAMILIES, sample_from_page
from console.sources.base import Target, TargetResult

DEFAULT_MAX_BYTES = 8 * 1024 * 1024  # a real vLLM page is ~50 KB; LoRA-heavy ones a few hundred KB
ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


class PageTooLarge(Exception):
    pass


class _NoAnswer(Exception):
    """The connection closed before any answer, twice."""


class _StaleConnection(Exception):
    """The connection failed before any answer arrived."""

    def __init__(self, error: httpx.HTTPError) -> None:
        super().__init__(str(error))
        self.error = error


def bearer_token_from_env(variable: str | None) -> str | None:
    """The token in environment variable `variable`; a clear error when it is unset or empty."""
    if not variable:
        return None
    token = os.environ.get(variable, "").strip()
    if not token:
        raise UserError(f"--token-env {variable}: the environment variable is unset or empty; expected a bearer token")
    return token


class ScrapeSource:
    name = "scrape"

    def __init__(
        self,
        targets: Sequence[Target],
        timeout: float = 2.0,
        token: str | None = None,
        verify: bool = True,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.targets = list(targets)
        self.timeout = timeout
        self.max_bytes = max_bytes
        headers = {"Accept": ACCEPT, "User-Agent": "capcon"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._headers = headers
        # One small client per target: httpx's shared pool slows down with the square of the
        # number of connections (seconds of CPU per refresh at 256 targets); one TLS context
        # is shared, since building one per client is costly.
        tls = httpx.create_ssl_context(verify=verify)
        self._clients = {
            target.url: httpx.AsyncClient(
                verify=tls,
                timeout=httpx.Timeout(timeout),
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                follow_redirects=False,
            )
            for target in self.targets
        }

    async def fetch(self, now: float) -> list[TargetResult]:
        """One scrape of every target, concurrently; `now` stamps the samples."""
        return list(await asyncio.gather(*(self._fetch_one(target, now) for target in self.targets)))

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._clients.values()))

    async def _fetch_one(self, target: Target, now: float) -> TargetResult:
        def failed(state, error: str) -> TargetResult:
            return TargetResult(target.name, target.url, state, None, error, now)

        try:
            async with asyncio.timeout(self.timeout):
                body = await self._get(self._clients[target.url], target.url)
        except TimeoutError:
            return failed("timeout", f"no complete answer within {self.timeout:g} s")
        except httpx.TimeoutException:
            return failed("timeout", f"no complete answer within {self.timeout:g} s")
        except httpx.ConnectError as error:
            return failed("down", f"cannot connect: {_reason(error)}")
        except httpx.HTTPStatusError as error:
            response = error.response
            return failed("down", f"HTTP {response.status_code} {response.reason_phrase}".strip())
        except PageTooLarge:
            return failed("bad_payload", f"page larger than {self.max_bytes / (1024 * 1024):g} MB; not read")
        except _NoAnswer as error:
            return failed("down", f"connection closed without an answer: {error}")
        except (httpx.RemoteProtocolError, httpx.ReadError) as error:
            return failed("bad_payload", f"page cut short: {_reason(error)}")
        except httpx.HTTPError as error:
            return failed("down", f"{type(error).__name__}: {_reason(error)}")
        except OSError as error:
            return failed("down", f"{type(error).__name__}: {error}")
        text = body.decode("utf-8", errors="replace")
        page = parse(text, FAMILIES)  # only the families capcon reads
        if page.errors:
            return failed("bad_payload", f"{page.errors} unreadable metric lines, first: {page.first_error!r}")
        try:
            sample = sample_from_page(page, now)
        except ParseError as error:
            return failed("bad_payload", str(error))
        warning = f"{sample.duplicates} duplicate series ignored" if sample.duplicates else ""
        return TargetResult(target.name, target.url, "up", sample, warning, now)

    async def _get(self, client: httpx.AsyncClient, url: str) -> bytes:
        try:
            return await self._get_once(client, url)
        except _StaleConnection:
            # A kept-alive connection the server had just closed (uvicorn drops idle ones after
            # 5 s): the GET got no answer at all, so asking once more on a new connection is safe.
            try:
                return await self._get_once(client, url)
            except _StaleConnection as again:
                raise _NoAnswer(_reason(again.error)) from None

    async def _get_once(self, client: httpx.AsyncClient, url: str) -> bytes:
        answered = False
        try:
            async with client.stream("GET", url, headers=self._headers) as response:
                answered = True
                return await self._read(response)
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as error:
            if answered:
                raise
            raise _StaleConnection(error) from error

    async def _read(self, response: httpx.Response) -> bytes:
        if response.status_code != 200:
            raise httpx.HTTPStatusError("status", request=response.request, response=response)
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise PageTooLarge()
        chunks = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise PageTooLarge()
            chunks.append(chunk)
        return b"".join(chunks)


def _reason(error: Exception) -> str:
    text = str(error).strip()
    return text or type(error).__name__
