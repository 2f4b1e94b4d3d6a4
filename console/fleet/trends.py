"""A bounded, immutable ring of recent fleet figures: what the sparklines draw and drift rules look back on."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class TrendPoint:
    at: float  # unix time of the figures
    load_rps: float | None = None
    capacity_rps: float | None = None  # planned capacity at that hour
    waiting: float | None = None  # fleet total
    kv_usage: float | None = None  # worst replica, 0-1
    ttft_p95_seconds: float | None = None
    tpot_p95_seconds: float | None = None
    generation_tokens_per_second: float | None = None


SERIES = (
    "load_rps",
    "capacity_rps",
    "waiting",
    "kv_usage",
    "ttft_p95_seconds",
    "tpot_p95_seconds",
    "generation_tokens_per_second",
)


@dataclass(frozen=True)
class Trends:
    span_seconds: float = 600.0  # keep this much history
    limit: int = 600  # and at most this many points, whatever the refresh rate
    points: tuple[TrendPoint, ...] = ()

    def add(self, point: TrendPoint) -> Trends:
        """A new ring with `point` appended; a point not newer than the last (the same scrape seen twice) is ignored.

        A value that is not a finite number is kept as unknown (None): what the ring holds can always be drawn.
        """
        if not _finite(point.at) or (self.points and point.at <= self.points[-1].at):
            return self
        unknown: dict[str, float | None] = {
            name: None for name in SERIES if getattr(point, name) is not None and not _finite(getattr(point, name))
        }
        if unknown:
            # `at` named, so the type checker matches the unknowns with the series' fields (float | None) alone.
            point = replace(point, at=point.at, **unknown)
        oldest = point.at - self.span_seconds
        kept = tuple(p for p in self.points if p.at >= oldest) + (point,)
        return replace(self, points=kept[-self.limit :])

    def series(self, name: str) -> tuple[float | None, ...]:
        if name not in SERIES:
            raise KeyError(name)
        return tuple(getattr(p, name) for p in self.points)

    def value_at(self, name: str, at: float) -> float | None:
        """The value of the newest point taken at or before `at` (None when the ring does not reach back that far)."""
        for point in reversed(self.points):
            if point.at <= at:
                return getattr(point, name)
        return None


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
