"""When the next off-peak window starts: for Retry-After to deferrable work refused during the peak.

From an option (`--off-peak 22:00-06:00`, daily, in the plan's timezone or UTC) or
from the plan's schedule (its idle windows: hours at most half the peak's
interactive rps). No clock is read: `now` is passed in (seconds since the epoch).
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

WEEK = 7 * 86_400.0
DAY = 86_400.0
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


def parse_window(text: str) -> tuple[float, float]:
    """'22:00-06:00' -> (start, end) in seconds of the day; '22:00' alone lasts until 06:00. ValueError otherwise."""
    start_text, dash, end_text = text.strip().partition("-")
    start = _clock(start_text)
    end = _clock(end_text) if dash else 6 * 3600.0
    if start == end:
        raise ValueError("the window starts and ends at the same time")
    return start, end


def _clock(text: str) -> float:
    match = _CLOCK.match(text.strip())
    if match is None:
        raise ValueError(f"{text.strip()!r} is not a time of day HH:MM")
    return int(match[1]) * 3600.0 + int(match[2]) * 60.0


def _local(now: float, zone: str) -> datetime:
    return datetime.fromtimestamp(now, ZoneInfo(zone))


def seconds_to_daily_window(window: tuple[float, float], now: float, zone: str = "UTC") -> float:
    """0 inside the window, else the seconds until it starts."""
    local = _local(now, zone)
    second = local.hour * 3600.0 + local.minute * 60.0 + local.second + local.microsecond / 1e6
    start, end = window
    inside = start <= second < end if start < end else (second >= start or second < end)
    return 0.0 if inside else (start - second) % DAY


def seconds_to_idle_window(windows: tuple[tuple[int, int, int], ...], now: float, zone: str = "UTC") -> float | None:
    """`windows`: (weekday, hour, hours) runs of idle hours (Monday 0); 0 inside one; None when there is none."""
    if not windows:
        return None
    local = _local(now, zone)
    week_second = local.weekday() * DAY + local.hour * 3600.0 + local.minute * 60.0 + local.second
    best = None
    for weekday, hour, hours in windows:
        start = weekday * DAY + hour * 3600.0
        if (week_second - start) % WEEK < hours * 3600.0:
            return 0.0
        wait = (start - week_second) % WEEK
        best = wait if best is None else min(best, wait)
    return best
