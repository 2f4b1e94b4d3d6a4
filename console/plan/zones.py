"""Time zone names, checked before the zone database is asked (plans' `timezone`, `capcon history --tz`).

`ZoneInfo(name)` opens a file named after the zone: "Europe" is a directory there
(IsADirectoryError), 5,000 characters a name too long (OSError), "../x" a path. Each of
those is refused here with one sentence; a well-formed name the database does not hold is
"unknown".
"""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# IANA names: letters, digits, '_', '-', '+' in parts joined by '/' ("America/Port-au-Prince",
# "Etc/GMT+5"); the longest is 32 characters.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
MAX_ZONE_NAME_LENGTH = 64
ZONE_EXPECTED = "an IANA zone name such as UTC or Europe/Warsaw"
_SHOWN = 40


class ZoneNameError(ValueError):
    """`problem` and `expected` apart, so each caller can say them in its own words; str(): both."""

    def __init__(self, problem: str, expected: str = ZONE_EXPECTED):
        super().__init__(f"{problem}; expected {expected}")
        self.problem = problem
        self.expected = expected


def shown_name(name: str) -> str:
    """The name as a message shows it: quoted, escaped, and cut after 40 characters."""
    if len(name) <= _SHOWN:
        return repr(name)
    return f"{name[:_SHOWN]!r}… ({len(name):,} characters)"


def zone_info(name: str) -> ZoneInfo:
    """The zone called `name`; ZoneNameError (a ValueError) for anything else, never an OSError."""
    if len(name) > MAX_ZONE_NAME_LENGTH:
        raise ZoneNameError(
            f"{shown_name(name)} is too long for a time zone name",
            f"{ZONE_EXPECTED} (at most {MAX_ZONE_NAME_LENGTH} characters)",
        )
    if not _ZONE_NAME.fullmatch(name):
        raise ZoneNameError(f"{shown_name(name)} is not a time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory ("Europe"), a file that is no zone
        example = _zone_in_region(name)
        region = f" (a region: name a zone in it, such as {example})" if example else ""
        raise ZoneNameError(f"unknown time zone {shown_name(name)}{region}") from None


def _zone_in_region(name: str) -> str | None:
    """'Europe' -> 'Europe/Amsterdam': a folder of zones in the tzdata package, not a zone; else None."""
    try:
        from importlib import resources  # noqa: PLC0415 - only to word the message

        entries = sorted(
            entry.name
            for entry in resources.files("tzdata.zoneinfo").joinpath(name).iterdir()
            if entry.is_file() and entry.name[:1].isupper()
        )
    except Exception:  # noqa: BLE001 - no tzdata package, not a folder, unreadable: no example
        return None
    return f"{name}/{entries[0]}" if entries else None
