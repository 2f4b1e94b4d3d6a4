"""What the fleet's gateways did over the window: admitted, queued, refused, hosted with its cost, deferred.

Shown only for a fleet with gateways (fleet.gateways or --gateway); the words are console.fleet.overflow's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from console.fleet.overflow import Line
from console.text import printable
from console.tui.widgets.diff_text import DiffText

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions


class OverflowPanel(DiffText):
    COMPONENT_CLASSES = {
        "overflow-panel--warning",
        "overflow-panel--critical",
        "overflow-panel--unknown",
        "overflow-panel--suggest",
    }

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._lines: tuple[Line, ...] = ()

    def show(self, lines: list[Line]) -> None:
        self._lines = tuple(lines)
        self._paint()

    def on_mount(self) -> None:
        self.call_after_refresh(self._paint)  # component styles exist once mounted: colour what came before

    def _paint(self) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, line in enumerate(self._lines):
            if i:
                text.append("\n")
            style = (
                self.get_component_rich_style(f"overflow-panel--{line.style}", partial=True)
                if line.style and self.is_mounted
                else ""
            )
            text.append(printable(line.text), style=style)
        self.show_text(text)
