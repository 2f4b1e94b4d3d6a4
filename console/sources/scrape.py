"""Source `scrape`: read every replica's /metrics directly, all at once.

One GET per target per refresh, all targets concurrently, each on its own
kept-alive connection and within its own deadline. `Accept: text/plain` keeps
vLLM's `vllm:` names (an OpenMetrics answer may rewrite them to `vllm_`). Pages
may come gzipped (as vLLM sends them when asked) and are streamed and cut off at a
size cap, counted after decompression, so a runaway page cannot exhaust memory.
Every failure becomes that target's state; nothing is raised to the caller.

The HTTP stack is httpx's own (httpcore's pools and h11), used one level below
`httpx.AsyncClient` on plain asyncio streams: at hundreds of targets per second the
client's per-request objects and anyio's bookkeeping cost more CPU than the rest
of the refresh, so each target keeps one prebuilt request and one small pool.
"""

from __future__ import annotations

import asyncio
import base64
import os
import zlib
from collections.abc import AsyncIterable, Callable, Hashable, Sequence
from dataclasses import replace
from http import HTTPStatus
from typing import TYPE_CHECKING

# proxy_bypass_environment is urllib's own NO_PROXY rule (what httpx follows); typeshed's stubs leave it out.
from urllib.request import getproxies, proxy_bypass_environment  # type: ignore[attr-defined]

import httpcore
import httpx

from console.errors import UserError
from console.metrics.exposition import ParseError, parse
from console.metrics.figures import ReplicaState
from console.metrics.vllm import FAMILIES, cut_short, doubt_note, sample_from_page
from console.redact import redact, redact_url, url_secrets
from console.sources.asyncio_network import AsyncioBackend
from console.targets import Target, TargetResult, shown_targets

if TYPE_CHECKING:
    import ssl

    from console.metrics.vllm import ReplicaSample

DEFAULT_MAX_BYTES = 8 * 1024 * 1024  # a real vLLM page is ~50 KB; LoRA-heavy ones a few hundred KB
ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"
# A page with fewer series than the replica's last good one is cut short, unless it comes this
# many times in a row with the same series: then it is what the replica serves now.
SHORT_PAGES_ACCEPTED = 3


class PageTooLarge(Exception):
    pass


class _BadStatus(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status} {reason}".strip())


class _BadEncoding(Exception):
    pass


class _NoAnswer(Exception):
    """The connection closed before any answer, twice."""


class _StaleConnection(Exception):
    """The connection failed before any answer arrived."""

    def __init__(self, error: httpcore.NetworkError | httpcore.RemoteProtocolError) -> None:
        super().__init__(str(error))
        self.error = error


class _BadURL(Exception):
    pass


def bearer_token_from_env(variable: str | None) -> str | None:
    """The token in environment variable `variable`; a clear error when it is unset or empty."""
    if not variable:
        return None
    token = os.environ.get(variable, "").strip()
    if not token:
        raise UserError(f"--token-env {variable}: the environment variable is unset or empty; expected a bearer token")
    return token


class _Route:
    """How one target is asked: a request built once, over one kept-alive connection.

    Straight to the replica this is one httpcore connection, replaced when the server
    closed it or it failed (a pool's bookkeeping costs more than it saves for a single
    connection); through a proxy it is httpcore's one-connection proxy pool.

    A connection is used again only after its last answer was read to the end and closed
    (`settled`): one cut off by a deadline or an error may be left mid-request, where
    httpcore refuses it every time after (ConnectionNotAvailable), so it is dropped and the
    next request starts on a new one.
    """

    def __init__(
        self,
        request: httpcore.Request,
        tls: ssl.SSLContext,
        backend: httpcore.AsyncNetworkBackend,
        proxy_pool: Callable[[], httpcore.AsyncHTTPProxy] | None,
    ) -> None:
        self.request = request
        self._tls = tls
        self._backend = backend
        self._proxy_pool = proxy_pool
        self._proxy: httpcore.AsyncHTTPProxy | None = proxy_pool() if proxy_pool is not None else None
        self._connection: httpcore.AsyncHTTPConnection | None = None
        self._settled = True

    async def send(self) -> httpcore.Response:
        if not self._settled:
            await self.drop()
        self._settled = False
        if self._proxy_pool is not None:
            if self._proxy is None:
                self._proxy = self._proxy_pool()
            return await self._proxy.handle_async_request(self.request)
        connection = self._connection
        if connection is None or connection.is_closed() or connection.has_expired():
            if connection is not None:
                await connection.aclose()
            connection = self._connection = httpcore.AsyncHTTPConnection(
                self.request.url.origin, ssl_context=self._tls, network_backend=self._backend
            )
        return await connection.handle_async_request(self.request)

    def settled(self) -> None:
        """The last answer was read whole and closed: its connection may carry the next request."""
        self._settled = True

    async def drop(self) -> None:
        """Forget the connection (or the proxy's pool) in whatever state it was left; the next send opens anew."""
        connection, proxy = self._connection, self._proxy
        self._connection = None
        self._proxy = None
        self._settled = True
        try:
            async with asyncio.timeout(1.0):  # closing a socket does not wait on the peer; bounded all the same
                if connection is not None:
                    await connection.aclose()
                if proxy is not None:
                    await proxy.aclose()
        except Exception:  # noqa: BLE001 - a connection being thrown away may fail to close in any way
            pass

    async def aclose(self) -> None:
        await self.drop()


