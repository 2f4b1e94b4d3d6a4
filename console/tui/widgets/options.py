"""What a console widget hands on to Textual's Widget unchanged: its name, id and CSS classes."""

from __future__ import annotations

from typing import TypedDict


class WidgetOptions(TypedDict, total=False):
    """The keyword arguments of textual.widget.Widget that the console's widgets pass through (`**options`)."""

    name: str | None
    id: str | None
    classes: str | None
