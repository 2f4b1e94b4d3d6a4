"""Messages between the poll workers and the screens (past tense: what happened)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

from console.ahead.accuracy import ForecastAccuracy
from console.fleet.overflow import SwitchNote
from console.fleet.view import FleetView
from console.live.gateways import GatewayView

if TYPE_CHECKING:
    from console.live.switch import SwitchOutcome
    from console.overflow.switch import SwitchRequest


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


class ForecastAccuracyMeasured(Message):
    """The history file was backtested: how wrong one fleet's forecast has been (None: the file could not be read)."""

    def __init__(self, index: int, accuracy: ForecastAccuracy | None) -> None:
        super().__init__()
        self.index = index
        self.accuracy = accuracy


class PollFailed(Message):
    """A poll raised: the console keeps the last view and says why."""

    def __init__(self, index: int, error: str) -> None:
        super().__init__()
        self.index = index
        self.error = error


class SwitchAsked(Message):
    """An overflow switch is on its way from the console's dialog (before any actuator is asked)."""

    def __init__(self, index: int, request: SwitchRequest) -> None:
        super().__init__()
        self.index = index
        self.request = request


class PolicySwitched(Message):
    """A switch asked from the console was answered (or refused by the plan): the timeline takes it."""

    def __init__(self, index: int, outcome: SwitchOutcome) -> None:
        super().__init__()
        self.index = index
        self.outcome = outcome


class FrameShown(Message):
    """A replay moved: every fleet's view, and each fleet's switch timeline as it stood then (None: unchanged)."""

    def __init__(
        self, views: tuple[FleetView | None, ...], switches: tuple[tuple[SwitchNote, ...], ...] | None
    ) -> None:
        super().__init__()
        self.views = views
        self.switches = switches
