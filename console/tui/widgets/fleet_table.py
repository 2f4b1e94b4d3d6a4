"""The fleet table: a header, one row widget per replica (keyed by replica name) and the fleet total.

Rows are mounted once and then updated in place; a row repaints only when its
text changes. Columns that do not fit the width are dropped by priority, so
80 columns keep state, load, queue, KV and latency.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical

from console.fleet.columns import CONSOLE_BY_KEY, CONSOLE_COLUMNS
from console.fleet.format import short_names
from console.fleet.view import FleetView, Row, RowFilter, sort_rows
from console.metrics.figures import FLEET_TOTAL
from console.text import printable
from console.tui.literal import fit
from console.tui.widgets.diff_text import DiffText
from console.tui.widgets.scroll import ConsoleScroll
from console.tui.widgets.table_row import BADGE_WIDTH, WIDTHS, TableRow

ROW_MARGIN = 3  # rows kept current just outside the view, so a step of the cursor shows fresh figures at once


def columns_for(width: int) -> tuple[str, ...]:
    """The columns that fit `width` cells, dropping the least important first."""
    chosen = list(CONSOLE_COLUMNS)
    while chosen and BADGE_WIDTH + sum(WIDTHS[c.key] for c in chosen) > width:
        least = max(chosen, key=lambda c: (c.console.priority, c.console.place))
        if least.console.priority == 0:
            break
        chosen.remove(least)
    return tuple(c.key for c in chosen)


def name_width_for(width: int, columns: tuple[str, ...], longest: int) -> int:
    """The name column's width: its minimum, plus what the chosen columns leave, up to the longest name."""
    spare = width - BADGE_WIDTH - sum(WIDTHS[c] for c in columns)
    return max(WIDTHS["name"], min(WIDTHS["name"] + max(spare, 0), longest + 1))


class TableBody(ConsoleScroll):
    """The scrolling replica rows; a resize can bring held rows into view.

    Never focused: up and down choose a replica (the view follows the choice) instead of scrolling.
    """

    def __init__(self, on_resize, **kwargs) -> None:
        super().__init__(can_focus=False, **kwargs)
        self._on_resize = on_resize

    def on_resize(self) -> None:
        self._on_resize()


class FilterLine(DiffText):
    """Shown only while a filter is on: what it keeps and what it hides, flagged rows among them (as k9s does)."""

    DEFAULT_CSS = "FilterLine { height: 1; display: none; }"

    def show_filter(self, text: str, kept: tuple[Row, ...], every: tuple[Row, ...]) -> None:
        self.display = bool(text.strip())
        if not self.display:
            return
        kept_keys = {r.key for r in kept}
        hidden = [r for r in every if r.key not in kept_keys]
        troubled = sum(1 for r in hidden if r.mark not in ("ok", "unknown"))
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f" filter {printable(text.strip())}", style="bold")
        line.append(f" · {len(kept)} of {len(every)} shown, {len(hidden)} hidden")
        if troubled:
            line.append(f" ({troubled} not ok)", style="bold")
        line.append(" · Esc clears")
        self.show_text(line)


