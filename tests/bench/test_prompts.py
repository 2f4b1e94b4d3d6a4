"""Prompts files: JSONL and ShareGPT-style JSON read as written, every bad line named by its number."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.bench.prompts import PromptsError, load_prompts, parse_prompts
from console.errors import UserError


def test_jsonl_prompts_chats_and_max_tokens():
    text = "\n".join(
        [
            json.dumps({"prompt": "hello there", "max_tokens": 12, "id": 7}),
            "",
            json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
        ]
    )
    first, second = parse_prompts(text, "p.jsonl")
    assert (first.prompt, first.max_tokens, first.line) == ("hello there", 12, 1)
    assert second.messages == ({"role": "user", "content": "hi"},)
    assert (second.max_tokens, second.line) == (None, 3)
    # vllm bench serve's custom dataset names the length output_tokens.
    assert parse_prompts('{"prompt": "a", "output_tokens": 9}', "p.jsonl")[0].max_tokens == 9


def test_sharegpt_takes_the_first_turn_and_the_answers_length():
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "why is the sky blue"},
                {"from": "gpt", "value": "light scatters off air"},
            ],
        },
        {"id": "b", "conversations": [{"from": "human", "value": "hi"}]},
    ]
    first, second = parse_prompts(json.dumps(data, indent=1), "sg.json")
    assert (first.prompt, first.max_tokens) == ("why is the sky blue", 4)
    assert (second.prompt, second.max_tokens) == ("hi", None)
    assert second.line > first.line > 1  # each item's own line, as written


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"prompt": "a"}\n{"prompt": "b"\n', "p.jsonl:2: not JSON"),
        ('{"prompt": "a"}\n\n["x"]\n', "p.jsonl:3: got a list"),
        ('{"prompt": ""}\n', "p.jsonl:1: prompt is ''"),
        ('{"prompt": "a", "messages": []}\n', "p.jsonl:1: both prompt and messages"),
        ('{"text": "a"}\n', "p.jsonl:1: neither prompt nor messages"),
        ('{"prompt": "a", "max_tokens": 0}\n', "p.jsonl:1: max_tokens is 0"),
        ('{"prompt": "a", "max_tokens": true}\n', "p.jsonl:1: max_tokens is true/false"),
        ('{"prompt": "a", "max_tokens": 1.5}\n', "p.jsonl:1: max_tokens is 1.5"),
        ('{"messages": [{"content": "x"}]}\n', "p.jsonl:1: messages[0] has no role"),
        ('{"messages": [{"role": "user", "content": 3}]}\n', "p.jsonl:1: messages[0].content is 3"),
        ("", "p.jsonl: no prompts (the file is empty)"),
        ("  \n\n", "p.jsonl: no prompts (the file is empty)"),
        ("[]", "p.jsonl: no prompts (an empty list)"),
        ('[{"prompt": "a"},\n {"prompt": 5}]', "p.jsonl:2: prompt is 5"),
        ('[{"prompt": "a"} {"prompt": "b"}]', "p.jsonl:1: expected ',' or ']'"),
        ('[{"prompt": "a"}] x', "p.jsonl:1: text after the list"),
        ('[{"prompt": "a"},\n', "p.jsonl:2: not JSON"),
        ('[{"conversations": []}]', "p.jsonl:1: conversations is a list"),
        ("[" * 100_000, "JSON nested too deeply"),
    ],
)
def test_a_bad_file_is_one_line_naming_where(text, expected):
    with pytest.raises(PromptsError) as caught:
        parse_prompts(text, "p.jsonl")
    message = str(caught.value)
    assert expected in message
    assert "expected" in message and "\n" not in message


def test_files_that_are_not_prompt_files(tmp_path):
    with pytest.raises(PromptsError, match="no such file"):
        load_prompts(tmp_path / "missing.jsonl")
    with pytest.raises(PromptsError, match="is a directory"):
        load_prompts(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PromptsError, match="not a regular file"):
        load_prompts(fifo)  # refused before it waits for a writer
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(PromptsError, match=r"latin.jsonl:2: not UTF-8"):
        load_prompts(latin)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"prompt": "ok"}\n')
    assert load_prompts(bom)[0].prompt == "ok"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["prompt", "messages", "max_tokens", "role", "content", "conversations", "value", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(_json_values.map(json.dumps) | st.text(max_size=30), min_size=0, max_size=6))
def test_any_file_reads_or_fails_with_one_line(lines):
    """Hostile JSONL: every file either reads, each prompt with its line, or fails naming a line."""
    text = "\n".join(lines)
    try:
        prompts = parse_prompts(text, "h.jsonl")
    except UserError as error:
        message = str(error)
        assert message.startswith("h.jsonl") and "\n" not in message and "expected" in message
        return
    assert prompts
    for prompt in prompts:
        assert (prompt.prompt is None) != (prompt.messages is None)
        assert 1 <= prompt.line <= len(lines)
        assert prompt.max_tokens is None or prompt.max_tokens >= 1


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_as_a_json_list_reads_or_fails_with_one_line(body):
    try:
        parse_prompts("[" + body, "h.json")
    except UserError as error:
        assert str(error).startswith("h.json") and "\n" not in str(error)
