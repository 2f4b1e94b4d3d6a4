"""Values made safe to store and to write out: strict JSON, valid UTF-8, no impossible numbers.

One rule everywhere a figure or a text leaves the program (the history file, `history --json`,
`export`, `watch --once --json`):

- a float that is NaN or infinite is unknown: `null` in JSON (None), NULL in the file, an empty
  csv cell. JSON written here never holds `NaN` or `Infinity` (which strict parsers refuse);
- text that cannot be encoded as UTF-8 (a lone surrogate: a byte that was not UTF-8 in a command
  line argument or on a replica's page, which Python keeps as '\\udcff') is written with that byte
  as `\\xff`, the rest unchanged, instead of failing the write.

    dumps(document, indent=2)   # json.dumps with both rules, allow_nan=False
    strict(value)               # the same rules on a value, at any depth (dict keys too)
    stored(value)               # for the file: also drops map entries whose value is not finite
    loads(text)                 # JSON read back from a file written by an older capcon:
                                # NaN / Infinity become None in lists, and are dropped from maps
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TypeVar

__all__ = ["dumps", "finite", "loads", "stored", "strict", "text"]

T = TypeVar("T")


def finite(value: T) -> T | None:
    """`value`, or None when it is a float that is NaN or infinite (an int or None passes as is)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def text(value: str) -> str:
    """`value` as valid UTF-8 text: undecodable bytes kept as surrogates come out as `\\xNN`."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        # Surrogates U+DC80..U+DCFF stand for the bytes 0x80..0xFF (surrogateescape): show those bytes.
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")  # another lone surrogate: \udXXX


def strict(value: object) -> object:
    """Strict JSON values: NaN and infinities become None, text valid UTF-8, tuples lists, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {text(str(key)): strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(item) for item in value]
    return value


def stored(value: object) -> object:
    """What goes into the file: as `strict`, but a map entry whose value is not a finite number is left
    out (a per-engine KV usage of NaN is no engine reading, not an engine reading None)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {
            text(str(key)): stored(item)
            for key, item in value.items()
            if not (isinstance(item, float) and not math.isfinite(item))
        }
    if isinstance(value, (list, tuple)):
        return [stored(item) for item in value]
    return value


def dumps(
    value: object,
    *,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    default: Callable[[object], object] | None = None,
) -> str:
    """json.dumps of `strict(value)`; never writes NaN or Infinity (allow_nan=False)."""
    return json.dumps(
        strict(value), indent=indent, separators=separators, sort_keys=sort_keys, default=default, allow_nan=False
    )


class _NotFinite:
    """What `NaN`, `Infinity` and `-Infinity` read as, until their container decides (see `loads`)."""


_NOT_FINITE = _NotFinite()


def _without_constants(value: object) -> object:
    if value is _NOT_FINITE:
        return None
    if isinstance(value, dict):
        return {key: _without_constants(item) for key, item in value.items() if item is not _NOT_FINITE}
    if isinstance(value, list):
        return [_without_constants(item) for item in value]
    return value


def loads(data: str | bytes) -> object:
    """JSON as stored (possibly by a capcon that wrote NaN): non-finite numbers never come back. A map
    leaves such an entry out, a list holds None in its place. The common case stays json.loads' own speed."""
    seen: list[str] = []

    def constant(name: str) -> _NotFinite:
        seen.append(name)
        return _NOT_FINITE

    found = json.loads(data, parse_constant=constant)
    return _without_constants(found) if seen else found
