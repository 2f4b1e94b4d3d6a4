"""Whether a figure meets a target written `>=` or `<=`, with equal passing, as the target reads.

Goodput shares are counts, compared exactly: good / total >= share is good * q >= p * total for the
share as written, p / q (its shortest decimal: 0.9 is 9/10, not the binary float just above it, so
9 good requests of 10 meet a 90 % target). Shares are shown rounded down, so a share that falls is
never printed as the target it missed (98.96 % reads 98.9 %, not 99.0 %).

Latencies are sums and quotients of measured seconds, and a request exactly at its target can land a
rounding error above it ((4.0 - 0.1) / 39 is 0.09999... or 0.10000...1): a figure no further than
LATENCY_TOLERANCE (relative) above its target meets it. A nanosecond in a second is far under any
clock a latency is measured with.
"""

from __future__ import annotations

import math
from fractions import Fraction

LATENCY_TOLERANCE = 1e-9  # relative: floating-point noise, not a measured difference


def written(value: float) -> Fraction:
    """The decimal a float was written as (repr is the shortest decimal that reads back as the same float)."""
    return Fraction(repr(float(value)))


def meets_share(good: int, total: int, share: float) -> bool:
    """good / total >= share, exactly; no requests meet only a share of 0."""
    target = written(share)
    if total <= 0:
        return target <= 0
    return Fraction(good, total) >= target


def within(value: float, target: float) -> bool:
    """value <= target, a rounding error above the target counted as on it."""
    return value <= target + LATENCY_TOLERANCE * abs(target)


def share_places(share: float) -> int:
    """Decimals of a percentage that show `share` as written: 0.99 is 99.0 % (one at least), 0.9905 is 99.05 %."""
    percent = written(share) * 100
    places = 1
    while (percent * 10**places).denominator != 1 and places < 6:
        places += 1
    return places


def percent_text(share: float, places: int = 1) -> str:
    """A target share as a percentage, e.g. `99.0%`."""
    return f"{float(written(share) * 100):.{places}f}%"


def share_down_text(good: int, total: int, places: int = 1) -> str:
    """good / total as a percentage rounded down at `places` decimals: a share under its target never reads as it."""
    if total <= 0:
        return f"{0:.{places}f}%"
    scale = 10**places
    floored = good * 100 * scale // total
    return f"{floored // scale}.{floored % scale:0{places}d}%" if places else f"{floored}%"


def interval_text(low: float, high: float, places: int = 1) -> str:
    """A share's interval as percentages, widened to `places` decimals (low down, high up), never narrower."""
    scale = 10**places
    down = math.floor(low * 100 * scale + 1e-9) / scale
    up = math.ceil(high * 100 * scale - 1e-9) / scale
    return f"{down:.{places}f}%-{up:.{places}f}%"
