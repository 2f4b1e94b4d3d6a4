"""The team's own prompts for `capcon bench`: JSONL (one request a line) or ShareGPT-style JSON.

JSONL: each line a JSON object with `prompt` (text) or `messages` (a chat: a list of
objects with `role` and `content`), optionally `max_tokens` (or `output_tokens`, as
vLLM's custom dataset names it); other keys are ignored,
blank lines too. ShareGPT: a JSON list of objects whose `conversations` hold turns
(`from`, `value`); the first turn is the prompt and the length of the second (in
words) its max_tokens, as vLLM's benchmark replays it. A JSON list of JSONL-style
objects is read too.

Every problem is a PromptsError naming the file and line ("FILE:LINE: what; expected
..."): a line that cannot be read is never skipped, so a benchmark replays exactly
the file it was given.

Without a file, `capcon bench` replays `sample_prompts.jsonl` beside this module (written by
scripts/sample_prompts.py): a mix of chats and completions to try the command on, not anyone's
traffic, and every report says so.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from console.errors import UserError

MAX_PROMPTS_BYTES = 1024**3  # a large ShareGPT export is about 700 MB
MAX_PROMPTS = 1_000_000
MAX_TOKENS_LIMIT = 1_000_000
_SHOWN = 40
EXPECTED_LINE = 'a JSON object with "prompt" (text) or "messages" (a list of role/content objects)'
SAMPLE_FILE = "sample_prompts.jsonl"  # package data of console.bench


class PromptsError(UserError):
    """A prompts file that cannot be replayed as written."""


@dataclass(frozen=True)
class BenchPrompt:
    """One request to replay: a text prompt or a chat, and the answer length to ask for (None: the default)."""

    prompt: str | None = None
    messages: tuple[dict, ...] | None = None
    max_tokens: int | None = None
    line: int = 0

    @property
    def words(self) -> int:
        """Words of the prompt (chat: of every message): a tokenizer-free size for reports."""
        if self.prompt is not None:
            return len(self.prompt.split())
        return sum(len(_content_text(m.get("content")).split()) for m in self.messages or ())


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}… ({len(text):,} characters)"


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return _shown(value)


def _max_tokens(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS_LIMIT:
        raise PromptsError(f"{where}: max_tokens is {_kind(value)}; expected a whole number 1-{MAX_TOKENS_LIMIT:,}")
    return value


def _messages(value: object, where: str) -> tuple[dict, ...]:
    expected = 'a non-empty list of objects with "role" and "content" (text)'
    if not isinstance(value, list) or not value:
        raise PromptsError(f"{where}: messages is {_kind(value)}; expected {expected}")
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise PromptsError(f"{where}: messages[{index}] has no role; expected {expected}")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise PromptsError(f"{where}: messages[{index}].content is {_kind(content)}; expected {expected}")
    return tuple(value)


def _sharegpt(item: dict, where: str) -> BenchPrompt:
    turns = item["conversations"]
    expected = 'conversations: a list of turns with "value" (text), the first one the prompt'
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], dict):
        raise PromptsError(f"{where}: conversations is {_kind(turns)}; expected {expected}")
    first = turns[0].get("value")
    if not isinstance(first, str) or not first.strip():
        raise PromptsError(f"{where}: conversations[0].value is {_kind(first)}; expected {expected}")
    answer = turns[1].get("value") if len(turns) > 1 and isinstance(turns[1], dict) else None
    words = len(answer.split()) if isinstance(answer, str) else 0
    return BenchPrompt(prompt=first, max_tokens=min(words, MAX_TOKENS_LIMIT) or None, line=0)


def read_item(item: object, where: str, line: int) -> BenchPrompt:
    """One request from a decoded JSON value; PromptsError naming `where` if it is none."""
    if not isinstance(item, dict):
        raise PromptsError(f"{where}: got {_kind(item)}; expected {EXPECTED_LINE}")
    if "conversations" in item and "prompt" not in item and "messages" not in item:
        found = _sharegpt(item, where)
        return BenchPrompt(prompt=found.prompt, max_tokens=found.max_tokens, line=line)
    has_prompt, has_messages = "prompt" in item, "messages" in item
    if has_prompt == has_messages:
        problem = "both prompt and messages" if has_prompt else "neither prompt nor messages"
        raise PromptsError(f"{where}: {problem}; expected {EXPECTED_LINE}, one of the two")
    # `output_tokens` is what vllm bench serve's custom dataset calls it: its files replay here unchanged.
    length_key = "max_tokens" if item.get("max_tokens") is not None else "output_tokens"
    max_tokens = _max_tokens(item[length_key], where) if item.get(length_key) is not None else None
    if has_prompt:
        prompt = item["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise PromptsError(f"{where}: prompt is {_kind(prompt)}; expected non-empty text")
        return BenchPrompt(prompt=prompt, max_tokens=max_tokens, line=line)
    return BenchPrompt(messages=_messages(item["messages"], where), max_tokens=max_tokens, line=line)


def _decode_error(error: json.JSONDecodeError) -> str:
    return f"not JSON ({error.msg} at column {error.colno})"


def parse_prompts(text: str, source: str) -> list[BenchPrompt]:
    """The requests written in `text` (JSONL, or a JSON list); `source` names the file in errors."""
    stripped = text.lstrip()
    if not stripped:
        raise PromptsError(f"{source}: no prompts (the file is empty); expected {EXPECTED_LINE} on each line")
    out = _parse_list(text, source) if stripped.startswith("[") else _parse_lines(text, source)
    if not out:
        raise PromptsError(f"{source}: no prompts (an empty list); expected at least one request")
    return out


def _parse_lines(text: str, source: str) -> list[BenchPrompt]:
    out: list[BenchPrompt] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{source}:{number}"
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as error:
            raise PromptsError(f"{where}: {_decode_error(error)}; expected {EXPECTED_LINE}") from None
        except RecursionError:
            raise PromptsError(f"{where}: JSON nested too deeply; expected {EXPECTED_LINE}") from None
        out.append(read_item(item, where, number))
        if len(out) > MAX_PROMPTS:
            raise PromptsError(f"{where}: more than {MAX_PROMPTS:,} prompts; expected at most {MAX_PROMPTS:,}")
    return out


def _parse_list(text: str, source: str) -> list[BenchPrompt]:
    """A JSON list read item by item, so each problem names the line its item starts on."""
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    out: list[BenchPrompt] = []

    def line_at(index: int) -> int:
        return text.count("\n", 0, index) + 1

    def skip_blank(index: int) -> int:
        while index < len(text) and text[index] in " \t\r\n":
            index += 1
        return index

    position = skip_blank(position)
    if position < len(text) and text[position] == "]":
        return out
    while True:
        where = f"{source}:{line_at(position)}"
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise PromptsError(
                f"{source}:{error.lineno}: {_decode_error(error)}; expected a JSON list of requests"
            ) from None
        except RecursionError:
            raise PromptsError(f"{where}: JSON nested too deeply; expected a JSON list of requests") from None
        out.append(read_item(item, where, line_at(position)))
        if len(out) > MAX_PROMPTS:
            raise PromptsError(f"{where}: more than {MAX_PROMPTS:,} prompts; expected at most {MAX_PROMPTS:,}")
        position = skip_blank(position)
        following = text[position : position + 1]
        if following == ",":
            position = skip_blank(position + 1)
            continue
        if following == "]":
            if text[position + 1 :].strip():
                raise PromptsError(f"{source}:{line_at(position)}: text after the list; expected one JSON list")
            return out
        raise PromptsError(
            f"{source}:{line_at(position)}: expected ',' or ']' between requests; "
            f"got {_kind(following or 'the end of the file')}"
        )


def load_prompts(path: str | Path) -> list[BenchPrompt]:
    """The requests in the file at `path`: a regular UTF-8 file of at most MAX_PROMPTS_BYTES."""
    source = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise PromptsError(f"{source}: no such file; expected a prompts file (JSONL or JSON)") from None
    except IsADirectoryError:
        raise PromptsError(f"{source}: is a directory; expected a prompts file (JSONL or JSON)") from None
    except ValueError:
        raise PromptsError(f"{source}: not a file name (it holds a NUL character); expected a prompts file") from None
    except OSError as error:
        raise PromptsError(f"{source}: cannot be read ({error.strerror}); expected a readable prompts file") from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        what = "is a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise PromptsError(f"{source}: {what}; expected a prompts file (JSONL or JSON)")
    with os.fdopen(descriptor, "rb") as handle:
        if info.st_size > MAX_PROMPTS_BYTES:
            raise PromptsError(f"{source}: larger than 1 GB; expected a prompts file of at most 1 GB")
        try:
            data = handle.read(MAX_PROMPTS_BYTES + 1)
        except OSError as error:
            raise PromptsError(
                f"{source}: cannot be read ({error.strerror}); expected a readable prompts file"
            ) from None
    if len(data) > MAX_PROMPTS_BYTES:
        raise PromptsError(f"{source}: larger than 1 GB; expected a prompts file of at most 1 GB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise PromptsError(f"{source}:{line}: not UTF-8 text; expected a prompts file (JSONL or JSON)") from None
    return parse_prompts(text, source)


def load_sample() -> list[BenchPrompt]:
    """The built-in sample's requests (package data: read where the package is, zipped or not)."""
    text = resources.files("console.bench").joinpath(SAMPLE_FILE).read_text(encoding="utf-8")
    return parse_prompts(text, f"built-in {SAMPLE_FILE}")


def sample_words(count: int) -> str:
    """How every report names the sample: what it is, and what it is not."""
    return f"built-in sample ({count:,} prompts), not your traffic"
