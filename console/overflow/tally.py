"""What each overflow mode did, period by period: the gateway's tallies and their sums per day.

A gateway run with --db closes a period every minute, at each switch and at stop, and writes it as an
`overflow_tally` event: the mode, how long it was in force, and what the gateway answered meanwhile
(local, hosted, rejected, timed out, deferred, hosted tokens and their cost). `Tally` keeps the open
period; `day_modes` sums recorded periods per day and mode for `capcon history`.

Pure: times are passed in, the history file is read by the caller.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

KIND = "overflow_tally"
COUNTS = ("local", "hosted", "rejected", "timed_out", "deferred", "hosted_tokens")
MODES = ("pass", "bounded_queue", "hosted", "defer")


class Tally:
    """The open period of one gateway: its mode, since when, and the counters as they stood then."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.since = 0.0
        self._base: dict[str, float | None] = {}

    def begin(self, at: float, mode: str, totals: Mapping[str, float | None]) -> None:
        self.mode, self.since, self._base = mode, at, dict(totals)

    def close(self, at: float, totals: Mapping[str, float | None]) -> dict | None:
        """The period from `since` to `at` as an event's detail; None if no period is open or nothing passed."""
        if self.mode is None:
            return None
        seconds = max(0.0, at - self.since)
        counts = {name: int((totals.get(name) or 0) - (self._base.get(name) or 0)) for name in COUNTS}
        cost_now, cost_then = totals.get("hosted_cost_dollars"), self._base.get("hosted_cost_dollars")
        cost = None if cost_now is None else round(cost_now - (cost_then or 0.0), 6)
        if seconds < 0.001 and not any(counts.values()):  # a switch right at a period's close: nothing to say
            return None
        return {
            "mode": self.mode,
            "start": self.since,
            "end": at,
            "seconds": round(seconds, 3),
            **counts,
            "hosted_cost_dollars": cost,
        }


@dataclass
class ModeTotals:
    seconds: float = 0.0  # the longest any one gateway had the mode in force that day
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    hosted_cost_dollars: float | None = None  # None: no price known for any of its hosted tokens


@dataclass(frozen=True)
class DayModes:
    start: float
    end: float
    modes: dict[str, ModeTotals]


def period(detail: object) -> dict | None:
    """A recorded tally checked field by field (the file may be old, damaged or written by hand); None if unusable."""
    if not isinstance(detail, dict) or detail.get("mode") not in MODES:
        return None
    start, end, seconds = detail.get("start"), detail.get("end"), detail.get("seconds")
    if not (_finite(start) and _finite(end) and _finite(seconds)) or seconds < 0:
        return None
    out = {"mode": detail["mode"], "start": float(start), "end": float(end), "seconds": float(seconds)}
    for name in COUNTS:
        value = detail.get(name, 0)
        out[name] = int(value) if _finite(value) and value >= 0 else 0
    cost = detail.get("hosted_cost_dollars")
    out["hosted_cost_dollars"] = float(cost) if _finite(cost) and cost >= 0 else None
    out["gateway"] = str(detail.get("gateway", ""))
    return out


def day_modes(details: Iterable[object], day_starts: Sequence[float], end: float) -> list[DayModes]:
    """Per day (the `day_starts` given, the last one ending at `end`): each mode's time and what it did.

    A period counts on the day it started (periods are a minute at most, switches and stops aside).
    Counts add up over gateways; a mode's time is the longest any one gateway had it, not their sum.
    """
    per_gateway: list[dict[str, dict[str, float]]] = [{} for _ in day_starts]
    days = [
        DayModes(start, day_starts[i + 1] if i + 1 < len(day_starts) else end, {}) for i, start in enumerate(day_starts)
    ]
    for detail in details:
        p = period(detail)
        if p is None or not day_starts or p["start"] < day_starts[0] or p["start"] >= end:
            continue
        i = bisect_right(day_starts, p["start"]) - 1
        totals = days[i].modes.setdefault(p["mode"], ModeTotals())
        for name in COUNTS:
            totals.counts[name] += p[name]
        if p["hosted_cost_dollars"] is not None:
            totals.hosted_cost_dollars = (totals.hosted_cost_dollars or 0.0) + p["hosted_cost_dollars"]
        seconds = per_gateway[i].setdefault(p["mode"], {})
        seconds[p["gateway"]] = seconds.get(p["gateway"], 0.0) + p["seconds"]
        totals.seconds = max(seconds.values())
    return [day for day in days if day.modes]


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
