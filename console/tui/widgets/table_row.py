"""One line of the fleet table: a widget of its own that repaints only when its shown text changes.

A DataTable rewrites its whole visible region on every cell update; rows as
widgets keep the bytes sent over SSH to the lines that really changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text

from console.fleet.columns import CONSOLE_BY_KEY
from console.fleet.view import Row
from console.text import printable
from console.tui.literal import fit, fit_middle
from console.tui.widgets.diff_text import DiffText

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions

WIDTHS = {
    "name": 12,
    "state": 9,
    "rps": 6,
    "prompt": 8,
    "gen": 8,
    "run": 4,
    "wait": 5,
    "kv": 5,
    "preempt": 6,
    "ttft50": 7,
    "ttft": 7,
    "tpot": 7,
    "e2e": 7,
    "queue": 8,
    "prefix": 7,
    "sm": 5,
    "tensor": 7,
    "dram": 5,
    "fb": 8,
}
BADGE_WIDTH = 7
# Severity as text as well as colour. "pend": a condition holds, inside its minimum duration; "over": a cell is
# over its limit now, with no flag or pending condition on this row (a fleet-wide SLO breach, say).
BADGES = {
    "critical": "✖ CRIT",
    "warning": "▲ WARN",
    "info": "● info",
    "pending": "… pend",
    "over": "! over",
    "ok": "✓ ok",
    "unknown": "? ----",
}
OVER_MARK = "!"  # in the gap after a cell over its limit: readable without colour, and in a pasted copy


def cell(row: Row, key: str) -> str:
    column = CONSOLE_BY_KEY[key]
    shown = column.show(row.figures, row.gpu)
    return printable(shown) if column.unit == "text" else shown  # a replica's name: anyone's text


def badge_style_name(row_mark: str, over: tuple[tuple[str, str], ...]) -> str:
    """The component class of a badge: "over" takes the colour of its worst cell."""
    if row_mark == "over":
        return "critical" if any(s == "critical" for _, s in over) else "warning"
    return row_mark


class TableRow(DiffText):
    """A replica, the fleet total, or the header line; only changed cells reach the terminal."""

    COMPONENT_CLASSES = {
        "table-row--critical",
        "table-row--warning",
        "table-row--info",
        "table-row--pending",
        "table-row--ok",
        "table-row--unknown",
        "table-row--cell-critical",
        "table-row--cell-warning",
        "table-row--selected-mark",
    }

    def __init__(self, key: str, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self.key = key
        self._shown: tuple | None = None
        self._held: tuple | None = None  # the latest figures of a row out of view, shown when it scrolls in
        self._unstyled: tuple | None = None  # what was shown before the row was mounted
        self._can_style = False
        self._badge_styles: dict[str, Style] = {}  # looked up once: the theme does not change under a row

    def _style(self, name: str) -> Style:
        if name not in self._badge_styles:
            self._badge_styles[name] = self.get_component_rich_style(f"table-row--{name}", partial=True)
        return self._badge_styles[name]

    def show(
        self,
        badge: str,
        cells: tuple[str, ...],
        columns: tuple[str, ...],
        selected: bool = False,
        over: tuple[tuple[str, str], ...] = (),
        name_width: int = WIDTHS["name"],
    ) -> None:
        shown = (badge, cells, columns, selected, over, name_width)
        self.set_class(selected, "-selected")
        if shown == self._shown:
            return
        # Styles come from the theme, which a row can read only once mounted: before that, show the text
        # and keep the arguments, so mounting paints it again with its colours.
        self._shown = shown if self._can_style else None
        self._unstyled = None if self._can_style else shown
        over_by_column = dict(over)
        parts = [fit(BADGES[badge], BADGE_WIDTH) if badge else " " * BADGE_WIDTH]
        spans: list[tuple[int, int, str]] = []
        at = BADGE_WIDTH
        for key, value in zip(columns, cells):
            width = name_width if key == "name" else WIDTHS[key]
            if key == "name":
                part = fit_middle(value, width - 1) + " "
            else:
                part = fit(value, width - 1, right=not CONSOLE_BY_KEY[key].is_text)
                severity = over_by_column.get(key)
                part += OVER_MARK if severity else " "
                if severity:
                    spans.append((at, at + width, f"cell-{severity}"))
            parts.append(part)
            at += width
        text = Text("".join(parts), no_wrap=True, overflow="crop")
        if self._can_style:
            # A selected row takes the cursor's colours: coloured text on it would vanish in 16 colours
            # (green on green), so its marks keep their words and symbols, in bold, and lose their colour.
            if badge:
                name = "selected-mark" if selected else badge_style_name(badge, over)
                text.stylize(self._style(name), 0, BADGE_WIDTH)
            for start, end, name in spans:
                text.stylize(self._style("selected-mark" if selected else name), start, end)
        self.show_text(text)

    def show_row(
        self,
        row: Row,
        columns: tuple[str, ...],
        selected: bool = False,
        name: str | None = None,
        name_width: int = WIDTHS["name"],
    ) -> None:
        self._held = None
        cells = tuple(name if (key == "name" and name is not None) else cell(row, key) for key in columns)
        self.show(row.mark, cells, columns, selected, row.over, name_width)

    def hold(
        self,
        row: Row,
        columns: tuple[str, ...],
        selected: bool = False,
        name: str | None = None,
        name_width: int = WIDTHS["name"],
    ) -> None:
        """Keep the figures of a row out of view without formatting or repainting it."""
        self._held = (row, columns, selected, name, name_width)

    def show_held(self) -> None:
        if self._held is not None:
            row, columns, selected, name, name_width = self._held
            self.show_row(row, columns, selected, name, name_width)

    def on_mount(self) -> None:
        self._can_style = True  # `is_mounted` turns true only after this handler
        if self._unstyled is not None:
            self.show(*self._unstyled)

    def forget(self) -> None:
        """Drop what was shown so the next `show` repaints (after a theme or width change)."""
        self._shown = None
