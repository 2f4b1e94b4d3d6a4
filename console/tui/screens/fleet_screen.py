"""The main screen of one fleet: header, fleet table, plan beside actual, trends and flags."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input

from console.fleet.view import COLUMNS, FilterError, parse_filter
from console.tui.screens.base import ConsoleScreen
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.flags_panel import FlagsPanel
from console.tui.widgets.plan_panel import PlanPanel
from console.tui.widgets.trends_panel import TrendsPanel
from console.tui.widgets.scroll import ConsoleScroll

SORT_CYCLE = (None,) + tuple(c.key for c in COLUMNS)


class FleetScreen(ConsoleScreen):
    # Nothing holds the focus: the screen's keys (and the filter box, focused when opened) do the work.
    AUTO_FOCUS = ""
    BINDINGS = [
        Binding("s", "sort_next", "sort", id="sort"),
        Binding("r", "sort_reverse", "reverse", show=False, id="sort-reverse"),
        Binding("slash", "filter", "filter", id="filter"),
        Binding("escape", "clear_filter", "clear filter", show=False, id="clear-filter"),
        Binding("down", "move(1)", "next row", show=False, id="row-down"),
        Binding("up", "move(-1)", "previous row", show=False, id="row-up"),
        Binding("enter", "open_replica", "detail", id="open-replica"),
    ]

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def compose(self):
        yield ConsoleHeader(id="header")
        yield FleetTable(id="table")
        with Horizontal(id="lower"):
            yield PlanPanel(id="plan")
            with Vertical(id="right"):
                yield TrendsPanel(id="trends")
                # Not focusable: up and down keep choosing replicas however many flags there are.
                with ConsoleScroll(id="flags-scroll", can_focus=False):
                    yield FlagsPanel(id="flags")
        yield Input(placeholder="filter: kv>0.9, state=down, wait>=1, name~gpu, or any text (Enter applies, Esc clears)", id="filter")
        yield Footer()

    @property
    def table(self) -> FleetTable:
        return self.query_one(FleetTable)

    def draw(self) -> None:
        app = self.app
        view = app.views[self.index]
        self.query_one(ConsoleHeader).show(app.header_info(self.index))
        if view is None:
            return
        self.table.show_view(view)
        self.query_one(PlanPanel).show(view)
        self.query_one(TrendsPanel).show(view.trends)
        self.query_one(FlagsPanel).show(view.flags, view.now, view.pending)

    # --- actions -------------------------------------------------------------

    def action_sort_next(self) -> None:
        table = self.table
        following = SORT_CYCLE[(SORT_CYCLE.index(table.sort_key) + 1) % len(SORT_CYCLE)]
        # Numbers read best largest first; names and states alphabetically.
        descending = following not in (None, "name", "state")
        table.sort_by(following, descending)
        self.app.clear_notifications()
        self.notify(f"sorted by {following or 'source order'}", timeout=1.5)

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
            from console.tui.screens.replica_screen import ReplicaScreen

            self.app.push_screen(ReplicaScreen(self.index, row.key))
