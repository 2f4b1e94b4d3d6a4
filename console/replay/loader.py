"""Opening a history file for replay: which fleets, which of their polls, and the plan in force at each poll.

    replay = open_replay(path, fleets=None, start=None, end=None, estimate=None)   # UserError: one line, exit 2
    replay.fleets[0].read(lo, hi)                                   # RecordedPolls, oldest first

A fleet keeps the index of every poll it has in the file, not only those in the
chosen range: a replay that starts at `start` warms its flags and trends up on the
polls before it (console.replay.fleet_replay).

Recorded plans are read through the plan's own reader (console.plan.schema). A plan recorded without
a measured capacity needs `estimate`, the step that fills one in, handed down by the command (which
passes the planner's estimate, as `capcon watch` did when it recorded); without it such a plan cannot
be read and its fleet is replayed without a plan.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

from console.errors import UserError
from console.plan.model import Plan
from console.store.checkpoints import StoredState, checkpoint_polls, read_state
from console.store.database import Store, reading_errors

# What the recorder writes when a console or `capcon record` starts and stops.
from console.store.recorder import STARTED as RECORDING_STARTED
from console.store.recorder import STOPPED as RECORDING_STOPPED
from console.store.records import Event, PlanVersion, RecordedPoll
from console.when import format_when

if TYPE_CHECKING:
    from console.plan.schema import CapacityEstimator

USUAL_GAPS = 8  # gaps before a poll that say how far apart its run polls (files without recorded starts)


def shown_time(at: float) -> str:
    """A recorded moment as people read it: local time, `2026-11-30 14:03:22`."""
    return format_when(at)


class RecordedFleet:
    """One fleet's recorded polls: an index in time order, read in batches, and its plan versions parsed once."""

    def __init__(
        self,
        store: Store,
        name: str,
        polls: list[tuple[int, float]],
        first: int,
        last: int,
        lock: threading.Lock,
        session_starts: frozenset[int] = frozenset(),
        estimate: CapacityEstimator | None = None,
    ) -> None:
        self.store = store
        self.name = name
        # Lists: a replay of a file still being recorded appends the polls written since (`extend`).
        self.ids = [poll_id for poll_id, _ in polls]
        self.times = [at for _, at in polls]
        self.first = first  # index of the first poll inside the chosen range
        self.last = last  # and of the last one
        # Polls that a newly started console took first: it began with no view and an empty watcher.
        self.session_starts = session_starts
        self._lock = lock  # one connection, shared by every fleet of the file
        self._plans: dict[int, Plan | None] = {}
        self._estimate = estimate  # fills in a recorded plan's capacity when it names none
        self.checkpoints: list[int] = []  # indexes of the polls stored with a checkpoint this build can use
        self._find_checkpoints()

    def _find_checkpoints(self) -> None:
        fleet_id = self.store.fleet_id(self.name)
        stored = checkpoint_polls(self.store.connection, fleet_id) if fleet_id is not None else []
        if not stored:
            self.checkpoints = []
            return
        where = {poll_id: i for i, poll_id in enumerate(self.ids)}
        self.checkpoints = sorted(where[poll_id] for poll_id in stored if poll_id in where)

    def checkpoint(self, index: int) -> StoredState | None:
        """The checkpoint stored with poll `index` (None when it cannot be used), read back."""
        with self._lock, reading_errors(self.store.path):
            return read_state(self.store.connection, self.ids[index])

    def polls_by_id(self, poll_ids: list[int]) -> dict[int, RecordedPoll]:
        """Polls named by id (those still in the file), decoded."""
        with self._lock, reading_errors(self.store.path):
            found = {}
            for poll_id in poll_ids:
                try:
                    found[poll_id] = self.store.poll(poll_id)
                except KeyError:
                    continue
            return found

    @property
    def start(self) -> float:
        return self.times[self.first]

    @property
    def end(self) -> float:
        return self.times[self.last]

    def index_at(self, at: float) -> int:
        """The last poll taken at or before `at` (-1 when the recording starts later)."""
        return bisect_right(self.times, at) - 1

    def session_start(self, index: int) -> int:
        """The first poll of the console run that took poll `index` (0 when the file says nothing of runs)."""
        return max((i for i in self.session_starts if i <= index), default=0)

    def run_interval(self, index: int, poll: RecordedPoll) -> float:
        """The interval the watcher of poll `index`'s console run was built with: the one its first poll recorded.

        A run's first poll with another source or window than `poll` was not this watcher's: then `poll`'s own.
        """
        first = self.session_start(index)
        if first == index:
            return poll.interval_seconds
        with self._lock:
            row = self.store.connection.execute(
                "SELECT source, window_seconds, interval_seconds FROM polls WHERE id = ?", (self.ids[first],)
            ).fetchone()
        if row is None or (row[0], row[1]) != (poll.source, poll.window_seconds):
            return poll.interval_seconds
        return row[2]

    def extend(self, fresh: list[tuple[int, float]], session_starts: frozenset[int]) -> None:
        """Append polls written after the last one indexed, and the runs they start (indexes in the longer list)."""
        before = len(self.times)
        self.ids.extend(poll_id for poll_id, _ in fresh)
        self.times.extend(at for _, at in fresh)
        # Runs already indexed keep their starts: chains and keyframes computed on them stay valid.
        self.session_starts = self.session_starts | frozenset(i for i in session_starts if i >= before)
        self.last = len(self.times) - 1  # the new polls are inside the range: refresh reads none past --to
        self._find_checkpoints()  # the caller holds the lock

    def index_from(self, at: float) -> int:
        """The first poll taken at or after `at`."""
        return bisect_left(self.times, at)

    def read(self, lo: int, hi: int) -> list[RecordedPoll]:
        """Polls lo..hi (inclusive), decoded: samples back into TargetResults, or a figure source's figures.

        A damaged file raises DamagedHistory (its words say what to do): the console shows them."""
        with self._lock, reading_errors(self.store.path):
            return [self.store.poll(poll_id) for poll_id in self.ids[lo : hi + 1]]

    def plan(self, plan_id: int | None) -> Plan | None:
        """The plan version a poll was compared with, parsed from the text stored with it."""
        if plan_id is None:
            return None
        if plan_id not in self._plans:
            with self._lock, reading_errors(self.store.path):
                version = self.store.plan_version(plan_id)
            self._plans[plan_id] = _parse(version, self._estimate) if version is not None else None
        return self._plans[plan_id]

    def first_plan(self) -> Plan | None:
        """The plan in force at the start of the range (what the plan screen shows)."""
        poll = self.read(self.first, self.first)[0]
        return self.plan(poll.plan_id)