class FleetTable(Vertical):
    DEFAULT_CSS = """
    FleetTable { height: auto; }
    FleetTable > TableBody { height: auto; max-height: 100%; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: FleetView | None = None
        self.sort_key: str | None = None  # None: the source's order
        self.descending = False
        self.row_filter = RowFilter()
        self.selected: str | None = None
        self.order: tuple[str, ...] = ()
        self._rows: dict[str, TableRow] = {}
        self._header = TableRow("header", classes="header")
        self._body = TableBody(self._show_held, classes="body")
        self._total = TableRow(FLEET_TOTAL, classes="total")
        self._filter_line = FilterLine(classes="filter-line")
        self._columns: tuple[str, ...] = columns_for(80)
        self._width = 80
        self._names: tuple[tuple[str, ...], int, dict[str, str]] = ((), 0, {})

    def compose(self):
        yield self._header
        yield self._body
        yield self._filter_line
        yield self._total

    def on_resize(self) -> None:
        columns = columns_for(self.size.width)
        if columns != self._columns or self.size.width != self._width:
            self._columns, self._width = columns, self.size.width
            self.refresh_rows()

    def shown_names(self) -> tuple[dict[str, str], int]:
        """Replica names as shown (the part that tells them apart) and the name column's width."""
        names = tuple(r.key for r in self.view.rows) if self.view else ()
        longest = max((len(printable(n)) for n in names), default=0)
        width = name_width_for(self._width, self._columns, longest)
        if self._names[:2] != (names, width):
            shown = short_names([printable(n) for n in names], width - 1)
            self._names = (names, width, {n: shown[printable(n)] for n in names})
        return self._names[2], width

    @property
    def columns(self) -> tuple[str, ...]:
        return self._columns

    # --- what the screen calls ----------------------------------------------

    def show_view(self, view: FleetView) -> None:
        if view is self.view:
            return  # the once-a-second redraw (data age) between polls: no row can have changed
        self.view = view
        self.refresh_rows()

    def sort_by(self, key: str | None, descending: bool = False) -> None:
        self.sort_key, self.descending = key, descending
        self.refresh_rows()

    def filter_by(self, row_filter: RowFilter) -> None:
        self.row_filter = row_filter
        self.refresh_rows()

    def move(self, step: int) -> None:
        if not self.order:
            return
        index = self.order.index(self.selected) if self.selected in self.order else -1
        self.selected = self.order[max(0, min(len(self.order) - 1, index + step))]
        self.refresh_rows()
        self._rows[self.selected].scroll_visible()

    def body_height(self) -> int:
        return self._body.size.height

    def selected_row(self) -> Row | None:
        return self.view.row(self.selected) if self.view and self.selected else None

    # --- rendering -----------------------------------------------------------

    def _header_cells(self) -> tuple[str, ...]:
        titles = []
        for key in self._columns:
            title = CONSOLE_BY_KEY[key].console.title
            if key == self.sort_key:
                title += "▼" if self.descending else "▲"
            titles.append(title)
        return tuple(titles)

    def refresh_rows(self) -> None:
        names, name_width = self.shown_names()
        self._header.show("", self._header_cells(), self._columns, name_width=name_width)
        if self.view is None or not self.is_mounted:
            return
        every = self.view.rows
        rows = sort_rows(every, self.sort_key, self.descending) if self.sort_key else every
        rows = tuple(r for r in rows if self.row_filter.matches(r))
        order = tuple(r.key for r in rows)
        self._place(order)
        if self.selected not in order:
            self.selected = None
        first, last = self._rows_in_view()
        for index, row in enumerate(rows):
            widget = self._rows[row.key]
            selected = row.key == self.selected
            if first <= index < last:
                widget.show_row(row, self._columns, selected, names.get(row.key), name_width)
            else:
                widget.hold(row, self._columns, selected, names.get(row.key), name_width)
        self._filter_line.show_filter(self.row_filter.text, rows, every)
        up = self.view.replicas_serving
        total_name = fit(f"FLEET {up}/{len(every)}", name_width - 1)
        self._total.show_row(self.view.total, self._columns, name=total_name, name_width=name_width)

    def _rows_in_view(self) -> tuple[int, int]:
        """The body rows on screen, with a margin; all of them before the first layout.

        With hundreds of replicas most rows are scrolled away: formatting and repainting
        them each refresh would cost more than everything on screen.
        """
        height = self._body.size.height
        if height <= 0:
            return 0, len(self.order)
        top = int(self._body.scroll_y)
        return max(0, top - ROW_MARGIN), top + height + ROW_MARGIN

    def _show_held(self) -> None:
        """Rows scrolled into view (or uncovered by a resize) get the figures they were holding."""
        first, last = self._rows_in_view()
        for key in self.order[first:last]:
            self._rows[key].show_held()

    def on_mount(self) -> None:
        self.watch(self._body, "scroll_y", lambda _: self._show_held(), init=False)

    def _place(self, order: tuple[str, ...]) -> None:
        """Mount rows for new replicas, remove rows of gone ones, and reorder only when the order changed."""
        if order == self.order:
            return
        for key in [k for k in self._rows if k not in order]:
            self._rows.pop(key).remove()
        new = [TableRow(key, classes="replica") for key in order if key not in self._rows]
        for widget in new:
            self._rows[widget.key] = widget
        if new:
            self._body.mount_all(new)
        rows = set(self._rows.values())
        for index, key in enumerate(order):
            widget = self._rows[key]
            children = [c for c in self._body.children if c in rows]
            if index < len(children) and children[index] is not widget:
                self._body.move_child(widget, before=children[index])
        self.order = order
