"""The gateway's own answers: OpenAI-style error bodies, always with Retry-After and the request's id."""

from __future__ import annotations

import json

from aiohttp import web

from console.gateway import bounded_json

# OpenAI's error types by status; the code says which refusal it was, the message says why in words.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str, code: str, param: str | None = None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}, separators=(",", ":")
    ).encode()


def error(
    status: int,
    message: str,
    code: str,
    *,
    retry_after: int | None,
    request_id: str | None = None,
    outcome: str | None = None,
    param: str | None = None,
    close: bool = False,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A JSON error answer. `retry_after` None only on the admin listener (a refused token is not load)."""
    head = {"Content-Type": "application/json"}
    if retry_after is not None:
        head["Retry-After"] = str(int(retry_after))
    if request_id:
        head["x-request-id"] = request_id
    if outcome:
        head["x-capcon-outcome"] = outcome
    if headers:
        head.update(headers)
    response = web.Response(status=status, body=error_body(status, message, code, param), headers=head)
    if close:
        response.force_close()
    return response


def normalized_upstream_error(status: int, body: bytes) -> tuple[str, str, str | None]:
    """(message, code, param) from a replica's or vLLM's error body, whatever its shape."""
    try:
        data = bounded_json.loads(body)  # 64 KB of `[` is a replica's answer too: never a RecursionError
    except ValueError:
        data = None
    if isinstance(data, dict):
        nested = data.get("error")
        inner = nested if isinstance(nested, dict) else data
        message = inner.get("message")
        if isinstance(message, str) and message:
            code = inner.get("code")
            param = inner.get("param")
            return (
                message[:2000],
                str(code)[:100] if code is not None else f"upstream_{status}",
                param if isinstance(param, str) else None,
            )
    text = body[:500].decode("utf-8", "replace").strip()
    return (f"the replica answered {status}" + (f": {text}" if text else ""), f"upstream_{status}", None)


def stream_error_event(message: str) -> bytes:
    """The last event of a stream whose upstream broke off: an error the client sees, and no `data: [DONE]`.

    OpenAI's own streams end a failure this way; a client that stops at [DONE] would otherwise take the
    answer cut short for a whole one.
    """
    error = {"error": {"message": message, "type": "upstream_error", "code": 502}}
    return b"data: " + json.dumps(error, separators=(",", ":")).encode() + b"\n\n"
