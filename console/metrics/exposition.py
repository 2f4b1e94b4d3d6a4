"""A fast reader for the Prometheus text format (0.0.4, and OpenMetrics' sample lines).

It keeps only what capcon needs: samples whose name starts with `vllm:` (or the
`vllm_` spelling that OpenMetrics escaping produces, mapped back to `vllm:`) and
`process_start_time_seconds`. Other families are skipped by one `str.split` on
"\\nvllm", so their lines (and every `# HELP`/`# TYPE` line) never reach Python code.

Series (name plus label text) repeat from scrape to scrape and from replica to
replica, so each distinct series text is parsed and validated once and cached;
the label mappings handed out are shared and read-only.

`parse` never raises. Lines it wanted but could not read are counted in
`Page.errors`; the caller decides what a page with errors is worth.

A page is whole only when its last line ends: every sample line ends with a line
end, so text after the last one (other than blank space or OpenMetrics' `# EOF`) is
a line cut short, e.g. `waiting 12` of `waiting 120`. That line is not read and the
page is marked `cut`: a number cut short is a different, smaller number, never one
to show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

Labels = Mapping[str, str]
Sample = tuple[str, Labels, float]  # (sample name with `vllm:` prefix, labels, value)

PROCESS_START = "process_start_time_seconds"


class ParseError(ValueError):
    """A page that holds no usable vLLM metrics (garbage, truncated, not an exposition)."""


_METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_PAIR = re.compile(r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(?:,|$)')
_LABEL_SET = re.compile(r'(?:[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*(?:,|$))*[ \t]*')
_TIMESTAMP = re.compile(r"-?[0-9]+")
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}

_SKIP: tuple[str, Labels] = ("", MappingProxyType({}))  # a valid series of a family capcon does not read
_series_cache: dict[str, tuple[str, Labels] | None] = {}
_labels_cache: dict[str, Labels | None] = {}  # many families share one label text
_known_names: set[str] = set()
_SERIES_CACHE_LIMIT = 200_000


@dataclass(frozen=True)
class Page:
    samples: tuple[Sample, ...]
    errors: int = 0  # wanted lines that could not be read
    first_error: str = ""  # the first such line, cut short, for the error message
    duplicates: int = 0  # repeated series left out (the first of each was kept)
    cut: bool = False  # the last line has no line end: the page was cut short (that line is not read)


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), "\\" + m.group(1)), value)


def _plain_labels(raw: str) -> Labels | None:
    """The common case quickly: no escapes, no spaces. None means "use the full grammar"."""
    body = raw[:-1] if raw.endswith(",") else raw
    if "\\" in body or not body.endswith('"'):
        return None
    pairs = {}
    for piece in body[:-1].split('",'):
        key, sep, value = piece.partition('="')
        if not sep or '"' in value or not (key.isidentifier() and key.isascii()):
            return None
        pairs[key] = value
    return MappingProxyType(pairs)


def parse_labels(raw: str) -> Labels | None:
    """`a="x",b="y\\"z"` -> read-only {"a": "x", "b": 'y"z'}; None when malformed."""
    if raw in _labels_cache:
        return _labels_cache[raw]
    labels: Labels | None = _plain_labels(raw)
    if labels is None and _LABEL_SET.fullmatch(raw) is not None:
        pairs = {}
        for key, value in _LABEL_PAIR.findall(raw):
            pairs[key] = _unescape(value) if "\\" in value else value
        labels = MappingProxyType(pairs)
    if len(_labels_cache) >= _SERIES_CACHE_LIMIT:
        _labels_cache.clear()
    _labels_cache[raw] = labels
    return labels


def _read_series(line: str) -> tuple[str, Labels] | None:
    """`vllm:x{a="b"}` -> ("vllm:x", {"a": "b"}); _SKIP for other families; None when malformed."""
    brace = line.find("{")
    if brace < 0:
        name, raw = line.strip(), ""
    elif line.endswith("}"):
        name, raw = line[:brace].strip(), line[brace + 1 : -1]
    else:
        return None
    if name not in _known_names:
        if _METRIC_NAME.fullmatch(name) is None:
            return None
        _known_names.add(name)
    if name.startswith("vllm_"):
        name = "vllm:" + name[5:]
    elif not name.startswith("vllm:") and name != PROCESS_START:
        return _SKIP
    labels = parse_labels(raw)
    return None if labels is None else (name, labels)


def _series(short_key: str) -> tuple[str, Labels] | None:
    """Parse and cache one series; `short_key` is its text without the leading "vllm"."""
    if len(_series_cache) >= _SERIES_CACHE_LIMIT:
        _series_cache.clear()
    entry = _series_cache[short_key] = _read_series("vllm" + short_key)
    return entry


def _value(rest: str) -> float:
    """The value after the series, with an optional integer timestamp after it."""
    try:
        return float(rest)
    except ValueError:
        parts = rest.split()
        if len(parts) == 2 and _TIMESTAMP.fullmatch(parts[1]):
            return float(parts[0])
        raise


def _process_start(text: str) -> float | None:
    if text.startswith(PROCESS_START + " "):
        at = 0
    else:
        at = text.find("\n" + PROCESS_START + " ")
        if at < 0:
            return None
        at += 1
    try:
        return _value(text[at + len(PROCESS_START) :].partition("\n")[0])
    except ValueError:
        return None


def whole_lines(text: str) -> tuple[str, bool]:
    """The page up to its last whole line, and whether a line was cut short there (a body cut by a size bound or
    a dropped connection): the unfinished line is not read, its number may be cut short. `# EOF` is no cut."""
    if text.endswith("\n"):
        return text, False
    end = text.rfind("\n") + 1
    tail = text[end:].strip()
    if tail and tail != "# EOF":
        return text[:end], True
    return text, False


def parse(text: str, families: frozenset[str] | None = None) -> Page:
    """Read the wanted samples of a page. Never raises; unreadable wanted lines are counted.

    With `families` (names as the `# HELP` lines spell them), the lines under the
    `# HELP` of any other family are skipped unread: a scraper that needs a quarter
    of vLLM's families need not pay for the rest. Lines before the first `# HELP`
    (or on a page without any) are always read.
    """
    samples: list[Sample] = []
    state: list[Any] = [0, "", 0, set()]  # errors, first error, duplicates, series seen
    text, cut = whole_lines(text)
    if families is None:
        _read_lines(text, samples, state)
    else:
        blocks = text.split("\n# HELP ")
        _read_lines(blocks[0], samples, state)
        for block in blocks[1:]:
            name = block[: block.find(" ")]
            # An exporter that writes OpenMetrics-escaped names says vllm_ in HELP too.
            if name in families or (name.startswith("vllm_") and "vllm:" + name[5:] in families):
                _read_lines(block[block.find("\n") :], samples, state)  # past the HELP text
    start = _process_start(text)
    if start is not None:
        samples.append((PROCESS_START, _SKIP[1], start))
    return Page(tuple(samples), state[0], state[1], state[2], cut)


def _read_lines(text: str, samples: list[Sample], state: list[Any]) -> None:
    append = samples.append
    cache = _series_cache
    seen = state[3]
    # Every sample line of a vLLM family starts right after "\nvllm"; nothing else does.
    for chunk in ("\n" + text).split("\nvllm")[1:]:
        line = chunk.partition("\n")[0]
        close = line.rfind("}")
        if close < 0:
            parts = line.split(None, 1)
            key, rest = (parts[0], parts[1]) if len(parts) == 2 else (line, "")
        else:
            key, rest = line[: close + 1], line[close + 1 :]
        entry = cache[key] if key in cache else _series(key)
        if entry is not None:
            try:
                value = float(rest)
            except ValueError:
                try:
                    value = _value(rest)
                except ValueError:
                    entry = None
        if entry is None:
            state[0] += 1
            state[1] = state[1] or ("vllm" + line)[:80]
        elif entry[0]:
            if key in seen:
                state[2] += 1  # a repeated series: the first one counts, as in Prometheus
                continue
            seen.add(key)
            append((entry[0], entry[1], value))  # type: ignore[possibly-undefined]  # read whenever entry is set


def clear_caches() -> None:
    """Forget every series seen so far (for measuring a first scrape)."""
    _series_cache.clear()
    _labels_cache.clear()
    _known_names.clear()
