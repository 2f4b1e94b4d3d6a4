"""How figures are shown: one place for units and rounding, shared by `--once` and the TUI.

Values arrive in SI units (seconds, tokens, per second, 0-1 fractions). Unknown
(None) is shown as "–", never as 0; an unknown age or state as "?".
"""

from __future__ import annotations

import math

from console.metrics.figures import ReplicaState

UNKNOWN = "–"
UNKNOWN_AGE = "?"

# Severity as text as well as colour: the state words an operator reads.
STATE_LABELS: dict[str, str] = {
    ReplicaState.UP: "up",
    ReplicaState.DOWN: "DOWN",
    ReplicaState.TIMEOUT: "TIMEOUT",
    ReplicaState.BAD_PAYLOAD: "BAD PAGE",
    ReplicaState.RESTARTED: "RESTARTED",
    ReplicaState.STALE: "STALE",
    ReplicaState.UNKNOWN: "?",
}


def compact(value: float | None) -> str:
    """Counts and rates: 0.42, 3.1, 12, 1.2k, 3.4M, 9.1G, 2.0T, 1.0e+18; not a finite number: unknown."""
    if value is None or not math.isfinite(value):
        return UNKNOWN
    size = abs(value)
    if size >= 1e15:
        return f"{value:.1e}"  # no row is that wide in digits
    if size >= 1e12:
        return f"{value / 1e12:.1f}T"
    if size >= 1e9:
        return f"{value / 1e9:.1f}G"
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
    if value is None or not math.isfinite(value):
        return UNKNOWN
    return f"{value:.0f}" if abs(value) < 1e6 else compact(value)


def share(value: float | None) -> str:
    """A 0-1 fraction as a percentage."""
    if value is None or not math.isfinite(value) or not math.isfinite(value * 100):
        return UNKNOWN
    percent = value * 100
    return f"{percent:.0f}%" if abs(percent) < 1e6 else f"{compact(percent)}%"


def seconds(value: float | None) -> str:
    """Latencies: 4ms, 230ms, 1.25s, 42s, 3.5m."""
    if value is None or math.isnan(value):
        return UNKNOWN
    if math.isinf(value):
        return "∞" if value > 0 else UNKNOWN
    if value < 1:
        return f"{value * 1000:.0f}ms" if math.isfinite(value * 1000) else UNKNOWN
    if value < 10:
        return f"{value:.2f}s"
    if value < 120:
        return f"{value:.0f}s"
    if value < 1e5:
        return f"{value / 60:.1f}m"
    return f"{compact(value / 3600)}h"


def seconds_range(low: float, high: float) -> str:
    """A latency known as a bucket: 50-75ms, 750ms-1.00s, >2.50s past the last bound."""
    if math.isinf(high):
        return f">{seconds(low)}"
    if low < 1 and high < 1:
        return f"{low * 1000:.0f}-{seconds(high)}"
    return f"{seconds(low)}-{seconds(high)}"


def percent(value: float) -> str:
    """A share in words' percent, without the sign: 5, 3.1, 0.2, 99.9; never rounded to 0 or 100 when it is not."""
    digits = 1
    shown = f"{value * 100:.1f}".removesuffix(".0")
    while shown in ("0", "100") and 0 < value < 1 and digits < 9:
        digits += 1
        shown = f"{value * 100:.{digits}f}".rstrip("0").rstrip(".")
    return shown


def tokens(value: float | None) -> str:
    return compact(value)


def age(value: float | None) -> str:
    """Data age: 0s, 12s, 3m, 2h."""
    if value is None or not math.isfinite(value):
        return UNKNOWN_AGE
    value = max(value, 0.0)
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    return f"{value / 3600:.0f}h"


def state(value: str | None) -> str:
    return STATE_LABELS.get(value or ReplicaState.UNKNOWN, value or UNKNOWN_AGE)


def window(value: float) -> str:
    """10 s, 1 min, 5 min."""
    if value < 60:
        return f"{value:g} s"
    if value < 3600:
        return f"{value / 60:g} min"
    return f"{value / 3600:g} h"


_SEPARATORS = ".:-_/@"


def short_names(names: list[str] | tuple[str, ...], width: int) -> dict[str, str]:
    """Each name in at most `width` cells, keeping the part that tells it from the others.

    Replica names of one fleet share a prefix and a suffix (`10.0.0.11:8000`, `10.0.0.12:8000`): cutting
    them in the middle makes them all alike. The common prefix and suffix, taken at separators so a
    differing number stays whole, are dropped first ("…11:8000"); what differs is kept, then as much of
    the suffix as fits. Names that already fit are shown whole.
    """
    names = list(dict.fromkeys(names))
    if width <= 1 or all(len(n) <= width for n in names):
        return {n: n for n in names}
    if len(names) < 2:
        return {n: middle_cut(n, width) for n in names}
    prefix = _common_prefix(names)
    suffix = _common_suffix([n[len(prefix) :] for n in names])
    shown = {}
    for name in names:
        core = name[len(prefix) : len(name) - len(suffix)]
        lead = "…" if prefix else ""
        if len(name) <= width:
            shown[name] = name
        elif len(lead + core + suffix) <= width:
            # Room left: the end of the prefix back, from a separator on ("…0.11:28100", not "…11:28100").
            shown[name] = lead + _tail_that_fits(prefix, width - len(lead + core + suffix)) + core + suffix
        elif len(lead + core) + 1 <= width and suffix:
            # Part of the suffix: what fits of it, cut with an ellipsis.
            room = width - len(lead + core)
            shown[name] = lead + core + (suffix[: room - 1] + "…" if room < len(suffix) else suffix)
        else:
            shown[name] = middle_cut(lead + core, width)
    return shown


def _tail_that_fits(prefix: str, room: int) -> str:
    """The longest end of `prefix` within `room` cells that starts just after a separator (or is all of it)."""
    for start in range(max(len(prefix) - room, 0), len(prefix)):
        if start == 0 or prefix[start - 1] in _SEPARATORS:
            return prefix[start:]
    return ""


def middle_cut(value: str, width: int) -> str:
    """At most `width` cells, cut in the middle with an ellipsis (the ends of a name tell it apart)."""
    if len(value) <= width:
        return value
    head = (width - 1) // 2
    tail = width - 1 - head
    return value[:head] + "…" + (value[-tail:] if tail else "")


def _common_prefix(names: list[str]) -> str:
    first, last = min(names), max(names)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    common = first[:size]
    if all(len(n) == size for n in names):
        return ""  # identical names: nothing differs, keep them whole
    # Back to just after a separator, so "10.0.0.1" of .11 and .12 keeps "11" and "12" whole.
    while common and common[-1] not in _SEPARATORS:
        common = common[:-1]
    return common


def _common_suffix(rests: list[str]) -> str:
    reversed_rests = [r[::-1] for r in rests]
    common = _common_prefix(reversed_rests)[::-1] if reversed_rests else ""
    # The reversed prefix ends just after a separator; in reading order the suffix starts with it.
    return common
