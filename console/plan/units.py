"""Plain-text renderings of SI figures for the plan report and its warnings (decimal GB/TB, as the method)."""

from __future__ import annotations

DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def data(n: float) -> str:
    """Bytes as B, KB, MB, GB or TB (powers of 1000)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def flops(n: float) -> str:
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} FLOP/s"


def bandwidth(n: float) -> str:
    return f"{n / 1e12:,.2f} TB/s" if n >= 1e12 else f"{n / 1e9:,.0f} GB/s"


def seconds(n: float) -> str:
    return f"{n * 1000:,.1f} ms" if abs(n) < 1 else f"{n:,.2f} s"


def tokens_rate(n: float) -> str:
    return f"{n:,.0f} tok/s" if n >= 100 else f"{n:,.1f} tok/s"


def rps(n: float) -> str:
    return f"{n:,.2f} rps" if n < 10 else f"{n:,.1f} rps"


def count(n: float) -> str:
    return f"{n:,.0f}" if abs(n) >= 100 else f"{n:,.1f}"


def parameters(n: float) -> str:
    return f"{n / 1e9:,.4g}B" if n >= 1e9 else f"{n / 1e6:,.4g}M"


def share(n: float | None) -> str:
    return "n/a" if n is None else f"{n * 100:,.0f}%"


def dollars(n: float) -> str:
    return f"${n:,.2f}"


def slot(weekday: int, hour: int, minute: int = 0) -> str:
    return f"{DAY_NAMES[weekday]} {hour:02d}:{minute:02d}"
