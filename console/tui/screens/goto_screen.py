"""Replay: the "go to" box. A time of day on the day replayed, an ISO date-time, or -5m / +30s from the moment shown."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from console.replay.loader import shown_time
from console.replay.moment import parse_goto

PROMPT = (
    "go to: HH:MM[:SS] (the day replayed), 2026-11-30 14:03 (ISO), -5m / +30s (from now shown); Enter goes, Esc cancels"
)


class GoToScreen(ModalScreen[float | None]):
    DEFAULT_CSS = """
    GoToScreen { align: center middle; }
    #goto { width: 80; max-width: 100%; height: auto; background: $surface; border: round $primary; padding: 0 1; }
    #goto-input { border-title-style: bold; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel", id="goto-cancel")]

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at  # the replay clock when the box opened: what relative times and HH:MM are read against

    def compose(self) -> ComposeResult:
        with Vertical(id="goto"):
            yield Static(f"now shown: {shown_time(self.at)}", id="goto-now", markup=False)
            yield Input(placeholder=PROMPT, id="goto-input")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            at = parse_goto(event.value, self.at)
        except ValueError as error:
            event.input.border_title = str(error)
            self.notify(str(error), severity="error", timeout=5, markup=False)
            return
        self.dismiss(at)

    def action_cancel(self) -> None:
        self.dismiss(None)
