"""What a histogram can say about a percentile target: met, missed, or undetermined, and the share that met it.

A histogram knows how many observations fell at or below each bucket bound, nothing finer. For a target T
between two bounds `lo <= T <= hi`, the requests over T are at least those over `hi` and at most those over
`lo`. The p-th percentile is within T when at most 1 - p of the requests are over T, so:

- missed (a breach) when even the smaller share over T is above 1 - p;
- met when even the larger share is at most 1 - p;
- undetermined otherwise: some spread of the requests inside the bucket meets the target and another misses
  it, and the linear interpolation of `histogram_quantile` would only pick one of them.

A target on a bound (`lo == hi == T`) is judged exactly. The share that met the target (the attainment) is
1 minus the share over it: exact on a bound, a range otherwise. A percentile itself is told as the bucket that
holds its rank, a range where that bucket is wide (`RANGE_RATIO`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

Verdict = Literal["met", "missed", "undetermined"]

# A percentile is shown as its bucket ("50-75 ms") when the bucket's upper bound is more than this many times
# its lower bound: inside a wider bucket the interpolated figure is more precise than what was measured.
RANGE_RATIO = 1.25


@dataclass(frozen=True)
class Buckets:
    """The observations of one histogram over a window: at or below each finite bound, and in all."""

    bounds: tuple[float, ...]  # finite upper bounds, ascending
    cumulative: tuple[float, ...]  # observations at or below each bound (non-decreasing)
    total: float  # every observation (the +Inf bucket)

    def at_or_below(self, bound: float) -> float:
        """Observations at or below `bound`, which is 0, one of the bounds, or +Inf."""
        if bound == math.inf:
            return self.total
        if bound <= 0 and bound not in self.bounds:
            return 0.0
        return self.cumulative[self.bounds.index(bound)]

    def to_json(self) -> dict:
        return {"bounds": list(self.bounds), "cumulative": list(self.cumulative), "total": self.total}

    @classmethod
    def from_json(cls, data: object) -> Buckets | None:
        """The inverse of `to_json`; None for anything that is not a well-formed histogram."""
        if not isinstance(data, Mapping):
            return None
        try:
            bounds = tuple(float(b) for b in data["bounds"])
            cumulative = tuple(float(c) for c in data["cumulative"])
            total = float(data["total"])
        except (KeyError, TypeError, ValueError):
            return None
        return buckets(bounds, cumulative, total)


def buckets(bounds: tuple[float, ...], cumulative: tuple[float, ...], total: float) -> Buckets | None:
    """Buckets held to what a histogram can be: finite ascending bounds, finite counts that never go down and
    never pass the total; None otherwise (such a histogram says nothing to judge by)."""
    values = (*bounds, *cumulative, total)
    if len(bounds) != len(cumulative) or not all(math.isfinite(v) for v in values):
        return None
    if any(b >= c for b, c in pairwise(bounds)):
        return None
    counts = (0.0, *cumulative, total)
    if any(a > b for a, b in pairwise(counts)):
        return None
    return Buckets(bounds, cumulative, total)


def bucket_around(b: Buckets, value: float) -> tuple[float, float]:
    """The bounds either side of `value`: the largest at or below it (0 below the first) and the smallest at or
    above it (+Inf past the last). Both are `value` when it is a bound."""
    lo = max((x for x in b.bounds if x <= value), default=0.0)
    hi = min((x for x in b.bounds if x >= value), default=math.inf)
    return min(lo, value), hi


@dataclass(frozen=True)
class Judgement:
    """A percentile target judged on a window's buckets."""

    verdict: Verdict
    target: float  # seconds
    quantile: float  # 0.95 for a p95 target
    over_low: float  # the share of requests over the target is at least this...
    over_high: float  # ...and at most this (equal when the target is a bound)
    bucket: tuple[float, float]  # the bounds either side of the target (both the target when it is one)

    @property
    def on_bound(self) -> bool:
        return self.bucket[0] == self.bucket[1]

    @property
    def allowed(self) -> float:
        return allowed_share(self.quantile)

    @property
    def attainment(self) -> tuple[float, float]:
        """The share of requests within the target, (at least, at most)."""
        return 1.0 - self.over_high, 1.0 - self.over_low


def allowed_share(quantile: float) -> float:
    """The share of requests a percentile target lets be over it: 0.05 for a p95, as written (1 - 0.95 is
    0.050000000000000044 in floating point, which would let exactly 5 % through on one side and not another)."""
    return round(1.0 - quantile, 12)


def judge(b: Buckets | None, target: float, quantile: float) -> Judgement | None:
    """The target judged on the buckets; None without observations (nothing to judge)."""
    if b is None or not b.total > 0:
        return None
    lo, hi = bucket_around(b, target)
    over_low = (b.total - b.at_or_below(hi)) / b.total
    over_high = (b.total - b.at_or_below(lo)) / b.total
    allowed = allowed_share(quantile)
    verdict: Verdict = "missed" if over_low > allowed else "met" if over_high <= allowed else "undetermined"
    return Judgement(verdict, target, quantile, over_low, over_high, (lo, hi))


def quantile_bucket(b: Buckets | None, quantile: float) -> tuple[float, float] | None:
    """The bucket that holds the percentile's rank: (lower bound, upper bound), +Inf past the last bound; None
    without observations. The percentile lies in it whatever the spread of the requests inside."""
    if b is None or not b.total > 0 or not 0 <= quantile <= 1:
        return None
    rank = quantile * b.total
    lower = 0.0
    for bound, count in zip(b.bounds, b.cumulative):
        if count >= rank and count > 0:
            return lower, bound
        lower = bound
    return lower, math.inf


def is_wide(bucket: tuple[float, float]) -> bool:
    """Whether a percentile in this bucket is shown as the range rather than one figure (`RANGE_RATIO`)."""
    lo, hi = bucket
    return hi > RANGE_RATIO * lo
