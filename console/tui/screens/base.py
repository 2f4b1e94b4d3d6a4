"""What every console screen shares: it draws the app's latest views, once composed and only while on top."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from textual.css.query import NoMatches
from textual.dom import DOMNode
from textual.screen import Screen

if TYPE_CHECKING:
    from console.tui.app import ConsoleApp


def console_app(node: DOMNode) -> ConsoleApp:
    """The app a console screen or widget runs in, as the ConsoleApp it is (Textual types `node.app` as App[Any])."""
    return cast("ConsoleApp", node.app)


class ConsoleScreen(Screen[None]):
    _ready = False
    index: int | None = None  # the fleet this screen shows; None: every fleet (the overview)

    def chosen_replica(self) -> str | None:
        """The replica the operator chose here (the demo's fault menu acts on it); None: none."""
        return None

    def draw(self) -> None:
        """Render the app's latest immutable views."""

    def redraw(self) -> None:
        # Called after each poll and each second (data age); a screen still composing waits for on_mount.
        if not self._ready:
            return
        try:
            self.draw()
        except NoMatches:
            pass  # mid-compose or mid-teardown: the next poll draws it

    def on_mount(self) -> None:
        self._ready = True
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()


def local_hhmm(at: float) -> str:
    """A time of day on the terminal's clock, as the flags panel and the header write their times."""
    return time.strftime("%H:%M", time.localtime(at))
