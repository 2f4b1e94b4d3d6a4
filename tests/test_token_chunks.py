"""Which chunks of a stream carry a token: the first of them is where a client's TTFT ends."""

from __future__ import annotations

import pytest

from console.gateway import bounded_json
from console.token_chunks import carries_token, events_carry_token


def chat(delta: dict, finish: str | None = None) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.mark.parametrize(
    "chunk, expected",
    [
        (chat({"role": "assistant", "content": ""}), False),  # vLLM's role chunk
        (chat({"role": "assistant"}), False),
        (chat({}), False),
        (chat({"content": None}), False),
        (chat({"role": "assistant", "content": "Hi"}), True),  # a server that carries the role with the token
        (chat({"content": " the"}), True),
        (chat({"reasoning_content": "Let"}), True),  # a reasoning model thinks first
        (chat({"reasoning": "Let"}), True),
        (chat({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}), True),
        (chat({"tool_calls": []}), False),
        (chat({"content": ""}, finish="stop"), True),  # an answer whose first output is its end
        ({"choices": [{"index": 0, "text": " the", "finish_reason": None}]}, True),
        ({"choices": [{"index": 0, "text": "", "finish_reason": None}]}, False),
        ({"choices": [], "usage": {"completion_tokens": 3}}, False),
        ({"error": {"message": "boom"}}, False),
        ([1, 2], False),
        ({"choices": "x"}, False),
        ({"choices": [None, "x", {"delta": "x"}]}, False),
    ],
)
def test_a_chunk_carries_a_token_when_a_choice_has_output(chunk, expected):
    assert carries_token(chunk) is expected


def test_events_are_read_line_by_line_and_what_is_not_json_carries_none():
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    token = b'data: {"choices":[{"index":0,"delta":{"content":" x"}}]}\r\n\r\n'
    assert not events_carry_token(role)
    assert events_carry_token(role + token)
    assert not events_carry_token(b': ping\n\ndata: [DONE]\n\ndata: {"choices": [{"text": "cut')
    assert not events_carry_token(b'data: {"choices": ' + b"[" * 5000 + b"\n\n", bounded_json.loads)
    assert not events_carry_token(b'data: {"choices": [{"text": "\xff"}]}\n\n')