def _parse(version: PlanVersion, estimate: CapacityEstimator | None) -> Plan | None:
    # The YAML reader only when a plan was recorded; one recorded without a capacity is estimated as live.
    from console.plan.schema import parse_plan  # noqa: PLC0415

    try:
        return parse_plan(version.text, version.path or f"{version.name}.yaml", estimate)
    except UserError:
        # A plan text this build no longer reads: the fleet is replayed without a plan rather than not at all.
        return None


@dataclass
class Replay:
    """An open history file and the fleets to replay from it, over [start, end]."""

    path: str
    store: Store
    fleets: list[RecordedFleet]
    start: float
    end: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    bound: float | None = None  # the end asked for (--to): polls written later are not part of this replay

    def refresh(self) -> int:
        """Index the polls written since the file was indexed (a recorder may still be writing it); returns how many.

        Cheap: only polls at or after each fleet's last indexed one are read, and the recorder's
        start and stop events for the runs they begin. Plan versions are read when a poll needs them.
        """
        if self.bound is not None and self.end >= self.bound:
            return 0
        with self.lock, reading_errors(self.path):
            events = _recorder_events(self.store)
            added = 0
            for fleet in self.fleets:
                indexed = set(
                    fleet.ids[fleet.index_from(fleet.times[-1]) :]
                )  # the last moment's polls, read again by `>=`
                fresh = [
                    (i, at)
                    for i, at in self.store.poll_times(fleet.name, fleet.times[-1], self.bound)
                    if i not in indexed
                ]
                if fresh:
                    times = fleet.times + [at for _, at in fresh]
                    fleet.extend(fresh, _session_starts(fleet.name, times, events))
                    added += len(fresh)
        if added:
            self.end = max(f.end for f in self.fleets)
        return added

    def recording_stopped(self) -> bool:
        """Whether every replayed fleet's recorder said it stopped (after its last poll indexed): then the end is the end."""
        with self.lock, reading_errors(self.path):
            events = _recorder_events(self.store)
        return all(_stopped(fleet.name, fleet.times[-1], events) for fleet in self.fleets)

    def close(self) -> None:
        with self.lock:
            self.store.close()


def open_replay(
    path: str | Path,
    fleets: list[str] | None = None,
    start: float | None = None,
    end: float | None = None,
    estimate: CapacityEstimator | None = None,
) -> Replay:
    """Open `path` read-only and index the polls of `fleets` (every fleet in the file when None) in [start, end].

    Raises UserError (one line) for a missing or foreign file, a fleet the file does not hold,
    or a range without polls.
    """
    shown = str(path)
    if start is not None and end is not None and start > end:
        raise UserError(f"--from {shown_time(start)} is after --to {shown_time(end)}; expected --from before --to")
    store = Store.open(path, read_only=True)
    try:
        with reading_errors(shown):
            return _index(store, shown, fleets, start, end, estimate)
    except BaseException:
        store.close()
        raise


