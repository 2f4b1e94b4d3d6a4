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

Spans (`parse_span`: --interval, --window, --timeout, --duration, overflow set --for) take ms
as well, and a bare number only where it cannot be misread: an option says up to what a bare
number reads as seconds (`bare_max`), or refuses it. `--interval 2000` meant as milliseconds
would wait 33 minutes; `--for 30` meant as minutes would expire after 30 seconds. Both are
refused with the readings side by side and the unit to write. `show_span` and `in_words`
say a span back as people read it: "30 min", "in 2 h 5 min".
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


# Spans: durations people type as option values, where a bare number is a trap.
SPAN_UNITS = {"ms": 0.001, **UNITS}
_SPAN = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)?", re.IGNORECASE)
SPAN_EXAMPLES = "500ms, 30s, 5m, 2h"


def read_span(text: str) -> tuple[float, str | None]:
    """'5m' -> (300.0, 'm'); '30' -> (30.0, None): seconds and the unit written (None: a bare number).

    ValueError for text that is no span (negative, no digits, an unknown unit). Not bounded.
    """
    found = _SPAN.fullmatch(text.strip())
    if not found:
        shown = _shown_word(text)
        if text.strip().startswith("-"):
            raise ValueError(
                f"{shown}: a negative duration; expected a duration longer than zero, like {SPAN_EXAMPLES}"
            )
        raise ValueError(f"{shown}: not a duration; expected a number with its unit, like {SPAN_EXAMPLES}")
    unit = found.group(2).lower() if found.group(2) else None
    return float(found.group(1)) * SPAN_UNITS[unit or "s"], unit


def parse_span(text: str, high: float, bare_max: float | None = None, low: float = 0.0) -> float:
    """Seconds for `text`, in (low, high]; a bare number reads as seconds only up to `bare_max` (None: never).

    ValueError says what was given and what to write instead; the message starts with the text given.
    """
    seconds, unit = read_span(text)
    shown = _shown_word(text)
    if not math.isfinite(seconds) or seconds > high:
        raise ValueError(f"{shown}: expected at most {show_span(high)}")
    if seconds <= low:
        bound = f"longer than {show_span(low)}" if low > 0 else "longer than zero"
        raise ValueError(f"{shown}: expected a duration {bound}, like {SPAN_EXAMPLES}")
    if unit is None and (bare_max is None or seconds > bare_max):
        raise ValueError(f"{shown}: {bare_span_problem(seconds, bare_max, high)}")
    return seconds


def bare_span_problem(value: float, bare_max: float | None, high: float = math.inf) -> str:
    """Why a bare number `value` is refused, with its readings and the unit to write instead."""
    amount = str(int(value)) if value.is_integer() else f"{value:g}"
    if bare_max is None:
        names = {"s": "seconds", "m": "minutes", "h": "hours"}
        fitting = [unit for unit in names if value * UNITS[unit] <= high] or ["s"]
        written = ", ".join(f"{amount}{unit}" for unit in fitting)
        return f"a number without its unit; expected it written with one: {written} ({', '.join(names[u] for u in fitting)})"
    meant = f"; did you mean {amount}ms ({show_span(value / 1000)})?" if value >= 1 else ""
    return (
        f"{amount} s ({show_span(value)}) without a unit{meant} expected the unit written ({amount}ms or "
        f"{amount}s): a bare number is seconds only up to {bare_max:g}"
    )


def show_span(seconds: float) -> str:
    """As people read a span: 500 ms, 30 s, 5 min, 2 h 5 min, 3 d (rounded to the two largest units)."""
    if not math.isfinite(seconds):
        return f"{seconds} s"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    whole = round(seconds)
    for size, name, small, small_name in ((86400, "d", 3600, "h"), (3600, "h", 60, "min"), (60, "min", 1, "s")):
        if whole >= size:
            big, rest = divmod(whole, size)
            part = rest // small
            return f"{big} {name} {part} {small_name}" if part else f"{big} {name}"
    return f"{whole} s"  # pragma: no cover - every span of a minute or more took a branch above


def in_words(seconds: float) -> str:
    """'in 30 min', 'in 2 h 5 min', 'in under a minute', or 'ago' when `seconds` is negative."""
    if -60 < seconds < 60:
        return "in under a minute" if seconds >= 0 else "just now"
    minutes = show_span(round(abs(seconds) / 60) * 60)  # to the minute: "in 29 min 58 s" is noise
    return f"in {minutes}" if seconds > 0 else f"{minutes} ago"


def expiry_words(at: float, now: float, zone: tzinfo | None = None) -> str:
    """'expires at 14:32 local (in 30 min)'; the date as well when it is not today's, 'expired' when past."""
    if not math.isfinite(at) or not EARLIEST <= at <= LATEST:
        return "expires at an unknown time"
    moment = datetime.fromtimestamp(at, zone) if zone is not None else datetime.fromtimestamp(at)  # noqa: DTZ006 - no zone: the machine's
    today = datetime.fromtimestamp(now, zone) if zone is not None else datetime.fromtimestamp(now)  # noqa: DTZ006 - as above
    shown = moment.strftime("%H:%M" if moment.date() == today.date() else "%Y-%m-%d %H:%M")
    verb = "expires" if at >= now else "expired"
    return f"{verb} at {shown} local ({in_words(at - now)})"


def _shown_word(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}… ({len(text):,} characters)"


def show_duration(seconds: float) -> str:
    """As people write retention: 48h, 7d, 90d (whole days from three on, hours below), 30m, 90s."""
    if seconds % UNITS["d"] == 0 and seconds >= 3 * UNITS["d"]:
        return f"{seconds / UNITS['d']:g}d"
    for unit in ("h", "m"):
        if seconds >= UNITS[unit] and seconds % UNITS[unit] == 0:
            return f"{seconds / UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"
