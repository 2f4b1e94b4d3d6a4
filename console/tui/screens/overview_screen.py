"""Several fleets, one line each; Enter opens a fleet's main screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from console.tui.screens.base import ConsoleScreen, console_app
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.fleet_line import HEADER, NAME_MIN, FleetLine, overview_header, overview_names
from console.tui.widgets.scroll import ConsoleScroll


class OverviewScreen(ConsoleScreen):
    BINDINGS = [
        Binding("down", "move(1)", "next", show=False, id="fleet-down"),
        Binding("up", "move(-1)", "previous", show=False, id="fleet-up"),
        Binding("enter", "open_fleet", "open fleet", id="open-fleet"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.selected = 0
        self._name_width = NAME_MIN

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        yield Static(HEADER, id="overview-header", markup=False)
        with ConsoleScroll(id="fleets"):
            for session in console_app(self).sessions:
                yield FleetLine(session.index, session.name)
        yield Footer()

    def draw(self) -> None:
        self.query_one(ConsoleHeader).show(console_app(self).header_info(None))
        fleets = self.query_one("#fleets", ConsoleScroll)
        # The lines' width, less a scrollbar when there is one; before the first layout, the screen's.
        width = fleets.scrollable_content_region.width or self.size.width
        sessions = console_app(self).sessions
        name_width, labels = overview_names([s.name for s in sessions], width)
        if name_width != self._name_width:  # drawn each second: the heading changes only with the width
            self._name_width = name_width
            self.query_one("#overview-header", Static).update(overview_header(name_width))
        for line in self.query(FleetLine):
            session = sessions[line.index]
            line.show(session.view, line.index == self.selected, labels[session.name], name_width)

    def on_resize(self) -> None:
        self.redraw()

    def action_move(self, step: int) -> None:
        self.selected = max(0, min(len(console_app(self).sessions) - 1, self.selected + step))
        self.redraw()

    def action_open_fleet(self) -> None:
        self.app.push_screen(FleetScreen(console_app(self).sessions[self.selected]))