def _index(
    store: Store,
    shown: str,
    names: list[str] | None,
    start: float | None,
    end: float | None,
    estimate: CapacityEstimator | None = None,
) -> Replay:
    recorded = [info for info in store.fleets() if info.polls]
    if not recorded:
        raise UserError(
            f"{shown}: no polls recorded yet; expected a history written by `capcon watch` or `capcon record`"
        )
    known = [info.name for info in recorded]
    chosen = list(dict.fromkeys(names)) if names else known
    for name in chosen:
        if name not in known:
            raise UserError(f"--fleet {name!r}: not recorded in {shown}; expected one of {', '.join(known)}")
    lock = threading.Lock()
    events = _recorder_events(store)
    fleets = []
    for name in chosen:
        fleet = _recorded(store, name, start, end, lock, events, estimate)
        if fleet.first > fleet.last:
            if names:  # asked for by name: say why it cannot be shown
                raise UserError(
                    f"--fleet {name!r}: no polls between {_bound(start, 'its start')} and {_bound(end, 'its end')}; "
                    f"{shown} holds it from {shown_time(fleet.times[0])} to {shown_time(fleet.times[-1])}"
                )
            continue
        fleets.append(fleet)
    if not fleets:
        spans = "; ".join(
            f"{i.name} {shown_time(i.first_at)} to {shown_time(i.last_at)}"
            for i in recorded
            if i.first_at is not None and i.last_at is not None  # always: `recorded` holds fleets with polls
        )
        raise UserError(
            f"{shown}: no polls between {_bound(start, 'the start')} and {_bound(end, 'the end')}; recorded: {spans}"
        )
    return Replay(shown, store, fleets, min(f.start for f in fleets), max(f.end for f in fleets), lock, end)


def recorded_fleets(
    store: Store,
    names: list[str],
    start: float | None = None,
    end: float | None = None,
    estimate: CapacityEstimator | None = None,
) -> list[RecordedFleet]:
    """The fleets among `names` with polls in [start, end], indexed with their runs, on a store opened elsewhere."""
    lock = threading.Lock()
    events = _recorder_events(store)
    fleets = [_recorded(store, name, start, end, lock, events, estimate) for name in names]
    return [f for f in fleets if f.first <= f.last]


def _recorded(
    store: Store,
    name: str,
    start: float | None,
    end: float | None,
    lock: threading.Lock,
    events: list[Event],
    estimate: CapacityEstimator | None = None,
) -> RecordedFleet:
    polls = store.poll_times(name)
    times = [at for _, at in polls]
    first = bisect_left(times, start) if start is not None else 0
    last = bisect_right(times, end) - 1 if end is not None else len(times) - 1
    return RecordedFleet(store, name, polls, first, last, lock, _session_starts(name, times, events), estimate)


def _recorder_events(store: Store) -> list[Event]:
    """Every recorder start and clean stop in the file, oldest first."""
    return [e for e in store.events() if e.kind in (RECORDING_STARTED, RECORDING_STOPPED)]


def _writer(event: Event) -> tuple:
    detail = event.detail or {}
    return detail.get("host"), detail.get("pid")


def _stopped(fleet: str, last_poll: float, events: list[Event]) -> bool:
    """Whether the process that recorded `fleet` last wrote its stop: the latest start naming it has a later
    stop from the same process (host, pid); in a file without starts, a stop after its last poll."""
    starts = [e for e in events if e.kind == RECORDING_STARTED and _names(e, fleet)]
    if not starts:
        return any(e.kind == RECORDING_STOPPED and e.at >= last_poll for e in events)
    latest = starts[-1]
    return any(
        e.kind == RECORDING_STOPPED and e.at >= max(latest.at, last_poll) and _writer(e) == _writer(latest)
        for e in events
    )


def _names(event: Event, fleet: str) -> bool:
    """Whether a recorder start concerns `fleet`: it names it, or names no fleet at all (then it may be any)."""
    if event.fleet is not None:
        return event.fleet == fleet
    named = (event.detail or {}).get("fleets")
    if isinstance(named, (list, tuple)) and named:
        return fleet in named
    return True


def _session_starts(fleet: str, times: list[float], events: list[Event]) -> frozenset[int]:
    """Polls a newly started recording process took first: it began with an empty watcher and no flags.

    A recorder start that names this fleet (or no fleet) begins a new run at the first poll at or
    after it, gap or no gap: a process killed and restarted at once (systemd Restart=) writes no stop
    and leaves no gap. Starts of other fleets' recorders leave this fleet's run alone.
    """
    if not any(e.kind == RECORDING_STARTED for e in events):
        return _gaps(times, [e.at for e in events if e.kind == RECORDING_STOPPED])
    found = set()
    for event in events:
        if event.kind == RECORDING_STARTED and _names(event, fleet):
            index = bisect_left(times, event.at)
            if 0 < index < len(times):
                found.add(index)
    return frozenset(found)


def _gaps(times: list[float], stopped: list[float]) -> frozenset[int]:
    """A file that recorded no starts: a new run after a recorded stop, or after a gap of over twice the usual one.

    The usual gap is the median of the few before it: a late poll (jitter, a slow target) is not a restart.
    """
    found = set()
    gaps = [after - before for before, after in pairwise(times)]
    for index in range(1, len(times)):
        gap = gaps[index - 1]
        usual = median(gaps[max(0, index - 1 - USUAL_GAPS) : index - 1] or [gap])
        stop = bisect_left(stopped, times[index - 1])
        if (stop < len(stopped) and stopped[stop] < times[index]) or gap > 2 * usual:
            found.add(index)
    return frozenset(found)


def _bound(at: float | None, words: str) -> str:
    return shown_time(at) if at is not None else words
