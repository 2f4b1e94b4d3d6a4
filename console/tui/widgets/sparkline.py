"""Sparklines drawn as text, one bar per fixed slice of time.

Bars are buckets aligned to the clock (the worst value in each), so the line
shifts only when a new bucket begins; between shifts only the newest bar can
change, which keeps the bytes sent per refresh small. Unknown values stay blank,
never drawn as 0; so does anything that is not a finite number (NaN, infinities),
and nothing here raises whatever the values.
"""

from __future__ import annotations

import math
from typing import TypeGuard

BARS = "▁▂▃▄▅▆▇█"


def bucketed(
    points: tuple[tuple[float, float | None], ...], width: int, bucket_seconds: float
) -> tuple[float | None, ...]:
    """The worst (largest) value per bucket for the `width` buckets ending with the newest point's."""
    if not finite(bucket_seconds) or bucket_seconds <= 0:
        return ()
    points = tuple((at, value) for at, value in points if finite(at) and math.isfinite(at / bucket_seconds))
    if not points or width <= 0:
        return ()
    newest = math.floor(points[-1][0] / bucket_seconds)
    buckets: dict[int, float] = {}
    for at, value in points:
        index = math.floor(at / bucket_seconds)
        if not finite(value) or newest - index >= width:
            continue
        buckets[index] = max(value, buckets.get(index, value))
    first = max(newest - width + 1, math.floor(points[0][0] / bucket_seconds))
    return tuple(buckets.get(i) for i in range(first, newest + 1))


def spark(values: tuple[float | None, ...], width: int, top: float | None = None) -> str:
    shown = values[-width:] if width > 0 else ()
    known = [v for v in shown if finite(v)]
    ceiling = top if finite(top) else (max(known) if known else 0.0)
    out: list[str] = []
    for value in shown:
        if not finite(value):
            out.append(" ")
        elif ceiling <= 0:
            out.append(BARS[0])
        else:
            ratio = value / ceiling
            level = min(max(ratio, 0.0), 1.0) if math.isfinite(ratio) else 1.0
            out.append(BARS[min(int(level * len(BARS)), len(BARS) - 1)])
    return "".join(out).rjust(width)


def finite(value: object) -> TypeGuard[float]:
    """A number to draw: an int or float that is neither NaN nor infinite."""
    return isinstance(value, (int, float)) and math.isfinite(value)
