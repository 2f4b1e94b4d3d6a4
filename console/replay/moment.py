"""Times typed for a replay (--from, --to, the go-to box), read by the shared parser.

The shared parser (console.store.when) reads ISO date-times, HH:MM on the day of
`now`, relative times (-5m, +30s) and unix seconds. In the go-to box `now` is the
replay clock, so 14:05 means 14:05 on the day being replayed and -5m five minutes
before the moment shown.
"""

from __future__ import annotations

from datetime import datetime

FALLBACK_EXPECTED = "expected unix seconds or an ISO date-time (2026-11-30 14:03, local unless it ends in Z or +01:00)"


# What the go-to box reads (the shared parser's own wording speaks of today and of -15m back only).
GOTO_EXPECTED = (
    "expected 14:05 or 14:05:30 (on the day replayed), an ISO date-time (2026-11-30 14:05, local unless it ends "
    "in Z or +01:00), -5m / +30s (from the moment shown), or unix seconds"
)


def parse_goto(text: str, shown: float) -> float:
    """The go-to box's time: `now` is the moment shown; ValueError says what the box accepts."""
    try:
        return parse_moment(text, shown)
    except ValueError as error:
        said = str(error).split("; expected", 1)[0]
        raise ValueError(f"{said}; {GOTO_EXPECTED}") from None


def parse_moment(text: str, now: float) -> float:
    """Unix seconds for `text`; ValueError says what was given and what was expected."""
    try:
        from console.store.when import parse_when  # noqa: PLC0415 - the shared parser
    except ImportError:
        return _fallback(text)
    return parse_when(text, now)


def _fallback(text: str) -> float:
    given = (text or "").strip()
    try:
        return float(given)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(given[:-1] + "+00:00" if given[-1:] in "zZ" and given else given)
    except ValueError:
        raise ValueError(f"{given!r} is not a time capcon reads; {FALLBACK_EXPECTED}") from None
    return parsed.timestamp() if parsed.tzinfo is not None else parsed.astimezone().timestamp()
