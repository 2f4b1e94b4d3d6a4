"""The sort menu: one key per column (as htop's and k9s's), with arrows and Enter for those who prefer them.

The menu only chooses; the fleet screen applies the choice. Choosing the column already sorted on reverses it.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from console.fleet.columns import CONSOLE_BY_KEY
from console.tui.console_columns import in_console

SOURCE_ORDER = "source"
# The key that sorts on each column: a letter the column's title suggests, never one the menu itself uses.
SORT_KEYS: dict[str, str] = {
    "name": "n",
    "state": "s",
    "rps": "r",
    "prompt": "i",
    "gen": "o",
    "run": "u",
    "wait": "w",
    "kv": "k",
    "preempt": "p",
    "ttft50": "f",
    "ttft": "t",
    "tpot": "d",
    "e2e": "e",
    "queue": "q",
    "prefix": "x",
    "sm": "m",
    "tensor": "c",
    "dram": "a",
    "fb": "b",
}
assert set(SORT_KEYS) == set(CONSOLE_BY_KEY) and len(set(SORT_KEYS.values())) == len(SORT_KEYS)
SOURCE_KEY = "0"
NUMBER_FIRST = "largest first"


def default_descending(column: str) -> bool:
    """Numbers read best largest first; names and states alphabetically."""
    return column not in ("name", "state")


class SortScreen(ModalScreen[str | None]):
    """Dismisses with a column key, SOURCE_ORDER, or None (closed)."""

    BINDINGS = [
        *(
            Binding(key, f"choose('{column}')", in_console(column).title, show=False, id=f"sort-by-{column}")
            for column, key in SORT_KEYS.items()
        ),
        Binding(SOURCE_KEY, f"choose('{SOURCE_ORDER}')", "source order", show=False, id="sort-source-order"),
        Binding("escape", "close", "close", id="sort-close"),
    ]

    def __init__(self, current: str | None, descending: bool, columns: tuple[str, ...]) -> None:
        super().__init__()
        self.current = current
        self.descending = descending
        self.columns = columns  # those on screen now, listed first

    def compose(self) -> ComposeResult:
        with Vertical(id="sort-menu") as box:
            box.border_title = "sort by"
            box.border_subtitle = "a key or Enter sorts · again reverses · Esc closes"
            yield OptionList(*self._options(), id="sort-choices")

    def _options(self) -> list[Option]:
        # The GPU columns are listed only where the table shows them (a fleet without GPU pages has none).
        shown = list(self.columns) + [c for c in SORT_KEYS if c not in self.columns and not CONSOLE_BY_KEY[c].is_gpu]
        options = []
        for column in [SOURCE_ORDER] + shown:
            key = SOURCE_KEY if column == SOURCE_ORDER else SORT_KEYS[column]
            title = "source order" if column == SOURCE_ORDER else in_console(column).title
            line = Text(no_wrap=True)
            line.append(f" {key}  ", style="bold")
            line.append(f"{title:<16}")
            if column == (self.current or SOURCE_ORDER):
                line.append("▼ now" if self.descending else ("▲ now" if self.current else "now"), style="bold")
            elif column not in self.columns and column != SOURCE_ORDER:
                line.append("(off screen at this width)")
            options.append(Option(line, id=column))
        return options

    def on_mount(self) -> None:
        choices = self.query_one(OptionList)
        current = self.current or SOURCE_ORDER
        choices.highlighted = next(i for i, o in enumerate(choices.options) if o.id == current)
        choices.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_choose(self, column: str) -> None:
        self.dismiss(column)

    def action_close(self) -> None:
        self.dismiss(None)
