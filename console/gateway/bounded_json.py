"""Reading what an upstream sends within bounds: a body's size, JSON's nesting, a token count's magnitude.

A replica, the hosted endpoint or anything answering on their address is not trusted to be sane. Python's
JSON decoder recurses once per bracket, so 60 KB of `[` is a RecursionError, and a 400-digit token count
is a valid JSON number that no float (Prometheus, the tallies) can hold. Everything the gateway reads whole
goes through here: a body bigger than the bound, JSON nested deeper than `MAX_DEPTH` or a count past
`MAX_TOKENS` is refused or unknown, never an exception in a handler.
"""

from __future__ import annotations

import itertools
import json
import math
import re

import aiohttp

MAX_DEPTH = 64  # an OpenAI answer nests about 5 deep; tool calls with JSON arguments stay well under this
MAX_TOKENS = 10**12  # no usage figure of one answer comes near; anything past it is a broken or hostile count
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024

# A JSON string, escapes included (unrolled so the regex engine does not backtrack per character).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = str.maketrans({"[": "\x01", "{": "\x01", "]": "\xff", "}": "\xff"})


class Unreadable(ValueError):
    """An upstream body that is not read: too large, nested too deep, or not JSON."""


class TooLarge(Unreadable):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is over {limit} bytes (--max-response-bytes)")
        self.limit = limit


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether `text` opens more than `limit` brackets at once, brackets inside strings not counted.

    Cheap where it matters: a body with fewer brackets than the limit is never scanned; otherwise the
    strings and everything but brackets are dropped by the regex engine and the running depth is summed
    in C (itertools.accumulate over signed bytes), never a Python loop over the body.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if len(brackets) <= limit:
        return False
    steps = memoryview(brackets.translate(_STEP).encode("latin-1")).cast("b")
    return max(itertools.accumulate(steps)) > limit


def loads(data: bytes | bytearray | str, max_depth: int = MAX_DEPTH) -> object:
    """json.loads for untrusted bodies: Unreadable (a ValueError) for anything not read, never RecursionError."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8 text") from None
    if too_deep(text, max_depth):
        raise Unreadable(f"JSON nested deeper than {max_depth}")
    try:
        return json.loads(text)
    except RecursionError:  # not reached after the scan; kept so no decoder limit can surface as a 500
        raise Unreadable(f"JSON nested deeper than {max_depth}") from None
    except ValueError as error:
        raise Unreadable(f"not valid JSON ({str(error)[:100]})") from None


def token_count(value: object) -> int | None:
    """A usage figure as a whole number from 0 to MAX_TOKENS; None (unknown) for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_TOKENS else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_TOKENS:
        return int(value)
    return None


async def read_body(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or TooLarge as soon as it passes `limit` bytes (what is left is not read)."""
    length = response.content_length
    if length is not None and length > limit:
        raise TooLarge(limit)
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise TooLarge(limit)
    return bytes(body)


async def read_head(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of the body (an error's text), and whether that was all of it."""
    body = bytearray()
    while len(body) < limit:
        chunk = await response.content.read(limit - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body), response.content.at_eof()