def _env_proxy(url: httpx.URL) -> httpx.Proxy | None:
    """The proxy the environment names for `url` (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY), as httpx honours it."""
    proxies = getproxies()
    chosen = proxies.get(url.scheme) or proxies.get("all")
    if not chosen:
        return None
    netloc = url.netloc.decode("ascii")
    if proxy_bypass_environment(netloc, proxies) or proxy_bypass_environment(url.host, proxies):
        return None
    if "://" not in chosen:
        chosen = "http://" + chosen
    try:
        proxy = httpx.Proxy(chosen)
    except (httpx.InvalidURL, ValueError) as error:
        raise _BadURL(
            redact(f"the proxy named by the environment is not a usable URL: {error}", url_secrets(chosen))
        ) from None
    if proxy.url.scheme not in ("http", "https"):  # (the URL itself may hold a password: not shown)
        raise _BadURL(f"the environment names a {proxy.url.scheme}:// proxy; only http(s) proxies are supported")
    return proxy


def _basic_auth(url: httpx.URL) -> tuple[bytes, bytes] | None:
    """`user:password@` in a target's URL as the HTTP Basic Authorization header it stands for."""
    if not url.userinfo:
        return None
    credentials = f"{url.username}:{url.password}".encode()
    return (b"Authorization", b"Basic " + base64.b64encode(credentials))


