"""The replica client: a request passed to a replica under the lease already taken, and its answer back.

A replica that refuses the connection is marked unhealthy and the request is handed back undecided (it
never reached the replica), to be decided again. One that breaks off once its answer began (reset,
closed, silent, too large) is a failure the client sees: a stream ends in an error event with no [DONE],
a whole answer is a 502. Every answer read whole is read within --max-response-bytes; an error answer
within UPSTREAM_ERROR_BODY. A client that leaves closes the upstream connection, so the replica aborts
the request and frees its KV.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp
from aiohttp import web

from console.gateway import answers, bounded_json, credentials
from console.gateway.bounded_json import Unreadable
from console.gateway.health import HealthChecks
from console.gateway.relay_io import CLIENT_TIMES, ClientGone, auth_header, problem_of, to_client, written
from console.gateway.replicas import Replica
from console.gateway.sse import EventRelay
from console.gateway.telemetry import ClientTimes, Telemetry

log = logging.getLogger("capcon.gateway")

UPSTREAM_ERROR_BODY = 64 * 1024
KEEPALIVE_SECONDS = 4.0


class ReplicaClient:
    """answered(outcome, kind): count one answer; retry_seconds(fallback): the Retry-After a failure gives;
    end_lease(replica, reached, began): the lease a forwarded request held ends (reached: the replica got it)."""

    def __init__(
        self,
        telemetry: Telemetry,
        health: HealthChecks,
        answered: Callable[[str, str], None],
        retry_seconds: Callable[..., int],
        end_lease: Callable[[Replica, bool, float], None],
        clock: Callable[[], float],
        connect_timeout: float,
        upstream_timeout: float,
        max_response_bytes: int,
    ) -> None:
        self.telemetry = telemetry
        self.health = health
        self._answered = answered
        self._retry_seconds = retry_seconds
        self._end_lease = end_lease
        self._clock = clock  # the event loop's monotonic time
        self.connect_timeout = connect_timeout
        self.upstream_timeout = upstream_timeout
        self.max_response_bytes = max_response_bytes
        self.session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        """The session to every replica (inside the running loop)."""
        self.session = aiohttp.ClientSession(
            # Idle upstream connections are closed before a replica's own keep-alive ends them (uvicorn's,
            # in front of vLLM, is 5 s), so a request is never sent on a connection the replica is closing.
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_SECONDS),
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=self.connect_timeout, sock_read=self.upstream_timeout
            ),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    def opened(self) -> aiohttp.ClientSession:
        """The session `open` made; RuntimeError before it (the gateway opens it as it starts)."""
        if self.session is None:
            raise RuntimeError("the replica client has no session: used before the gateway started")
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def forward(
        self, request: web.Request, replica: Replica, path: str, raw: bytes, rid: str, kind: str
    ) -> web.StreamResponse | None:
        """Pass the request to `replica` under the lease already taken, and its answer back. None: refused."""
        reached = False
        began = self._clock()
        try:
            headers = {"Content-Type": "application/json", "x-request-id": rid}
            # The target's own credentials, else the client's header (credentials.py says why).
            auth = credentials.replica_authorization(replica.authorization, request.headers.get("Authorization"))
            if auth:
                headers["Authorization"] = auth
            try:
                upstream = await self.opened().post(replica.base + path, data=raw, headers=headers)
            except aiohttp.ClientConnectorError as error:
                replica.refused += 1
                self.health.set_health(replica, False, problem_of(error))
                return None
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                reached = True
                return self._upstream_failed(replica, error, rid, kind)
            reached = True
            return await self._relay(request, upstream, replica, rid, kind)
        finally:
            self._end_lease(replica, reached, began)

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, replica: Replica, rid: str, kind: str
    ) -> web.StreamResponse:
        finished = False
        try:
            status = upstream.status
            outcome = "error" if status >= 500 else "local"
            if status != 200:
                try:
                    body, finished = await bounded_json.read_head(upstream, UPSTREAM_ERROR_BODY)
                except (TimeoutError, aiohttp.ClientError, OSError):
                    body = b""  # its status says enough; the connection is dropped below
                message, code, param = answers.normalized_upstream_error(status, body)
                self._answered(outcome, kind)
                replica.answered += 1
                answer = answers.error(
                    status,
                    message,
                    code,
                    retry_after=self._retry_seconds(),
                    request_id=rid,
                    outcome=outcome,
                    param=param,
                )
                return await written(request, answer, outcome, self.telemetry, self._clock)
            content_type = upstream.headers.get("Content-Type", "application/json")
            head = {"Content-Type": content_type, "x-request-id": rid, "x-capcon-outcome": "local"}
            encoding = upstream.headers.get("Content-Encoding")
            if encoding:
                head["Content-Encoding"] = encoding
            if not content_type.startswith("text/event-stream"):
                try:
                    body = await bounded_json.read_body(upstream, self.max_response_bytes)
                except (TimeoutError, aiohttp.ClientError, OSError, Unreadable) as error:
                    return self._broke_off(replica, error, rid, kind)
                finished = True
                self._answered("local", kind)
                replica.answered += 1
                whole = web.Response(status=200, body=body, headers=head)
                return await written(request, whole, "local", self.telemetry, self._clock)
            response, finished = await self._relay_stream(request, upstream, replica, head, kind)
            return response
        finally:
            if finished:
                upstream.release()
            else:
                upstream.close()  # a half-read answer: drop the connection so the replica sees the abort

    async def _relay_stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse, replica: Replica, head: dict, kind: str
    ) -> tuple[web.StreamResponse, bool]:
        """Pass a replica's stream on; one that breaks off ends in an error event, never as a finished answer.

        The outcome is counted at the stream's end, so a stream is one request under one outcome: local
        (it ended, or the client left), or upstream_error (the replica reset, closed or went silent).
        Also says whether the replica's body was read to its end (its connection may be used again).
        """
        finished = False
        head["Cache-Control"] = "no-cache"
        response = web.StreamResponse(status=200, headers=head)
        replica.answered += 1
        relay = EventRelay()
        outcome = "local"
        gone = False
        times: ClientTimes = request[CLIENT_TIMES]
        clock = self._clock
        try:
            await to_client(response.prepare(request))
            async for chunk in upstream.content.iter_any():
                out = relay.feed(chunk)
                if out:
                    await to_client(response.write(out))
                    times.wrote(clock(), out)
            finished = True
            rest = relay.rest()
            if rest:
                await to_client(response.write(rest))
                times.wrote(clock(), rest)
            if not relay.done and _ends_at_close(upstream):
                # A body that ends where the connection does: a replica that dies mid-stream looks like
                # a clean end here, so only the stream's own last word ([DONE]) says it was whole.
                raise aiohttp.ClientPayloadError("the replica closed the connection before the stream's end")
        except ClientGone:
            gone = True  # the client left: closing the upstream (in _relay) aborts the request on the replica
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            outcome = "upstream_error"
            self._answered(outcome, kind)
            log.warning(
                "replica %s broke off a stream after %d bytes: %s; the client gets an error event, no [DONE]",
                replica.name,
                upstream.content.total_bytes,
                problem_of(error),
            )
            try:
                event = answers.stream_error_event(f"the replica broke off the stream ({problem_of(error)})")
                await response.write(relay.before_error() + event)
                await response.write_eof()
            except (ConnectionError, RuntimeError):
                pass  # the client left too
            return response, False
        finally:
            if outcome == "local":  # also when the client left or the handler was cancelled
                self._answered("local", kind)
                self.telemetry.client_first_token(outcome, times)
        if gone:
            return response, finished
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            return response, finished
        times.ended(clock())
        self.telemetry.client_last_byte(outcome, times)
        return response, finished

    def _broke_off(self, replica: Replica, error: BaseException, rid: str, kind: str) -> web.Response:
        """A whole answer that broke off (or grew past --max-response-bytes) while it was read: 502."""
        replica.answered += 1
        log.warning("replica %s broke off an answer: %s; the client gets 502", replica.name, problem_of(error))
        return self._replica_502(f"the replica broke off its answer ({problem_of(error)})", "upstream_error", rid, kind)

    def _upstream_failed(self, replica: Replica, error: BaseException, rid: str, kind: str) -> web.Response:
        log.warning("replica %s failed a request: %s", replica.name, problem_of(error))
        return self._replica_502(f"the replica failed to answer ({problem_of(error)})", "error", rid, kind)

    def _replica_502(self, message: str, outcome: str, rid: str, kind: str) -> web.Response:
        """A replica's failure as the client's 502 (an OpenAI error body), counted once under `outcome`."""
        self._answered(outcome, kind)
        return answers.error(
            502, message, "upstream_error", retry_after=self._retry_seconds(), request_id=rid, outcome=outcome
        )

    async def merged_page(self, url: str) -> web.Response:
        """The workers' merged /metrics page, read from the supervisor (workers.py); 503 if it cannot be."""
        return await _merged_page(self.opened(), url, self.max_response_bytes)

    async def model_list(self, replicas: list[Replica], rid: str) -> web.Response:
        """GET /v1/models from the least busy healthy replica that answers it; 503 if none does."""
        for replica in sorted((r for r in replicas if r.healthy), key=lambda r: r.in_flight):
            try:
                async with self.opened().get(
                    replica.base + "/v1/models",
                    timeout=aiohttp.ClientTimeout(total=10),
                    headers=auth_header(replica.authorization),
                ) as upstream:
                    body = await bounded_json.read_body(upstream, self.max_response_bytes)
                    if upstream.status == 200:
                        return web.Response(
                            status=200,
                            body=body,
                            headers={
                                "Content-Type": upstream.headers.get("Content-Type", "application/json"),
                                "x-request-id": rid,
                            },
                        )
            except aiohttp.ClientConnectorError as error:
                self.health.set_health(replica, False, problem_of(error))
            except (TimeoutError, aiohttp.ClientError, OSError, Unreadable):
                continue
        return answers.error(
            503,
            "no replica of the fleet is answering",
            "no_replica_available",
            retry_after=10,
            request_id=rid,
            outcome="rejected",
        )


MERGED_PAGE_SECONDS = 5.0


async def _merged_page(session: aiohttp.ClientSession, url: str, limit: int) -> web.Response:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=MERGED_PAGE_SECONDS)) as page:
            body = await bounded_json.read_body(page, limit)
            if page.status == 200:
                return web.Response(body=body, headers={"Content-Type": page.headers.get("Content-Type", "text/plain")})
            problem = f"answered {page.status}"
    except (TimeoutError, aiohttp.ClientError, OSError, Unreadable) as error:
        problem = problem_of(error)
    return answers.error(
        503, f"the workers' merged /metrics could not be read ({problem})", "metrics_unavailable", retry_after=5
    )


def _ends_at_close(upstream: aiohttp.ClientResponse) -> bool:
    """Whether the body ends where the connection does (neither a length nor chunks): a break reads as an end."""
    encoding = upstream.headers.get("Transfer-Encoding", "").lower()
    return upstream.content_length is None and "chunked" not in encoding
