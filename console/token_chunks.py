"""Which chunks of a streamed OpenAI-style answer carry its tokens: the rule a client's TTFT is timed by.

vLLM sends a chat answer's role chunk (`{"delta": {"role": "assistant", "content": ""}}`) just before the first
token, once prefill is done; another server may send it the moment it accepts the request. Timed from that chunk,
such a server's TTFT reads its time to accept, whatever prefill takes. So `capcon bench` and the gateway start
a stream's first token at the first chunk with output: a choice with non-empty `text` (completions), `content`,
`reasoning_content` or `reasoning` (chat; reasoning models stream their thinking first) or `tool_calls`, or with a
finish reason (an answer whose first output is its end). A role-only or empty chunk, a usage-only chunk and an
error event carry none. On vLLM this is the moment `vllm bench serve` takes, its first chunk with a choice.
"""

from __future__ import annotations

import json
from collections.abc import Callable

_TEXT_FIELDS = ("content", "reasoning_content", "reasoning")


def carries_token(chunk: object) -> bool:
    """Whether one parsed chunk of a stream carries output (see the module's rule)."""
    if not isinstance(chunk, dict):
        return False
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return False
    return any(_choice_has_output(choice) for choice in choices)


def _choice_has_output(choice: object) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("finish_reason") or choice.get("text"):
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    return any(delta.get(name) for name in _TEXT_FIELDS) or bool(delta.get("tool_calls"))


def events_carry_token(data: bytes, loads: Callable[[bytes], object] = json.loads) -> bool:
    """Whether any `data:` line in a piece of an event stream is a chunk that carries output.

    For a relay that passes bytes on: it asks only until the first token has gone by, so a stream costs a parse
    or two. A line that is not whole JSON (an event cut by the relay's hold limit) counts as none. `loads` is
    the relay's own reader where the stream is not trusted (a ValueError for what it will not read).
    """
    for line in data.splitlines():
        if not line.startswith(b"data:") or b'"choices"' not in line:
            continue
        try:
            chunk = loads(line[5:].strip())
        except (ValueError, RecursionError):  # not JSON (or not read): no token in it
            continue
        if carries_token(chunk):
            return True
    return False


__all__ = ["carries_token", "events_carry_token"]
