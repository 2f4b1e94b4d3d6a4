"""A text widget that marks dirty only the characters that changed.

Over SSH every byte counts: when a figure ticks from 4.21 to 4.23, only the
span between the first and the last changed character of each changed line is
repainted; a change of styles or of the line count repaints the widget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.geometry import Region
from textual.widget import Widget

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions


def changed_regions(before: Text | None, after: Text) -> list[Region] | None:
    """Per-line spans that differ between two texts, or None when everything must repaint."""
    if before is None or before.spans != after.spans or before.style != after.style:
        return None
    old_lines, new_lines = before.plain.split("\n"), after.plain.split("\n")
    if len(old_lines) != len(new_lines):
        return None
    regions = []
    for y, (old, new) in enumerate(zip(old_lines, new_lines)):
        if old == new:
            continue
        if len(old) != len(new):
            regions.append(Region(0, y, max(len(old), len(new)) + 1, 1))
            continue
        first = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
        last = next(i for i in range(len(new) - 1, -1, -1) if old[i] != new[i])
        regions.append(Region(first, y, last - first + 1, 1))
    return regions


class DiffText(Widget):
    DEFAULT_CSS = "DiffText { height: auto; }"
    WRAPS = False  # wrapped text moves characters between screen lines: repaint it whole

    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._text: Text | None = None
        self.renders = 0  # how many times the text really changed (tests read it)

    @property
    def content(self) -> Text:
        return self._text or Text()

    def render(self) -> Text:
        return self._text or Text()

    def show_text(self, text: Text) -> None:
        if self._text is not None and text.plain == self._text.plain and text.spans == self._text.spans:
            return
        regions = None if self.WRAPS else changed_regions(self._text, text)
        lines_before = self._text.plain.count("\n") if self._text is not None else -1
        self._text = text
        self.renders += 1
        if regions is None:
            # A different number of lines may change the height: lay out again.
            self.refresh(layout=text.plain.count("\n") != lines_before)
        elif regions:
            self.refresh(*regions)
