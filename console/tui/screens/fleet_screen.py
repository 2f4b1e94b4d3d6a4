"""The main screen of one fleet: header, fleet table, plan beside actual, trends and flags."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input

from console.fleet.overflow import SWITCH_KEY, panel_lines, suggestion
from console.fleet.view import FilterError, parse_filter
from console.live.session import FleetSession
from console.tui.console_columns import in_console
from console.tui.screens.base import ConsoleScreen, console_app, local_hhmm
from console.tui.screens.replica_screen import ReplicaScreen
from console.tui.screens.sort_screen import SOURCE_ORDER, SortScreen, default_descending
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.flags_panel import FlagsPanel
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.overflow_panel import OverflowPanel
from console.tui.widgets.plan_panel import PlanPanel
from console.tui.widgets.scroll import ConsoleScroll
from console.tui.widgets.trends_panel import TrendsPanel


class FlagsScroll(ConsoleScroll):
    """The flags panel's scroll: Tab reaches it (then up, down, PgUp, PgDn, Home, End read the why and do
    text), Tab or Esc goes back to the table."""

    BINDINGS = [
        Binding("escape", "leave", "back to the table", id="flags-leave"),
        Binding("j", "scroll_down", "scroll down", show=False, id="flags-down"),
        Binding("k", "scroll_up", "scroll up", show=False, id="flags-up"),
    ]

    TITLE = "flags · Tab to scroll"
    FOCUSED_TITLE = "flags · ↑↓ PgUp PgDn scroll · Esc back"

    def on_focus(self) -> None:
        self.border_title = self.FOCUSED_TITLE

    def on_blur(self) -> None:
        self.border_title = self.TITLE

    def action_leave(self) -> None:
        self.screen.set_focus(None)


class FleetScreen(ConsoleScreen):
    # Nothing holds the focus: the screen's keys (and the filter box, focused when opened) do the work.
    AUTO_FOCUS = ""
    BINDINGS = [
        Binding("s", "sort_menu", "sort", id="sort"),
        Binding("r", "sort_reverse", "reverse", show=False, id="sort-reverse"),
        Binding("slash", "filter", "filter", id="filter"),
        Binding("escape", "clear_filter", "clear filter", show=False, id="clear-filter"),
        Binding("down,j", "move(1)", "next row", show=False, id="row-down"),
        Binding("up,k", "move(-1)", "previous row", show=False, id="row-up"),
        Binding("pagedown", "page(1)", "page down", show=False, id="row-page-down"),
        Binding("pageup", "page(-1)", "page up", show=False, id="row-page-up"),
        Binding("enter", "open_replica", "detail", id="open-replica"),
        Binding("tab", "focus_flags", "flags", show=False, id="focus-flags"),
    ]

    def __init__(self, session: FleetSession) -> None:
        super().__init__()
        self.session = session
        self.index = session.index

    def chosen_replica(self) -> str | None:
        return self.table.selected  # the row selected in the table

    def compose(self) -> ComposeResult:
        yield ConsoleHeader(id="header")
        yield FleetTable(id="table")
        with Horizontal(id="lower"):
            yield PlanPanel(id="plan")
            with Vertical(id="right"):
                yield TrendsPanel(id="trends")
                if self.session.watches_gateways:
                    overflow = OverflowPanel(id="overflow")
                    overflow.border_title = f"overflow · {SWITCH_KEY} switch"
                    yield overflow
                # Up and down choose replicas until Tab moves the focus here; then they scroll the flags.
                with FlagsScroll(id="flags-scroll") as flags:
                    flags.border_title = FlagsScroll.TITLE
                    yield FlagsPanel(id="flags")
        yield Input(
            placeholder="filter: KV>0.9, TTFT95>0.3, out t/s<100, state=down, name~gpu, or any text (Enter applies, Esc clears)",
            id="filter",
        )
        yield Footer()

    @property
    def table(self) -> FleetTable:
        return self.query_one(FleetTable)

    def draw(self) -> None:
        app, session = console_app(self), self.session
        view = session.view
        self.query_one(ConsoleHeader).show(app.header_info(session))
        if view is None:
            return
        self.table.show_view(view)
        self.query_one(PlanPanel).show(view)
        self.query_one(TrendsPanel).show(view.trends)
        over = sum(1 for row in view.rows if row.over) + (1 if view.total.over and not view.rows else 0)
        if session.watches_gateways:
            gateways = session.gateways
            figures = gateways.figures if gateways is not None else None
            policy = figures.policy if figures is not None else None
            suggest = suggestion(view.flags, view.figures.fleet, view.plan, policy)
            self.query_one(OverflowPanel).show(panel_lines(figures, view.plan, suggest))
        self.query_one(FlagsPanel).show(
            view.flags,
            view.now,
            view.pending,
            planned=view.plan is not None,
            over=over,
            switches=session.switch_lines(local_hhmm),
            switch_key=SWITCH_KEY if app.can_switch(session.index) else None,
        )

    # --- actions -------------------------------------------------------------

    def action_sort_menu(self) -> None:
        table = self.table
        self.app.push_screen(SortScreen(table.sort_key, table.descending, table.columns), self.sort_on)

    def sort_on(self, column: str | None) -> None:
        """Apply the sort menu's choice: a column (again: reversed), the source order, or nothing (closed)."""
        if column is None:
            return
        table = self.table
        if column == SOURCE_ORDER:
            table.sort_by(None)
        elif column == table.sort_key:
            table.sort_by(column, not table.descending)
        else:
            table.sort_by(column, default_descending(column))
        self.app.clear_notifications()
        # The column as the header titles it (TTFT95, not the key `ttft`).
        title = in_console(table.sort_key).title if table.sort_key is not None else ""
        order = (
            "source order"
            if table.sort_key is None
            else (
                f"{title}, {'largest' if table.descending else 'smallest'} first"
                if table.sort_key not in ("name", "state")
                else f"{title}, {'Z-A' if table.descending else 'A-Z'}"
            )
        )
        self.notify(f"sorted by {order}", timeout=1.5)

    def action_focus_flags(self) -> None:
        scroll = self.query_one("#flags-scroll", FlagsScroll)
        if self.focused is scroll:
            self.set_focus(None)
        else:
            scroll.focus()

    def action_page(self, step: int) -> None:
        body_height = max(self.table.body_height(), 1)
        self.table.move(step * body_height)

    def action_sort_reverse(self) -> None:
        table = self.table
        if table.sort_key is not None:
            table.sort_by(table.sort_key, not table.descending)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.table.row_filter.text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            chosen = parse_filter(event.value)
        except FilterError as error:
            event.input.border_title = str(error)
            self.notify(str(error), severity="error", timeout=4)
            return
        event.input.border_title = None
        event.input.display = False
        self.table.filter_by(chosen)
        self.set_focus(None)  # the screen's keys work again

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = False
        box.value = ""
        self.set_focus(None)
        self.table.filter_by(parse_filter(""))

    def action_move(self, step: int) -> None:
        self.table.move(step)

    def action_open_replica(self) -> None:
        row = self.table.selected_row()
        if row is None:
            self.table.move(0) if self.table.order else None
            row = self.table.selected_row()
        if row is not None:
            self.app.push_screen(ReplicaScreen(self.session, row.key))
