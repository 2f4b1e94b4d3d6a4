"""The fleet table: a header, the replica rows and the fleet total.

The table is virtual: only a pool of row widgets about two screens tall exists,
bound to a window of the sorted, filtered rows; a gap above and below the pool
stands for the rows outside it, so the body scrolls (and its scrollbar reads)
as if every row were there. A 40-line terminal holds 80 row widgets whether the
fleet has 60 replicas or 10,000; a fleet that fits the pool has a widget per
replica, always bound to the same place. A row repaints only when its text changes. Columns that do
not fit the width are dropped by priority, so 80 columns keep state, load,
queue, KV and latency.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget

from console.fleet.columns import CONSOLE_COLUMNS
from console.fleet.format import short_names
from console.fleet.view import FleetView, Row, RowFilter, sort_rows
from console.metrics.figures import FLEET_TOTAL
from console.text import printable
from console.tui.console_columns import in_console
from console.tui.literal import fit
from console.tui.widgets.diff_text import DiffText
from console.tui.widgets.scroll import ConsoleScroll
from console.tui.widgets.table_row import BADGE_WIDTH, WIDTHS, TableRow

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions

ROW_MARGIN = 3  # rows kept current just outside the view, so a step of the cursor shows fresh figures at once
POOL_SCREENS = 2  # row widgets per terminal line: a page of scrolling seldom moves the window


def columns_for(width: int, gpu: bool = False) -> tuple[str, ...]:
    """The columns that fit `width` cells, dropping the least important first; the GPU columns only with `gpu`
    (a fleet whose GPU pages are read), and then the first to go on a narrow terminal."""
    chosen = [c for c in CONSOLE_COLUMNS if gpu or not c.is_gpu]
    while chosen and BADGE_WIDTH + sum(WIDTHS[c.key] for c in chosen) > width:
        least = max(chosen, key=lambda c: (in_console(c.key).priority, in_console(c.key).place))
        if in_console(least.key).priority == 0:
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

    def __init__(self, on_resize: Callable[[], None], *children: Widget, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(*children, can_focus=False, **kwargs)
        self._on_resize = on_resize

    def on_resize(self) -> None:
        self._on_resize()


class Gap(Widget):
    """Blank lines standing for the rows outside the pool's window."""

    DEFAULT_CSS = "Gap { height: 0; display: none; }"

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self.lines = 0

    def stand_for(self, lines: int) -> None:
        if lines != self.lines:
            self.lines = lines
            self.styles.height = lines
            self.display = lines > 0


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

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self.view: FleetView | None = None
        self.sort_key: str | None = None  # None: the source's order
        self.descending = False
        self.row_filter = RowFilter()
        self.selected: str | None = None
        self.order: tuple[str, ...] = ()
        self._shown_rows: tuple[Row, ...] = ()  # sorted and filtered, in `order`
        self._arranged_view: FleetView | None = None  # the view, sort and filter `_shown_rows` came from
        self._arranged: tuple | None = None
        self._pool: list[TableRow] = []  # bound to `_shown_rows[_start:_start + len(_pool)]`
        self._start = 0
        self._labels: tuple[dict[str, str], int] = ({}, WIDTHS["name"])  # shown names and their width, as bound
        self._above = Gap(classes="gap-above")
        self._below = Gap(classes="gap-below")
        self._header = TableRow("header", classes="header")
        self._body = TableBody(self._show_held, self._above, self._below, classes="body")
        self._total = TableRow(FLEET_TOTAL, classes="total")
        self._filter_line = FilterLine(classes="filter-line")
        self._columns: tuple[str, ...] = columns_for(80)
        self._width = 80
        self._gpu = False  # the view has GPU counters: their columns may show
        self._names: tuple[tuple[str, ...], int, dict[str, str]] = ((), 0, {})
        self._longest: tuple[tuple[str, ...], int] = ((), 0)  # the names, and the longest as shown

    def compose(self) -> ComposeResult:
        yield self._header
        yield self._body
        yield self._filter_line
        yield self._total

    def on_resize(self) -> None:
        columns = columns_for(self.size.width, self._gpu)
        if columns != self._columns or self.size.width != self._width:
            self._columns, self._width = columns, self.size.width
            self.refresh_rows()

    def shown_names(self) -> tuple[dict[str, str], int]:
        """Replica names as shown (the part that tells them apart) and the name column's width.

        Made printable and measured once per set of names, not once per refresh: 10,000 names cost 80 ms.
        """
        names = tuple(r.key for r in self.view.rows) if self.view else ()
        if self._longest[0] != names:
            self._longest = (names, max((len(printable(n)) for n in names), default=0))
        width = name_width_for(self._width, self._columns, self._longest[1])
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
        gpu = view.gpu is not None
        if gpu != self._gpu:
            self._gpu = gpu
            self._columns = columns_for(self._width, gpu)
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
        index = max(0, min(len(self.order) - 1, index + step))
        self.selected = self.order[index]
        beyond = not self._start <= index < self._start + len(self._pool)
        if beyond:
            # No widget there to scroll to: jump the view to the row, and the window follows the scroll.
            top, height = int(self._body.scroll_y), self._body.size.height
            self._body.scroll_to(y=index if index < top else index - height + 1, animate=False, immediate=True)
        self.refresh_rows()
        if not beyond:
            # Inside the window the widgets are where the layout put them: scroll as a row widget does.
            self._pool[index - self._start].scroll_visible()

    def body_height(self) -> int:
        return self._body.size.height

    def selected_row(self) -> Row | None:
        return self.view.row(self.selected) if self.view and self.selected else None

    # --- rendering -----------------------------------------------------------

    def _header_cells(self) -> tuple[str, ...]:
        titles = []
        for key in self._columns:
            title = in_console(key).title
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
        # Sorted and filtered once per view, sort and filter: a step of the cursor reuses them.
        arranged = (self.sort_key, self.descending, self.row_filter)
        if self.view is not self._arranged_view or arranged != self._arranged:  # a view by identity: cheap
            rows = sort_rows(every, self.sort_key, self.descending) if self.sort_key else every
            if self.row_filter.text.strip():
                rows = tuple(r for r in rows if self.row_filter.matches(r))
            self._arranged_view, self._arranged, self._shown_rows = self.view, arranged, rows
            self.order = tuple(r.key for r in rows)
        rows = self._shown_rows
        self._labels = (names, name_width)
        if self.selected not in self.order:
            self.selected = None
        self._bind(rebind=True)
        self._filter_line.show_filter(self.row_filter.text, rows, every)
        up = self.view.replicas_serving
        total_name = fit(f"FLEET {up}/{len(every)}", name_width - 1)
        self._total.show_row(self.view.total, self._columns, name=total_name, name_width=name_width)

    def _pool_size(self) -> int:
        return min(len(self._shown_rows), POOL_SCREENS * max(self.app.size.height, 1))

    def _window_start(self, size: int) -> int:
        """The pool's first row: kept while the view (with its margin) lies inside the window, else centred on it."""
        count = len(self._shown_rows)
        height = self._body.size.height
        top = int(self._body.scroll_y)
        first, last = max(0, top - ROW_MARGIN), min(count, top + height + ROW_MARGIN)
        start = self._start
        if height > 0 and not (start <= first and last <= start + size):
            start = top - (size - height) // 2
        return max(0, min(start, count - size))

    def _bind(self, rebind: bool) -> None:
        """Size the pool, place its window, and give each widget its row: formatted in view, held out of it.

        `rebind`: the rows changed (a new view, sort, filter, cursor or width), so every widget takes its row
        again; else (a scroll) only a moved window does.
        """
        size = self._pool_size()
        start = self._window_start(size)
        if not rebind and size == len(self._pool) and start == self._start:
            return
        while len(self._pool) > size:
            self._pool.pop().remove()
        new = [TableRow("", classes="replica") for _ in range(size - len(self._pool))]
        if new:
            self._pool.extend(new)
            self._body.mount_all(new, before=self._below)
        self._start = start
        names, name_width = self._labels
        self._above.stand_for(start)
        self._below.stand_for(len(self._shown_rows) - start - size)
        first, last = self._rows_in_view()
        for offset, widget in enumerate(self._pool):
            index = start + offset
            row = self._shown_rows[index]
            selected = row.key == self.selected
            # A widget taking another replica's row shows it at once: it must never read as a replica it is not.
            if first <= index < last or widget.key != row.key:
                widget.key = row.key
                widget.show_row(row, self._columns, selected, names.get(row.key), name_width)
            else:
                widget.hold(row, self._columns, selected, names.get(row.key), name_width)

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
        """Rows scrolled into view (or uncovered by a resize) get the figures they were holding.

        A scroll past the window's edge moves the window first: its widgets take the rows now in view.
        """
        if self.view is None or not self.is_mounted:
            return
        self._bind(rebind=False)
        first, last = self._rows_in_view()
        for widget in self._pool[max(0, first - self._start) : max(0, last - self._start)]:
            widget.show_held()

    def on_mount(self) -> None:
        self.watch(self._body, "scroll_y", lambda _: self._show_held(), init=False)
