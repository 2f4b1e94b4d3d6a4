"""How figures are shown: one place for units and rounding, shared by `--once` and the TUI.

Values arrive in SI units (seconds, tokens, per second, 0-1 fractions). Unknown
(None) is shown as "–", never as 0; an unknown age or state as "?".
"""

from __future__ import annotations

import math

UNKNOWN = "–"
UNKNOWN_AGE = "?"

# Severity as text as well as colour: the state words an operator reads.
STATE_LABELS = {
    "up": "up",
    "down": "DOWN",
    "timeout": "TIMEOUT",
    "bad_payload": "BAD PAGE",
    "restarted": "RESTARTED",
    "stale": "STALE",
    "unknown": "?",
}


def _known(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def compact(value: float | None) -> str:
    """Counts and rates: 0.42, 3.1, 12, 1.2k, 3.4M."""
    if not _known(value):
        return UNKNOWN
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:.1f}M"
    if size >= 1e4:
        return f"{value / 1e3:.0f}k"
    if size >= 1e3:
        return f"{value / 1e3:.1f}k"
    if size >= 100 or value == int(value):
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def rate(value: float | None) -> str:
    return compact(value)


def count(value: float | None) -> str:
    """Gauges of requests: whole numbers."""
    return UNKNOWN if not _known(value) else f"{value:.0f}"


def share(value: float | None) -> str:
    """A 0-1 fraction as a percentage."""
    return UNKNOWN if not _known(value) else f"{value * 100:.0f}%"


def seconds(value: float | None) -> str:
    """Latencies: 4ms, 230ms, 1.25s, 42s, 3.5m."""
    if not _known(value):
        return UNKNOWN
    if math.isinf(value):
        return "∞"
    if value < 1:
        return f"{value * 1000:.0f}ms"
    if value < 10:
        return f"{value:.2f}s"
    if value < 120:
        return f"{value:.0f}s"
    return f"{value / 60:.1f}m"


def tokens(value: float | None) -> str:
    return compact(value)


def age(value: float | None) -> str:
    """Data age: 0s, 12s, 3m, 2h."""
    if not _known(value):
        return UNKNOWN_AGE
    value = max(value, 0.0)
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    return f"{value / 3600:.0f}h"


def state(value: str | None) -> str:
    return STATE_LABELS.get(value or "unknown", value or UNKNOWN_AGE)


def window(value: float) -> str:
    """10 s, 1 min, 5 min."""
    if value < 60:
        return f"{value:g} s"
    if value < 3600:
        return f"{value / 60:g} min"
    return f"{value / 3600:g} h"
