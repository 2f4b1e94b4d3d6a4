"""Times people type and read: the one parser for --from, --to and seek, the one way times are shown,
and the durations of the --keep-* options.

Accepted (`parse_when`):

    now                         the given `now`
    -15m  -2h  -3d  -90s  -1w   relative to `now` (a leading + goes forward)
    14:03  14:03:22             today (the day of `now`) in the local zone
    2026-11-30                  midnight, local
    2026-11-30 14:03[:22]       local; a `T` may replace the space
    2026-11-30T14:03:22Z        with Z or an offset (+01:00): that instant
    1764511402[.5]              unix seconds

Local means the machine's zone unless a `zone` is passed (tests, `--tz`). A time must
fall in the years 1970 to 9999: beyond them datetime cannot show it, and no history
file holds it.

Durations (`parse_duration`, `show_duration`: --keep-raw, --keep-minutes) take the same
units as relative times: s, m, h, d, w.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from datetime import UTC, date, datetime, time, tzinfo

EXPECTED = (
    "expected an ISO date-time (2026-11-30 14:03, local unless it ends in Z or +01:00), "
    "HH:MM (today), a relative time (-15m, -2h, -3d), now, or unix seconds"
)

# One table for relative times (-2h) and durations (48h).
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_RELATIVE = re.compile(r"^([+-])\s*(\d+(?:\.\d+)?)\s*([smhdw])$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_UNIX = re.compile(r"^\d+(?:\.\d+)?$")
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", re.IGNORECASE)
EARLIEST = 0.0  # 1970-01-01 00:00 UTC
LATEST = 253_402_300_799.0  # 9999-12-31 23:59:59 UTC


def _local(naive: datetime, zone: tzinfo | None) -> float:
    """A wall-clock time in `zone` (the machine's when None) as unix seconds."""
    if zone is None:
        return naive.astimezone().timestamp()  # astimezone() on a naive time reads it as local
    return naive.replace(tzinfo=zone).timestamp()


def parse_when(text: str, now: float, zone: tzinfo | None = None) -> float:
    """Unix seconds for `text`; ValueError says what was given and what was expected."""
    given = (text or "").strip()
    if not given:
        raise ValueError(f"an empty time; {EXPECTED}")
    try:
        at = _parsed(given, now, zone)
    except (OverflowError, OSError):  # a date beyond what the platform's clock functions take
        at = math.inf
    except ValueError as error:
        if EXPECTED in str(error):
            raise
        at = math.inf  # datetime's own "year 0 is out of range" and the like
    if not (math.isfinite(at) and EARLIEST <= at <= LATEST):
        raise ValueError(f"{given!r} is outside the years 1970 to 9999; {EXPECTED}")
    return at


def _parsed(given: str, now: float, zone: tzinfo | None) -> float:
    lowered = given.lower()
    if lowered == "now":
        return float(now)
    relative = _RELATIVE.match(lowered)
    if relative:
        sign, amount, unit = relative.groups()
        offset = float(amount) * UNITS[unit]
        return float(now) + (offset if sign == "+" else -offset)
    if _UNIX.match(given):
        return float(given)
    clock = _CLOCK.match(given)
    if clock:
        hour, minute, second = int(clock[1]), int(clock[2]), int(clock[3] or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError(f"{given!r} is not a time of day; {EXPECTED}")
        today = datetime.fromtimestamp(now, zone).date() if zone is not None else datetime.fromtimestamp(now).date()  # noqa: DTZ006 - no zone: the machine's
        return _local(datetime.combine(today, time(hour, minute, second)), zone)
    iso = given[:-1] + "+00:00" if given[-1] in "zZ" else given
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        try:
            parsed = datetime.combine(date.fromisoformat(iso), time())
        except ValueError:
            raise ValueError(f"{given!r} is not a time capcon reads; {EXPECTED}") from None
    if parsed.tzinfo is not None:
        return parsed.timestamp()
    return _local(parsed, zone)


def format_when(at: float | None, zone: tzinfo | None = None) -> str:
    """`2026-11-30 14:03:22` in the local zone (or `zone`); unknown as "–"."""
    if at is None or not math.isfinite(at):
        return "–"
    moment = datetime.fromtimestamp(at, zone) if zone is not None else datetime.fromtimestamp(at)  # noqa: DTZ006 - no zone: the machine's
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def iso_when(at: float, zone: tzinfo | None = None) -> str:
    """ISO 8601 with its offset (`2026-11-30T14:03:22+01:00`): for files that scripts read back."""
    moment = datetime.fromtimestamp(at, zone) if zone is not None else datetime.fromtimestamp(at).astimezone()
    return moment.isoformat(timespec="milliseconds" if at != int(at) else "seconds")


def local_zone() -> tzinfo:
    """The machine's time zone with its DST rules (TZ, else /etc/localtime), not just today's offset."""
    from zoneinfo import ZoneInfo  # noqa: PLC0415 - loaded only by the commands that read the machine's zone

    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ValueError, OSError, KeyError):
            pass
    try:
        with open("/etc/localtime", "rb") as file:
            return ZoneInfo.from_file(file, key="localtime")
    except (OSError, ValueError):
        # Today's offset alone. astimezone() gives an aware time, so the None is only in the type.
        fixed = datetime.now().astimezone().tzinfo
        return fixed if fixed is not None else UTC


def zone_named(name: str) -> tzinfo:
    """`--tz`: an IANA zone name, UTC, or `local`; ValueError says what was expected."""
    from console.plan.zones import ZoneNameError, zone_info  # noqa: PLC0415 - the plan's own zone rule

    if name.strip().lower() == "local":
        return local_zone()
    try:
        return zone_info(name.strip())
    except ZoneNameError as error:  # a region ("Europe"), a path, 5,000 characters: one line, never an OSError
        raise ValueError(f"{error.problem}; expected {error.expected}, or local") from None


def parse_duration(text: str) -> float:
    """'48h' -> 172800.0; units s, m, h, d, w. A bare number is refused: 48 what?

    The `type=` of the --keep-* options, hence argparse's error type.
    """
    found = _DURATION.fullmatch(text)
    if not found and text.strip().startswith("-"):
        # `--keep-raw -48h` arrives whole (console.cli.joined_values): say what is wrong with it.
        raise argparse.ArgumentTypeError(
            f"{text!r}: a negative duration; expected a duration longer than zero, like 48h"
        )
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration with a unit, like 30m, 48h, 90d or 2w")
    seconds = float(found.group(1)) * UNITS[found.group(2).lower()]
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration longer than zero, like 48h")
    return seconds


def show_duration(seconds: float) -> str:
    """As people write retention: 48h, 7d, 90d (whole days from three on, hours below), 30m, 90s."""
    if seconds % UNITS["d"] == 0 and seconds >= 3 * UNITS["d"]:
        return f"{seconds / UNITS['d']:g}d"
    for unit in ("h", "m"):
        if seconds >= UNITS[unit] and seconds % UNITS[unit] == 0:
            return f"{seconds / UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"