def _route(
    target_url: str, headers: list[tuple[bytes, bytes]], tls: ssl.SSLContext, backend: httpcore.AsyncNetworkBackend
) -> _Route:
    try:
        url = httpx.URL(target_url)
    except httpx.InvalidURL as error:
        raise _BadURL(redact(f"not a valid URL: {error}", url_secrets(target_url))) from None
    if url.scheme not in ("http", "https") or not url.host:
        raise _BadURL(f"not an http(s) URL: {redact_url(target_url)}")
    basic = _basic_auth(url)
    if basic is not None:  # the target's own credentials win over --token-env's bearer token
        headers = [header for header in headers if header[0] != b"Authorization"] + [basic]
    request = httpcore.Request(
        "GET",
        httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
        headers=[(b"Host", url.netloc), *headers],
    )
    proxy = _env_proxy(url)
    if proxy is None:
        return _Route(request, tls, backend, None)

    def pool() -> httpcore.AsyncHTTPProxy:
        return httpcore.AsyncHTTPProxy(
            proxy_url=httpcore.URL(
                scheme=proxy.url.raw_scheme, host=proxy.url.raw_host, port=proxy.url.port, target=proxy.url.raw_path
            ),
            proxy_auth=proxy.raw_auth,
            proxy_headers=proxy.headers.raw,
            ssl_context=tls,
            max_connections=1,
            network_backend=backend,
        )

    return _Route(request, tls, backend, pool)


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
        self.timeout = timeout
        self.max_bytes = max_bytes
        headers = [(b"Accept", ACCEPT.encode()), (b"Accept-Encoding", b"gzip"), (b"User-Agent", b"capcon")]
        if token:
            headers.append((b"Authorization", f"Bearer {token}".encode()))
        # One TLS context for all targets (building one is costly); httpx's, so SSL_CERT_FILE and
        # SSL_CERT_DIR are honoured as before. One connection per target, never a shared pool:
        # a pool's bookkeeping grows with the square of its connections.
        tls = httpx.create_ssl_context(verify=verify)
        backend = AsyncioBackend()
        self._routes: list[_Route | _BadURL] = []
        for target in targets:
            try:
                self._routes.append(_route(target.url, headers, tls, backend))
            except _BadURL as error:
                self._routes.append(error)
        # Results carry the targets as shown and recorded (credentials redacted); only the routes
        # hold the real URLs. The secrets each target holds are masked in its error texts too.
        self.targets = shown_targets(targets)
        self._secrets = [tuple(url_secrets(target.url)) + ((token,) if token else ()) for target in targets]
        self._lock = asyncio.Lock()
        # Per route: (its last good sample, the smaller shape seen since, how many times in a row).
        self._last_pages: dict[Hashable, tuple[ReplicaSample | None, tuple[tuple[str, int], ...] | None, int]] = {}

    async def fetch(self, now: float) -> list[TargetResult]:
        """One scrape of every target, concurrently; `now` stamps the samples.

        Concurrent calls are served in turn, so a target's connection carries one request at a time.
        """
        async with self._lock:
            scrapes = [self._fetch_one(target, route, now) for target, route in zip(self.targets, self._routes)]
            results = await asyncio.gather(*scrapes)
            return [
                replace(result, error=redact(result.error, secrets)) if result.error else result
                for result, secrets in zip(results, self._secrets)
            ]

    async def aclose(self) -> None:
        routes = [route for route in self._routes if isinstance(route, _Route)]
        await asyncio.gather(*[route.aclose() for route in routes], return_exceptions=True)
        await asyncio.sleep(0)  # let the transports finish closing their sockets

    async def _fetch_one(self, target: Target, route: _Route | _BadURL, now: float) -> TargetResult:
        def failed(state: ReplicaState, error: str) -> TargetResult:
            return TargetResult(target.name, target.url, state, None, error, now)

        try:
            async with asyncio.timeout(self.timeout):
                body = await self._get(route)
        except (TimeoutError, httpcore.TimeoutException):
            return failed(ReplicaState.TIMEOUT, f"no complete answer within {self.timeout:g} s")
        except httpcore.ConnectError as error:
            return failed(ReplicaState.DOWN, f"cannot connect: {_reason(error)}")
        except _BadStatus as error:
            return failed(ReplicaState.DOWN, str(error))
        except PageTooLarge:
            return failed(ReplicaState.BAD_PAYLOAD, f"page larger than {self.max_bytes / (1024 * 1024):g} MB; not read")
        except _BadEncoding as error:
            return failed(ReplicaState.BAD_PAYLOAD, str(error))
        except _NoAnswer as error:
            return failed(ReplicaState.DOWN, f"connection closed without an answer: {error}")
        except (httpcore.RemoteProtocolError, httpcore.ReadError) as error:
            return failed(ReplicaState.BAD_PAYLOAD, f"page cut short: {_reason(error)}")
        except _BadURL as error:
            return failed(ReplicaState.DOWN, str(error))
        except httpcore.UnsupportedProtocol as error:
            return failed(ReplicaState.DOWN, f"unsupported URL: {_reason(error)}")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError) as error:
            return failed(ReplicaState.DOWN, f"{type(error).__name__}: {_reason(error)}")
        except OSError as error:
            return failed(ReplicaState.DOWN, f"{type(error).__name__}: {error}")
        except (ValueError, OverflowError) as error:  # an address the socket layer refuses to use
            return failed(ReplicaState.DOWN, f"unusable address: {error}")
        except Exception as error:  # noqa: BLE001 - whatever the HTTP stack raises is this target's state, never the poll's
            return failed(ReplicaState.DOWN, f"{type(error).__name__}: {_reason(error)}")
        return self.read_page(target, route, body, now)

    def read_page(self, target: Target, route: Hashable, body: bytes, now: float) -> TargetResult:
        """The result of one page of `target` (`route` keys what is remembered of its last good page).

        A page is read whole or not at all: one cut short (at any byte, even with an honest
        Content-Length) is this poll's bad_payload, never a smaller number. Never raises.
        """

        def failed(error: str) -> TargetResult:
            return TargetResult(target.name, target.url, ReplicaState.BAD_PAYLOAD, None, error, now)

        text = body.decode("utf-8", errors="replace")
        page = parse(text, FAMILIES)  # only the families capcon reads
        if page.cut:
            return failed("page cut short: its last line has no line end")
        if page.errors:
            return failed(f"{page.errors} unreadable metric lines, first: {page.first_error!r}")
        try:
            sample = sample_from_page(page, now)  # IncompletePage: a histogram or an engine cut off
        except ParseError as error:
            return failed(str(error))
        except Exception as error:  # noqa: BLE001 - a page must never bring the console down
            return failed(f"page not readable: {type(error).__name__}: {error}")
        cut = self._cut_at_a_line_end(route, sample)
        if cut:
            return failed(cut)
        warnings = [
            f"{sample.duplicates} duplicate series ignored" if sample.duplicates else "",
            doubt_note(sample.doubtful),
        ]
        return TargetResult(target.name, target.url, ReplicaState.UP, sample, "; ".join(w for w in warnings if w), now)

    def _cut_at_a_line_end(self, route: Hashable, sample: ReplicaSample) -> str:
        """Why this page of the target looks cut at a line end (fewer series than its process served); "".

        A smaller page that repeats SHORT_PAGES_ACCEPTED times in a row is the replica's new shape, not a cut.
        """
        pages = self._last_pages
        previous, short, times = pages.get(route, (None, None, 0))
        reason = cut_short(previous, sample)
        if reason:
            shape = tuple(sorted(sample.shape.items()))
            times = times + 1 if shape == short else 1
            if times < SHORT_PAGES_ACCEPTED:
                pages[route] = (previous, shape, times)
                return reason
        pages[route] = (sample, None, 0)
        return ""

    async def _get(self, route: _Route | _BadURL) -> bytes:
        """The page behind `route`, decompressed; raises on any failure (the caller names it)."""
        if isinstance(route, _BadURL):
            raise route
        try:
            return await self._get_once(route)
        except _StaleConnection:
            # A kept-alive connection the server had just closed (uvicorn drops idle ones after
            # 5 s): the GET got no answer at all, so asking once more on a new connection is safe.
            try:
                return await self._get_once(route)
            except _StaleConnection as again:
                raise _NoAnswer(_reason(again.error)) from None

    async def _get_once(self, route: _Route) -> bytes:
        try:
            response = await route.send()
        except (httpcore.ReadError, httpcore.WriteError, httpcore.RemoteProtocolError) as error:
            raise _StaleConnection(error) from error
        try:
            body = await self._read(response)
        finally:
            await response.aclose()  # an unfinished body closes the connection; a finished one keeps it
        route.settled()
        return body

    async def _read(self, response: httpcore.Response) -> bytes:
        if response.status != 200:
            reason = response.extensions.get("reason_phrase", b"").decode("latin-1")
            if not reason:
                try:
                    reason = HTTPStatus(response.status).phrase
                except ValueError:
                    reason = ""
            raise _BadStatus(response.status, reason)
        declared = encoding = None
        for name, value in response.headers:
            lowered = name.lower()
            if lowered == b"content-length":
                declared = value
            elif lowered == b"content-encoding":
                encoding = value.strip().lower()
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise PageTooLarge()
        if encoding in (b"gzip", b"x-gzip"):
            return await self._read_gzip(response)
        if encoding not in (None, b"", b"identity"):
            raise _BadEncoding(f"unsupported Content-Encoding {encoding.decode('latin-1')!r}")
        chunks = []
        size = 0
        async for chunk in _chunks(response):
            size += len(chunk)
            if size > self.max_bytes:
                raise PageTooLarge()
            chunks.append(chunk)
        return b"".join(chunks)

    async def _read_gzip(self, response: httpcore.Response) -> bytes:
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunks = []
        size = 0
        try:
            async for chunk in _chunks(response):
                # Never inflate more than the cap allows: a small gzip body can expand a thousandfold.
                out = inflate.decompress(chunk, self.max_bytes - size + 1)
                size += len(out)
                if size > self.max_bytes or inflate.unconsumed_tail:
                    raise PageTooLarge()
                chunks.append(out)
        except zlib.error as error:
            raise _BadEncoding(f"gzip page is corrupt: {error}") from None
        if not inflate.eof:
            raise _BadEncoding("gzip page cut short")
        return b"".join(chunks)


def _reason(error: Exception) -> str:
    text = str(error).strip()
    return text or type(error).__name__


def _chunks(response: httpcore.Response) -> AsyncIterable[bytes]:
    """The body of an answer from httpcore's async pool (typed as either kind of stream: always this one)."""
    stream = response.stream
    if not isinstance(stream, AsyncIterable):
        raise TypeError("httpcore answered with a synchronous stream on an asynchronous connection")
    return stream
