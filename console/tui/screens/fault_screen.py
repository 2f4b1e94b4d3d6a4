"""The demo's fault menu: one key per fault for the chosen replica, and the faults on now across the fleet.

A key closes the menu and hands the choice back to the app, which applies it (the menu does no I/O).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from console.text import printable
from console.tui.demo_faults import CLEAR_ALL_KEY, CLEAR_REPLICA_KEY, FAULT_CHOICES


@dataclass(frozen=True)
class FaultMenu:
    """What the menu shows: the replica it acts on, its faults, and the fleet's."""

    index: int  # in the source's order, from 0 (shown counting from 1)
    name: str
    replicas: int
    on: tuple[str, ...]  # fault kinds on for this replica
    fleet_summary: str  # every replica's faults, one line


class FaultScreen(ModalScreen[str | None]):
    BINDINGS = [
        *(
            Binding(choice.key, f"choose('{choice.key}')", choice.kind, id=f"fault-{choice.kind}")
            for choice in FAULT_CHOICES
        ),
        Binding(CLEAR_REPLICA_KEY, f"choose('{CLEAR_REPLICA_KEY}')", "clear replica", id="fault-clear-replica"),
        Binding(CLEAR_ALL_KEY, f"choose('{CLEAR_ALL_KEY}')", "clear all", id="fault-clear-all"),
        Binding("escape,f", "close", "close", id="fault-close"),
    ]

    def __init__(self, menu: FaultMenu) -> None:
        super().__init__()
        self.menu = menu

    def compose(self) -> ComposeResult:
        with Vertical(id="fault-menu") as box:
            box.border_title = (
                f"faults on {printable(self.menu.name)} (replica {self.menu.index + 1} of {self.menu.replicas})"
            )
            box.border_subtitle = "a key applies and closes · Esc closes"
            yield Static(self._text(), id="fault-choices", markup=False)

    def _text(self) -> Text:
        menu = self.menu
        text = Text(no_wrap=True, overflow="ellipsis")
        for choice in FAULT_CHOICES:
            on = choice.kind in menu.on
            text.append(f" {choice.key}  ", style="bold")
            text.append(f"{choice.label:<46}")
            if on:
                text.append(f"ON ({choice.key} clears)", style="bold reverse")
            text.append("\n")
        text.append(f" {CLEAR_REPLICA_KEY}  ", style="bold")
        text.append("clear this replica's faults\n")
        text.append(f" {CLEAR_ALL_KEY}  ", style="bold")
        text.append("clear every fault in the fleet\n\n")
        text.append(" on now: ", style="bold")
        text.append(printable(menu.fleet_summary))
        return text

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "choose":
            return self.app.check_action("fault", ())  # the app's one read-only gate
        return True

    def action_choose(self, key: str) -> None:
        self.dismiss(key)

    def action_close(self) -> None:
        self.dismiss(None)
