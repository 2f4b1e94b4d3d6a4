"""The hosted client: a request passed to the hosted endpoint, its answer back, its usage counted.

The request's model is mapped to the hosted one (--hosted-model), a stream asks for its usage chunk (cut
from what the client gets unless it asked for it), and the key or the URL's user:password goes as the
Authorization header (credentials.py). Failing before anything reached the client, a 200 that is no
completion included, hands the request back (None) to be decided again under the bounded queue, never a
200 with garbage; a stream that breaks off once begun ends in an error event, as a replica's does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web

from console.gateway import answers, bounded_json, credentials
from console.gateway.bounded_json import Unreadable
from console.gateway.relay_io import CLIENT_TIMES, ClientGone, problem_of, to_client, written
from console.gateway.telemetry import ClientTimes, Telemetry

log = logging.getLogger("capcon.gateway")


class HostedClient:
    """answered(outcome, kind): count one answer; clock: the event loop's monotonic time."""

    def __init__(
        self,
        url: str | None,
        key: str | None,
        models: Mapping[str, str],
        price_per_million: float | None,
        telemetry: Telemetry,
        answered: Callable[[str, str], None],
        clock: Callable[[], float],
        connect_timeout: float,
        upstream_timeout: float,
        max_response_bytes: int,
    ) -> None:
        self.url = url
        self._base, url_credentials = credentials.split(url) if url else ("", None)
        self._authorization = credentials.hosted_authorization(key, url_credentials)
        self.models = models  # local model -> hosted model ("*": any)
        self.price_per_million = price_per_million
        self.telemetry = telemetry
        self._answered = answered
        self._clock = clock
        self.connect_timeout = connect_timeout
        self.upstream_timeout = upstream_timeout
        self.max_response_bytes = max_response_bytes
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}  # as the hosted endpoint reported them
        self.session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        """The session to the hosted endpoint (inside the running loop); none without one."""
        if self.url:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=max(self.connect_timeout, 5.0), sock_read=self.upstream_timeout
                ),
            )

    def opened(self) -> aiohttp.ClientSession:
        """The session `open` made; RuntimeError if there is none (not started, or no hosted endpoint)."""
        if self.session is None:
            raise RuntimeError(
                "the hosted client has no session: opened before the gateway started, or no --hosted-url"
            )
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    def target(self, path: str) -> str:
        base = self._base.rstrip("/")
        return base + path[3:] if base.endswith("/v1") else base + path

    async def serve(
        self, request: web.Request, path: str, payload: dict, rid: str, kind: str
    ) -> web.StreamResponse | None:
        """Pass the request to the hosted endpoint; None if it failed before anything reached the client.

        Failing includes answering 200 with something that is not a completion (not JSON, no choices, a
        stream whose first event is not a chunk): the request falls back as if the call had failed, never
        a 200 with garbage. A stream that breaks off once begun ends in an error event, as a replica's does.
        """
        mapping = self.models
        body = dict(payload)
        model = payload.get("model")
        remote = mapping.get(model) if isinstance(model, str) else None
        remote = remote or mapping.get("*") or model
        if remote is not None:
            body["model"] = remote
        stream = bool(payload.get("stream"))
        strip_usage = False
        if stream:
            asked = payload.get("stream_options")
            options = asked if isinstance(asked, dict) else {}
            if not options.get("include_usage"):
                body["stream_options"] = {**options, "include_usage": True}
                strip_usage = True  # asked for the count; the client did not want the usage chunk
        headers = {"Content-Type": "application/json", "x-request-id": rid}
        if self._authorization:  # the key, else the URL's user:password (credentials.py)
            headers["Authorization"] = self._authorization
        try:
            upstream = await self.opened().post(self.target(path), data=json.dumps(body), headers=headers)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            log.warning("hosted endpoint failed (%s): the request falls back to the bounded queue", problem_of(error))
            return None
        limit = self.max_response_bytes
        response = None
        counted = False
        finished = False
        times: ClientTimes = request[CLIENT_TIMES]
        clock = self._clock
        try:
            if upstream.status != 200:
                log.warning("hosted endpoint answered %d: the request falls back to the bounded queue", upstream.status)
                return None
            head = {
                "Content-Type": upstream.headers.get("Content-Type", "application/json"),
                "x-request-id": rid,
                "x-capcon-outcome": "hosted",
            }
            if not stream:
                data = await bounded_json.read_body(upstream, limit)
                finished = True
                answer = _completion(data)
                if answer is None:
                    log.warning(
                        "hosted endpoint answered 200 without a completion (not JSON with choices): "
                        "the request falls back to the bounded queue"
                    )
                    return None
                self._count_usage(answer)
                self._answered("hosted", kind)
                counted = True
                whole = web.Response(status=200, body=data, headers=head)
                return await written(request, whole, "hosted", self.telemetry, clock)
            head["Cache-Control"] = "no-cache"
            pending = b""
            checked = False  # the first data event was a completion chunk: only then does the answer start
            ready: list[bytes] = []
            async for chunk in upstream.content.iter_any():
                pending = (pending + chunk).replace(b"\r\n", b"\n")
                *events, pending = pending.split(b"\n\n")
                if len(pending) > limit:  # one event that never ends is a body read whole
                    raise bounded_json.TooLarge(limit)
                for event in events:
                    if not checked:
                        event_data = _sse_data(event)
                        if event_data is not None:
                            if _completion(event_data) is None:
                                log.warning(
                                    "hosted endpoint's stream did not start with a completion chunk: "
                                    "the request falls back to the bounded queue"
                                )
                                return None
                            checked = True
                    if self._event(event, strip_usage):
                        ready.append(event + b"\n\n")
                if checked and ready:
                    if response is None:
                        response = web.StreamResponse(status=200, headers=head)
                        await to_client(response.prepare(request))
                    out = b"".join(ready)
                    await to_client(response.write(out))
                    times.wrote(clock(), out)
                    ready = []
            finished = True
            if response is None:
                log.warning("hosted endpoint sent an empty stream: the request falls back to the bounded queue")
                return None
            if pending.strip():
                await to_client(response.write(pending))
                times.wrote(clock(), pending)
            self._answered("hosted", kind)  # before the end reaches the client, so it is counted when seen
            counted = True
            self.telemetry.client_first_token("hosted", times)
            await to_client(response.write_eof())
            times.ended(clock())
            self.telemetry.client_last_byte("hosted", times)
            return response
        except ClientGone:
            return response  # the client left; closing the upstream (below) ends the hosted request
        except (TimeoutError, aiohttp.ClientError, OSError, Unreadable) as error:
            if response is None:
                log.warning(
                    "hosted endpoint failed (%s): the request falls back to the bounded queue", problem_of(error)
                )
                return None
            self._answered("upstream_error", kind)
            counted = True
            log.warning(
                "hosted endpoint broke off a stream: %s; the client gets an error event, no [DONE]", problem_of(error)
            )
            try:
                event = answers.stream_error_event(f"the hosted endpoint broke off the stream ({problem_of(error)})")
                await response.write(event)
                await response.write_eof()
            except (ConnectionError, RuntimeError):
                pass
            return response
        finally:
            if response is not None and not counted:  # begun, then the client left (or the handler was cancelled)
                self._answered("hosted", kind)
                self.telemetry.client_first_token("hosted", times)
            if finished:
                upstream.release()
            else:
                upstream.close()

    def _event(self, event: bytes, strip_usage: bool) -> bool:
        """Count the usage an SSE event carries; False for the usage-only chunk the client did not ask for."""
        if b'"usage"' not in event:
            return True
        data = _sse_data(event)
        try:
            chunk = bounded_json.loads(data or b"")
        except ValueError:
            return True
        if not isinstance(chunk, dict) or not isinstance(chunk.get("usage"), dict):
            return True
        self.add_usage(chunk["usage"])
        return not (strip_usage and not chunk.get("choices"))

    def _count_usage(self, answer: dict) -> None:
        usage = answer.get("usage")
        if isinstance(usage, dict):
            self.add_usage(usage)

    def add_usage(self, usage: dict) -> None:
        # A figure that is not a whole number from 0 to 1e12 is unknown (0 here): a 400-digit count would
        # reach /admin/state, the tallies and Prometheus, where no float holds it (OverflowError in every
        # later switch's tally).
        prompt = bounded_json.token_count(usage.get("prompt_tokens")) or 0
        completion = bounded_json.token_count(usage.get("completion_tokens")) or 0
        self.usage["prompt_tokens"] += prompt
        self.usage["completion_tokens"] += completion
        self.telemetry.hosted_tokens(prompt, completion, self.price_per_million)


def _sse_data(event: bytes) -> bytes | None:
    """The data of one SSE event (its `data:` lines joined), or None for an event without any (a comment)."""
    lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _completion(data: bytes) -> dict | None:
    """A completion (or a stream's chunk) as read from the hosted endpoint: a JSON object with a list of choices."""
    try:
        answer = bounded_json.loads(data)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and isinstance(answer.get("choices"), list) else None
