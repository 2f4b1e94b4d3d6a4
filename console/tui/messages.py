"""Messages between the poll workers and the screens (past tense: what happened)."""

from __future__ import annotations

from textual.message import Message

from console.fleet.view import FleetView
from console.live.gateways import GatewayView


class ViewUpdated(Message):
    """A poll finished: a new immutable view of one fleet."""

    def __init__(self, index: int, view: FleetView) -> None:
        super().__init__()
        self.index = index
        self.view = view


class GatewaysUpdated(Message):
    """The fleet's gateways were read: what they did over the window, all of them as one."""

    def __init__(self, index: int, view: GatewayView) -> None:
        super().__init__()
        self.index = index
        self.view = view


class PollFailed(Message):
    """A poll raised: the console keeps the last view and says why."""

    def __init__(self, index: int, error: str) -> None:
        super().__init__()
        self.index = index
        self.error = error
