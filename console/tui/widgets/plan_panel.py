"""Plan beside actual: what the plan expects at this hour next to what the fleet does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from console.fleet import format as fmt
from console.fleet.view import Comparison, FleetView
from console.tui.literal import fit
from console.tui.widgets.diff_text import DiffText

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions

SYMBOLS = {"ok": "✓", "warning": "▲", "critical": "✖", "unknown": "?"}
STYLES = {
    "ok": "plan-panel--ok",
    "warning": "plan-panel--warning",
    "critical": "plan-panel--critical",
    "unknown": "plan-panel--unknown",
}


def _bytes(value: float | None) -> str:
    return fmt.UNKNOWN if value is None else f"{value / 1e9:.1f}GB"


def _money(value: float | None) -> str:
    return fmt.UNKNOWN if value is None else f"${value:.2f}"


def shown(comparison: Comparison, value: float | None) -> str:
    unit = comparison.unit
    if unit == "rps":
        return fmt.rate(value)
    if unit == "share":
        return fmt.share(value)
    if unit == "count":
        return fmt.count(value)
    if unit == "bytes":
        return _bytes(value)
    if unit == "seconds":
        return fmt.seconds(value)
    if unit == "tokens":
        return fmt.tokens(value)
    return _money(value)


class PlanPanel(DiffText):
    COMPONENT_CLASSES = set(STYLES.values())

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None

    def show(self, view: FleetView) -> None:
        lines: tuple[tuple[str, str, str, str], ...]
        if view.plan is None:
            lines = (("unknown", "no plan: pass a plan file to compare with", "", ""),)
        else:
            lines = tuple(
                (c.status, c.label, shown(c, c.actual), "" if c.planned is None else shown(c, c.planned))
                for c in view.comparisons
            )
        if lines == self._shown:
            return
        self._shown = lines
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{'':2}{'plan beside actual':<15}{'now':>8}  {'plan':<8}\n", style="bold")
        for i, (status, label, actual, planned) in enumerate(lines):
            style = self.get_component_rich_style(STYLES[status], partial=True) if self.is_mounted else ""
            text.append(SYMBOLS[status] + " ", style=style)
            if not actual and not planned:
                text.append(label)
            else:
                text.append(f"{fit(label, 15)}{actual:>8}  {planned:<8}")
            if i < len(lines) - 1:
                text.append("\n")
        self.show_text(text)
