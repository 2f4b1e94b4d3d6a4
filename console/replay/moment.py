"""Times typed for a replay (--from, --to, the go-to box), read by the shared parser.

The shared parser (console.when) reads ISO date-times, HH:MM on the day of
`now`, relative times (-5m, +30s) and unix seconds. In the go-to box `now` is the
replay clock, so 14:05 means 14:05 on the day being replayed and -5m five minutes
before the moment shown.
"""

from __future__ import annotations

from console.when import parse_when

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
    return parse_when(text, now)
