"""Histograms as small blobs: what makes a raw sample a few hundred bytes instead of a few kilobytes.

A stored histogram keeps everything `histogram_quantile` and the means need: the
bucket counts (against a bucket layout stored once), the count and the sum. The
cumulative counts are written as per-bucket increments in unsigned varints: the
high buckets of a latency histogram hold few or no observations, so most take one
byte. `benchmarks/bench_history.py` measures this against JSON arrays.

    blob = [format byte][layout id][count][sum: 8-byte double][n per-bucket increments]

Format b"v" holds whole counts (what vLLM exposes); b"d" holds float64 counts
for the rare exporter that writes fractions. A missing `_sum` or `_count` is kept
as missing.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable

from console.metrics.vllm import Histogram

WHOLE = 0x76  # "v"
FRACTIONAL = 0x64  # "d"
_DOUBLE = struct.Struct("<d")
_NO_SUM = b"\xff\xff\xff\xff\xff\xff\xff\xff"  # a NaN payload no real sum carries


class CodecError(ValueError):
    """A stored blob that cannot be read back (a damaged or foreign file)."""


def _put(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise CodecError("histogram blob ends inside a number")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _whole(values: Iterable[float]) -> bool:
    # isfinite first: int() of an infinity raises (a store that guards its input never sends one; a caller might).
    return all(math.isfinite(v) and v >= 0 and v == int(v) for v in values)


def encode(histogram: Histogram, layout_id: int) -> bytes:
    counts = histogram.counts
    # Cumulative counts never fall; a scrape that shows them falling (skew) keeps the increment at 0.
    increments, top = [], 0.0
    for c in counts:
        increments.append(max(c - top, 0.0))
        top = max(top, c)
    count = histogram.count
    whole = _whole(increments) and (count is None or _whole([count]))
    out = bytearray([WHOLE if whole else FRACTIONAL])
    _put(out, layout_id)
    if whole:
        _put(out, 0 if count is None else int(count) + 1)  # 0 marks a missing count
    else:
        out += _DOUBLE.pack(math.nan if count is None else count)
    out += _NO_SUM if histogram.sum is None else _DOUBLE.pack(histogram.sum)
    for value in increments:
        if whole:
            _put(out, int(value))
        else:
            out += _DOUBLE.pack(value)
    return bytes(out)


def layout_of(blob: bytes) -> int:
    if not blob or blob[0] not in (WHOLE, FRACTIONAL):
        raise CodecError("not a stored histogram")
    return _get(blob, 1)[0]


def decode(blob: bytes, bounds: tuple[float, ...]) -> Histogram:
    """The histogram in `blob`, whose layout's bounds are `bounds`."""
    try:
        return _decode(blob, bounds)
    except (struct.error, OverflowError):
        # A damaged blob cut inside a double, or a varint too large for a float.
        raise CodecError("histogram blob is damaged") from None


def _decode(blob: bytes, bounds: tuple[float, ...]) -> Histogram:
    if not blob or blob[0] not in (WHOLE, FRACTIONAL):
        raise CodecError("not a stored histogram")
    whole = blob[0] == WHOLE
    _, at = _get(blob, 1)
    if whole:
        stored, at = _get(blob, at)
        count = None if stored == 0 else float(stored - 1)
    else:
        (count,) = _DOUBLE.unpack_from(blob, at)
        at += 8
        count = None if math.isnan(count) else count
    raw_sum = blob[at : at + 8]
    if len(raw_sum) != 8:
        raise CodecError("histogram blob ends inside its sum")
    total = None if raw_sum == _NO_SUM else _DOUBLE.unpack(raw_sum)[0]
    at += 8
    cumulative, running = [], 0.0
    for _ in bounds:
        if whole:
            value, at = _get(blob, at)
        else:
            if at + 8 > len(blob):
                raise CodecError("histogram blob ends inside its buckets")
            (value,) = _DOUBLE.unpack_from(blob, at)
            at += 8
        running += value
        cumulative.append(running)
    if at != len(blob):
        raise CodecError("histogram blob is longer than its layout")
    return Histogram(tuple(bounds), tuple(cumulative), total, count)


def bounds_text(bounds: tuple[float, ...]) -> str:
    """A layout's bounds as stored: `repr` round-trips floats exactly, +Inf as 'inf'."""
    return ",".join("inf" if b == math.inf else repr(b) for b in bounds)


def bounds_from_text(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",")) if text else ()
    except ValueError:
        raise CodecError(f"bucket layout {text[:40]!r} is not a list of numbers") from None
