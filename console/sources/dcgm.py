"""Source `dcgm`: read NVIDIA dcgm-exporter pages directly, bounded as the replicas' scrape is.

One GET per page per call, all pages concurrently, each within its own deadline; the body is
streamed and cut off at a size cap (a node's page is tens of KB; a runaway one cannot exhaust
memory), gzip inflated under the same cap. Every failure becomes that page's error text, with
any secret in its URL masked; nothing is raised to the caller. A page read directly names its
node by the address it was read at (`GpuReading.host`), since its `Hostname` label is the
node's name only where the exporter's NODE_NAME is set.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from console.metrics.dcgm import DcgmPageError, GpuReading, parse_dcgm, with_host
from console.redact import redact, redact_url, url_secrets

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


class _TooLarge(Exception):
    pass


@dataclass(frozen=True)
class DcgmResult:
    """One page at one call: its GPUs (empty on failure) and what went wrong, if anything."""

    url: str  # as shown: credentials redacted
    gpus: tuple[GpuReading, ...] = ()
    error: str = ""
    bad_lines: int = 0  # lines of read fields that could not be used (the page was kept)


class DcgmSource:
    name = "dcgm"

    def __init__(self, urls: Sequence[str], timeout: float = 2.0, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.urls = list(urls)
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), follow_redirects=False, headers={"Accept": ACCEPT, "User-Agent": "capcon"}
        )

    async def fetch(self) -> list[DcgmResult]:
        return list(await asyncio.gather(*(self._fetch_one(url) for url in self.urls)))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _fetch_one(self, url: str) -> DcgmResult:
        shown = redact_url(url)
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._get(url)
        except TimeoutError:
            return DcgmResult(shown, error=f"no complete answer within {self.timeout:g} s")
        except _TooLarge:
            return DcgmResult(shown, error=f"page larger than {self.max_bytes / (1024 * 1024):g} MB; not read")
        except httpx.HTTPStatusError as error:
            return DcgmResult(shown, error=f"HTTP {error.response.status_code}")
        except httpx.ConnectError:
            return DcgmResult(shown, error="cannot connect")
        except Exception as error:  # noqa: BLE001 - whatever the HTTP stack raises is this page's state
            return DcgmResult(shown, error=redact(f"{type(error).__name__}: {error}", tuple(url_secrets(url)))[:200])
        try:
            page = parse_dcgm(body.decode("utf-8", errors="replace"))
        except DcgmPageError as error:
            return DcgmResult(shown, error=str(error))
        host = urlsplit(url).hostname or ""
        return DcgmResult(shown, tuple(with_host(g, host) for g in page.gpus), bad_lines=page.errors)

    async def _get(self, url: str) -> bytes:
        async with self._client.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as response:
            response.raise_for_status()
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise _TooLarge()
            gzipped = response.headers.get("content-encoding", "").strip().lower() in ("gzip", "x-gzip")
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_raw():
                if inflate is not None:
                    chunk = inflate.decompress(chunk, self.max_bytes - size + 1)  # never more than the cap allows
                    if inflate.unconsumed_tail:
                        raise _TooLarge()
                size += len(chunk)
                if size > self.max_bytes:
                    raise _TooLarge()
                chunks.append(chunk)
            return b"".join(chunks)
