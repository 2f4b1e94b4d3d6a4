"""`capcon history`'s overflow part: per day, how long each mode was in force and what it did.

Read from the gateways' `overflow_tally` events (console/overflow/tally.py); shown under a fleet's
table when its history holds any, so a history without a gateway reads exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import tzinfo
from typing import TYPE_CHECKING

from console.fleet.format import UNKNOWN
from console.fleet.hourly import day_starts
from console.overflow.tally import KIND, DayModes, day_modes
from console.when import iso_when

if TYPE_CHECKING:
    from console.commands.history import FleetReport
    from console.store.database import Store

HEADERS = ("day / mode", "active", "rejected", "timed out", "deferred", "hosted tokens", "hosted $")


def overflow_days(store: Store, reports: Iterable[FleetReport], start: float, end: float) -> dict[str, list[DayModes]]:
    """Each reported fleet's days with tallies in [start, end), on the fleet's clock; fleets without tallies left out."""
    if not end > start:
        return {}
    details: dict[str | None, list[dict | None]] = {}
    for event in store.events(start, end):
        if event.kind == KIND and event.at < end:
            details.setdefault(event.fleet, []).append(event.detail)
    out: dict[str, list[DayModes]] = {}
    for fleet, zone, *_ in reports:
        if fleet in details:
            days = day_modes(details[fleet], day_starts(start, end, zone), end)
            if days:
                out[fleet] = days
    return out


def as_json(days: list[DayModes], zone: tzinfo) -> list[dict]:
    return [
        {
            "start": iso_when(day.start, zone),
            "end": iso_when(day.end, zone),
            "modes": {
                mode: {"seconds": round(t.seconds, 3), **t.counts, "hosted_cost_dollars": t.hosted_cost_dollars}
                for mode, t in day.modes.items()
            },
        }
        for day in days
    ]


def table(days: list[DayModes], zone: tzinfo) -> str:
    """The modes per day, 79 columns wide: a line per day, then a line per mode in force that day."""
    from datetime import datetime

    rows: list[tuple[str, ...] | str] = []
    for day in days:
        rows.append(datetime.fromtimestamp(day.start, zone).strftime("%a %m-%d"))
        for mode, t in sorted(day.modes.items(), key=lambda item: -item[1].seconds):
            cost = UNKNOWN if t.hosted_cost_dollars is None else f"{t.hosted_cost_dollars:.2f}"
            rows.append(
                (
                    f"  {mode}",
                    duration(t.seconds),
                    str(t.counts["rejected"]),
                    str(t.counts["timed_out"]),
                    str(t.counts["deferred"]),
                    str(t.counts["hosted_tokens"]),
                    cost,
                )
            )
    cells = [HEADERS] + [r for r in rows if isinstance(r, tuple)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])])

    out = ["overflow modes per day (gateways' tallies: rejected at once, timed out in queue)", line(HEADERS)]
    out += [row if isinstance(row, str) else line(row) for row in rows]
    return "\n".join(out)


def duration(seconds: float) -> str:
    """42s, 12m, 3h05m: how long a mode was in force."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes}m"
    return f"{minutes // 60}h{minutes % 60:02d}m"
