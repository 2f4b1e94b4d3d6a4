"""One watched fleet as the console holds it: its handle, its latest view, its gateways' view, its switch timeline
and the last poll's error, in one object instead of parallel lists indexed by fleet number.

The app owns one `FleetSession` per fleet and hands it to the screens that show the fleet; the app's message
handlers (a poll, a gateway read, a switch asked and answered, a replay frame) are the only writers.

The timeline holds each switch once: one asked for here goes in with its reason and outcome, and the change
the gateways then show is recognised as that switch by what was asked (its mode and actor, not a time
window); a change nobody asked for here (someone else's switch, an expiry) goes in as seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from console.ahead.accuracy import ForecastAccuracy
from console.fleet.overflow import MAX_NOTES, SwitchNote, note_line, policy_words, seen_switch
from console.fleet.plan_now import PlanNow
from console.fleet.view import FleetView
from console.live.gateways import GatewayView
from console.plan.model import Plan

if TYPE_CHECKING:
    from console.live.switch import SwitchOutcome
    from console.overflow.switch import SwitchRequest


class Watched(Protocol):
    """What a session needs of its fleet: a live FleetHandle, or a replayed fleet's label."""

    @property
    def name(self) -> str: ...

    @property
    def plan(self) -> Plan | None: ...


@dataclass(eq=False)
class FleetSession:
    index: int  # the fleet's place in the console's list (the order the command named them)
    handle: Watched
    view: FleetView | None = None
    gateways: GatewayView | None = None  # None: none watched, or not read yet
    switches: tuple[SwitchNote, ...] = ()  # newest first: the flags panel's timeline
    error: str = ""  # why the last poll failed; "" after one that did not
    # How wrong the forecast has been on this fleet's recorded last week (None: no history file read yet).
    forecast_accuracy: ForecastAccuracy | None = None
    # Switches asked for here (mode, actor) that the gateways have not been seen to take yet.
    _asked: list[tuple[str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.handle.name

    @property
    def plan(self) -> Plan | None:
        return self.handle.plan

    @property
    def watches_gateways(self) -> bool:
        return bool(getattr(self.handle, "gateways", ()))

    def viewed(self, view: FleetView) -> None:
        self.view = view
        self.error = ""

    def failed(self, error: str) -> None:
        self.error = error

    def gateways_read(self, view: GatewayView) -> None:
        """The gateways' new figures; a change of the policy in force joins the timeline unless it was asked here."""
        before = self.gateways.figures.policy if self.gateways is not None else None
        self.gateways = view
        seen = seen_switch(before, view.figures.policy)
        if seen is None:
            return
        if (seen.mode, seen.actor) in self._asked:
            self._asked.remove((seen.mode, seen.actor))  # on the timeline already, with its reason and outcome
            return
        self._note(seen)

    def asked(self, request: SwitchRequest) -> None:
        """A switch is on its way from here: when the gateways show it, it is this one."""
        self._asked.append((request.mode, request.actor))

    def switched(self, outcome: SwitchOutcome) -> None:
        """A switch asked here was answered: it joins the timeline with its reason and outcome."""
        if outcome.applied == 0 and (outcome.request.mode, outcome.request.actor) in self._asked:
            self._asked.remove((outcome.request.mode, outcome.request.actor))  # no gateway will show it
        self._note(outcome.note())

    def replayed(self, view: FleetView | None, switches: tuple[SwitchNote, ...] | None) -> None:
        """A replay's frame: the view and the timeline as they stood at the moment shown."""
        self.view = view
        if switches is not None:
            self.switches = switches

    def _note(self, note: SwitchNote) -> None:
        self.switches = (note, *self.switches)[:MAX_NOTES]

    def switch_lines(self, hhmm: Callable[[float], str]) -> tuple[str, ...]:
        return tuple(note_line(note, hhmm) for note in self.switches)

    def overflow_words(self, now: PlanNow | None, hhmm: Callable[[float], str]) -> str | None:
        """The header's overflow word: the mode the gateways enforce (who, since, until) when they are watched,
        else the plan's mode; None without either."""
        if self.watches_gateways:
            gateways = self.gateways
            if gateways is None or gateways.figures.answering == 0:
                return "? (no gateway answering)"
            return policy_words(gateways.figures.policy, hhmm)
        return self._plan_mode(now)

    def overflow_mode(self, now: PlanNow | None) -> str | None:
        """The mode alone (bounded_queue, hosted, ...) of what `overflow_words` says; None: no mode known."""
        if self.watches_gateways:
            gateways = self.gateways
            policy = gateways.figures.policy if gateways is not None and gateways.figures.answering else None
            return policy.mode if policy is not None else None
        return self._plan_mode(now)

    def _plan_mode(self, now: PlanNow | None) -> str | None:
        if now is not None:
            return now.overflow_mode
        return self.plan.overflow.mode if self.plan is not None else None
