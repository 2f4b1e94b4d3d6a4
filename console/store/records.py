"""What goes into the history file per poll, and what comes back out: plain frozen records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from console.fleet.flags import Flag, FlagState
from console.fleet.trends import Trends
from console.metrics.figures import Figures, FleetFigures
from console.plan.model import Plan
from console.targets import TargetResult


@dataclass(frozen=True)
class FlagChange:
    change: Literal["raised", "cleared"]
    flag: Flag
    figures: Figures | None  # the subject's figures at that poll (a replica's, or the fleet total)


@dataclass(frozen=True)
class PollState:
    """What the console carried from one poll to the next: stored now and then as a replay checkpoint.

    `watcher` is the watcher's memory (console.live.watcher.WatcherMemory: source, window_seconds,
    interval_seconds, rings, last_good, restarted, latest), or None for a figure source.
    """

    trends: Trends
    flag_state: FlagState
    watcher: Any = None


@dataclass(frozen=True)
class PollRecord:
    """One poll of one fleet, as the console saw it."""

    fleet: str
    at: float  # the moment the view was built (the `now` of its flags)
    watched_at: float  # the watcher's `now` for the window math
    source: str  # "scrape", "prometheus", ...
    window_seconds: float
    interval_seconds: float
    results: tuple[TargetResult, ...] | None  # a sample source's raw results; None for a figure source
    figures: FleetFigures | None = None  # kept (as JSON) only for a figure source, whose raw data is elsewhere
    plan: Plan | None = None
    flag_changes: tuple[FlagChange, ...] = ()
    source_error: str = ""
    plan_clock: float | None = None  # where in its week the plan was read (FleetHandle.plan_time)
    state: PollState | None = None  # written as a replay checkpoint (console.store.checkpoints)


@dataclass(frozen=True)
class RecordedPoll:
    id: int
    fleet: str
    at: float
    watched_at: float
    source: str
    window_seconds: float
    interval_seconds: float
    source_error: str
    plan_id: int | None
    results: tuple[TargetResult, ...] | None
    figures: FleetFigures | None
    plan_clock: float | None = None


@dataclass(frozen=True)
class FleetInfo:
    id: int
    name: str
    first_at: float | None
    last_at: float | None
    polls: int


@dataclass(frozen=True)
class PlanVersion:
    id: int
    hash: str
    name: str
    path: str | None
    text: str
    first_seen: float


@dataclass(frozen=True)
class FlagEvent:
    fleet: str
    at: float
    change: str  # "raised" or "cleared"
    flag_id: str
    kind: str
    subject: str
    severity: str
    since: float
    why: str
    todo: str
    figures: dict | None


@dataclass(frozen=True)
class Event:
    at: float
    fleet: str | None
    kind: str
    subject: str | None
    detail: dict | None
