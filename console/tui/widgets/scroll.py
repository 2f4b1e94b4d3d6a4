"""A vertical scroll whose thumb fills whole cells.

Textual draws the thumb's ends with partial-block glyphs (▂, ▆, ...). In a 16-colour
terminal, and in any plain-text copy of the screen (tmux capture, a pasted incident
note), those glyphs read as sparkline bars beside unrelated text. A thumb made of
whole reverse-video cells says "scrollbar" and nothing else.
"""

from __future__ import annotations

from typing import ClassVar

from textual.containers import VerticalScroll
from textual.scrollbar import ScrollBarRender


class WholeCellScrollBarRender(ScrollBarRender):
    VERTICAL_BARS: ClassVar[list[str]] = [" "] * 8
    HORIZONTAL_BARS: ClassVar[list[str]] = [" "] * 8


class ConsoleScroll(VerticalScroll):
    def on_mount(self) -> None:
        # These two bars only. Textual's docs set `renderer` on an instance this way, though it annotates it ClassVar.
        self.vertical_scrollbar.renderer = WholeCellScrollBarRender  # type: ignore[misc]
        self.horizontal_scrollbar.renderer = WholeCellScrollBarRender  # type: ignore[misc]
