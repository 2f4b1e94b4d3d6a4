"""Several fleets, one line each; Enter opens a fleet's main screen."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Footer, Static

from console.tui.screens.base import ConsoleScreen
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.fleet_line import HEADER, FleetLine
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

    def compose(self):
        yield ConsoleHeader()
        yield Static(HEADER, id="overview-header", markup=False)
        with ConsoleScroll(id="fleets"):
            for index, handle in enumerate(self.app.fleets):
                yield FleetLine(index, handle.name)
        yield Footer()

    def draw(self) -> None:
        self.query_one(ConsoleHeader).show(self.app.header_info(None))
        for line in self.query(FleetLine):
            line.show(self.app.views[line.index], selected=line.index == self.selected)

    def action_move(self, step: int) -> None:
        self.selected = max(0, min(len(self.app.fleets) - 1, self.selected + step))
        self.redraw()

    def action_open_fleet(self) -> None:
        self.app.push_screen(FleetScreen(self.selected))
