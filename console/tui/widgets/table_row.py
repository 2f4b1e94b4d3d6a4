"""One line of the fleet table: a widget of its own that repaints only when its shown text changes.

A DataTable rewrites its whole visible region on every cell update; rows as
widgets keep the bytes sent over SSH to the lines that really changed.
"""

from __future__ import annotations

from rich.text import Text

from console.fleet import format as fmt
from console.fleet.view import COLUMN_BY_KEY, Row
from console.tui.literal import fit, fit_middle, printable
from console.tui.widgets.diff_text import DiffText

WIDTHS = {
    "name": 12, "state": 9, "rps": 6, "prompt": 8, "gen": 8, "run": 4, "wait": 5, "kv": 5,
    "preempt": 6, "ttft50": 7, "ttft": 7, "tpot": 7, "e2e": 7, "queue": 8, "prefix": 7,
}
BADGE_WIDTH = 7
BADGES = {"critical": "✖ CRIT", "warning": "▲ WARN", "info": "● info", "ok": "✓ ok", "unknown": "? ----"}
_FORMATS = {
    "rps": fmt.rate, "tps": fmt.compact, "count": fmt.count, "share": fmt.share,
    "seconds": fmt.seconds, "per_second": fmt.rate,
}


def cell(row: Row, key: str) -> str:
    column = COLUMN_BY_KEY[key]
    value = row.value(key)
    if key == "state":
        return fmt.state(value)
    if column.unit == "text":
        return printable(value if value is not None else fmt.UNKNOWN)
    return _FORMATS[column.unit](value)


def badge_for(row: Row) -> str:
    if row.severity is not None:
        return row.severity
    if row.figures.state in ("up", "restarted"):
        return "ok"
    if row.figures.state in ("down", "timeout", "bad_payload"):
        return "critical"  # down before its flag's minimum duration: still shown as bad
    return "unknown"


class TableRow(DiffText):
    """A replica, the fleet total, or the header line; only changed cells reach the terminal."""

    COMPONENT_CLASSES = {"table-row--critical", "table-row--warning", "table-row--info", "table-row--ok", "table-row--unknown"}

    def __init__(self, key: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.key = key
        self._shown: tuple | None = None
        self._held: tuple | None = None  # the latest figures of a row out of view, shown when it scrolls in
        self._badge_styles: dict[str, object] = {}  # looked up once: the theme does not change under a row

    def _badge_style(self, badge: str):
        if badge not in self._badge_styles:
            self._badge_styles[badge] = self.get_component_rich_style(f"table-row--{badge}", partial=True)
        return self._badge_styles[badge]

    def show(self, badge: str, cells: tuple[str, ...], columns: tuple[str, ...], selected: bool = False) -> None:
        shown = (badge, cells, columns)
        self.set_class(selected, "-selected")
        if shown == self._shown:
            return
        self._shown = shown
        parts = [fit(BADGES[badge], BADGE_WIDTH) if badge else " " * BADGE_WIDTH]
        for key, value in zip(columns, cells):
            if key == "name":
                parts.append(fit_middle(value, WIDTHS[key] - 1) + " ")
            else:
                parts.append(fit(value, WIDTHS[key] - 1, right=COLUMN_BY_KEY[key].unit != "text") + " ")
        text = Text("".join(parts), no_wrap=True, overflow="crop")
        if badge and self.is_mounted:
            text.stylize(self._badge_style(badge), 0, BADGE_WIDTH)
        self.show_text(text)

    def show_row(self, row: Row, columns: tuple[str, ...], selected: bool = False, name: str | None = None) -> None:
        self._held = None
        cells = tuple(name if (key == "name" and name is not None) else cell(row, key) for key in columns)
        self.show(badge_for(row), cells, columns, selected)

    def hold(self, row: Row, columns: tuple[str, ...], selected: bool = False) -> None:
        """Keep the figures of a row out of view without formatting or repainting it."""
        self._held = (row, columns, selected)

    def show_held(self) -> None:
        if self._held is not None:
            self.show_row(*self._held)

    def forget(self) -> None:
        """Drop what was shown so the next `show` repaints (after a theme or width change)."""
        self._shown = None
