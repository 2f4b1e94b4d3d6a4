"""Label values (model names, URLs, error texts) shown literally.

A replica's labels come from whoever runs it: a `model_name` may hold Rich
markup or ANSI escape sequences. Widgets build `rich.text.Text` objects (never
markup strings) from these values, and control characters are shown as visible
escapes so nothing can style, move the cursor or clear the screen.
"""

from __future__ import annotations

from rich.text import Text

from console.fleet.format import middle_cut
from console.text import printable


def literal(value: object, style: str = "") -> Text:
    return Text(printable(value), style=style, no_wrap=True, overflow="ellipsis")


def fit(value: str, width: int, right: bool = False) -> str:
    """Pad or cut to exactly `width` cells (an ellipsis marks a cut)."""
    if len(value) > width:
        value = value[: max(width - 1, 0)] + "…"
    return value.rjust(width) if right else value.ljust(width)


def fit_middle(value: str, width: int) -> str:
    """Cut from the middle, then pad: replica names differ at their ends (host numbers, ports)."""
    return middle_cut(value, width).ljust(width)
