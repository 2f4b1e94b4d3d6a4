"""Opening a history file for replay: which fleets, which of their polls, and the plan in force at each poll.

    replay = open_replay(path, fleets=None, start=None, end=None)   # UserError: one line, exit 2
    replay.fleets[0].read(lo, hi)                                   # RecordedPolls, oldest first

A fleet keeps the index of every poll it has in the file, not only those in the
chosen range: a replay that starts at `start` warms its flags and trends up on the
polls before it (console.replay.fleet_replay).
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from console.errors import UserError
from console.plan.model import Plan
from console.store.database import Store
# What the recorder writes when a console or `capcon record` starts and stops.
from console.store.recorder import STARTED as RECORDING_STARTED, STOPPED as RECORDING_STOPPED
from console.store.records import RecordedPoll


def shown_time(at: float) -> str:
    """A recorded moment as people read it: local time, `2026-11-30 14:03:22`."""
    try:
        from console.store.when import format_when  # noqa: PLC0415 - the shared formatter, when present
    except ImportError:
        from datetime import datetime  # noqa: PLC0415

        return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")
    return format_when(at)


class RecordedFleet:
    """One fleet's recorded polls: an index in time order, read in batches, and its plan versions parsed once."""

    def __init__(
        self, store: Store, name: str, polls: list[tuple[int, float]], first: int, last: int, lock: threading.Lock,
        session_starts: frozenset[int] = frozenset(),
    ) -> None:
        self.store = store
        self.name = name
        self.ids = tuple(poll_id for poll_id, _ in polls)
        self.times = tuple(at for _, at in polls)
        self.first = first  # index of the first poll inside the chosen range
        self.last = last  # and of the last one
        # Polls that a newly started console took first: it began with no view and an empty watcher.
        self.session_starts = session_starts
        self._lock = lock  # one connection, shared by every fleet of the file
        self._plans: dict[int, Plan | None] = {}

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

    def index_from(self, at: float) -> int:
        """The first poll taken at or after `at`."""
        return bisect_left(self.times, at)

    def read(self, lo: int, hi: int) -> list[RecordedPoll]:
        """Polls lo..hi (inclusive), decoded: samples back into TargetResults, or a figure source's figures."""
        with self._lock:
            return [self.store.poll(poll_id) for poll_id in self.ids[lo : hi + 1]]

    def plan(self, plan_id: int | None) -> Plan | None:
        """The plan version a poll was compared with, parsed from the text stored with it."""
        if plan_id is None:
            return None
        if plan_id not in self._plans:
            with self._lock:
                version = self.store.plan_version(plan_id)
            self._plans[plan_id] = _parse(version) if version is not None else None
        return self._plans[plan_id]

    def first_plan(self) -> Plan | None:
        """The plan in force at the start of the range (what the plan screen shows)."""
        poll = self.read(self.first, self.first)[0]
        return self.plan(poll.plan_id)


def _parse(version) -> Plan | None:
    from console.plan.schema import parse_plan  # noqa: PLC0415 - the YAML reader, only when a plan was recorded

    try:
        return parse_plan(version.text, version.path or f"{version.name}.yaml")
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

    def close(self) -> None:
        with self.lock:
            self.store.close()


def open_replay(path: str | Path, fleets: list[str] | None = None, start: float | None = None, end: float | None = None) -> Replay:
    """Open `path` read-only and index the polls of `fleets` (every fleet in the file when None) in [start, end].

    Raises UserError (one line) for a missing or foreign file, a fleet the file does not hold,
    or a range without polls.
    """
    shown = str(path)
    if start is not None and end is not None and start > end:
        raise UserError(f"--from {shown_time(start)} is after --to {shown_time(end)}; expected --from before --to")
    store = Store.open(path, read_only=True)
    try:
        return _index(store, shown, fleets, start, end)
    except BaseException:
        store.close()
        raise


def _index(store: Store, shown: str, names: list[str] | None, start: float | None, end: float | None) -> Replay:
    recorded = [info for info in store.fleets() if info.polls]
    if not recorded:
        raise UserError(f"{shown}: no polls recorded yet; expected a history written by `capcon watch` or `capcon record`")
    known = [info.name for info in recorded]
    chosen = list(dict.fromkeys(names)) if names else known
    for name in chosen:
        if name not in known:
            raise UserError(f"--fleet {name!r}: not recorded in {shown}; expected one of {', '.join(known)}")
    lock = threading.Lock()
    runs = _runs(store)
    fleets = []
    for name in chosen:
        polls = store.poll_times(name)
        times = [at for _, at in polls]
        first = bisect_left(times, start) if start is not None else 0
        last = bisect_right(times, end) - 1 if end is not None else len(times) - 1
        if first > last:
            if names:  # asked for by name: say why it cannot be shown
                raise UserError(
                    f"--fleet {name!r}: no polls between {_bound(start, 'its start')} and {_bound(end, 'its end')}; "
                    f"{shown} holds it from {shown_time(times[0])} to {shown_time(times[-1])}"
                )
            continue
        fleets.append(RecordedFleet(store, name, polls, first, last, lock, _session_starts(times, runs)))
    if not fleets:
        spans = "; ".join(f"{i.name} {shown_time(i.first_at)} to {shown_time(i.last_at)}" for i in recorded)
        raise UserError(f"{shown}: no polls between {_bound(start, 'the start')} and {_bound(end, 'the end')}; recorded: {spans}")
    return Replay(shown, store, fleets, min(f.start for f in fleets), max(f.end for f in fleets), lock)




def _runs(store: Store) -> tuple[list[float], list[float]]:
    """When recording processes started and stopped (cleanly), oldest first."""
    events = store.events()
    return (
        [e.at for e in events if e.kind == RECORDING_STARTED],
        [e.at for e in events if e.kind == RECORDING_STOPPED],
    )


def _session_starts(times: list[float], runs: tuple[list[float], list[float]]) -> frozenset[int]:
    """Polls that began a new console run: a recorder started since the poll before, and that run had ended.

    A start alone is not enough: a second recorder (another fleet, another terminal) may start while
    this fleet's console keeps polling. Its run ended when a stop was recorded in between, or when the
    gap is longer than two of its intervals (a crash writes no stop).
    """
    started, stopped = runs
    found = set()
    for start in started:
        index = bisect_left(times, start)
        if index == 0 or index >= len(times):
            continue
        before, after = times[index - 1], times[index]
        usual = before - times[index - 2] if index >= 2 else after - before
        stop = bisect_left(stopped, before)
        if (stop < len(stopped) and stopped[stop] <= start) or after - before > 2 * usual:
            found.add(index)
    return frozenset(found)


def _bound(at: float | None, words: str) -> str:
    return shown_time(at) if at is not None else words


def first_view(path: str | Path, fleets: list[str] | None = None, start: float | None = None, end: float | None = None):
    """Open a replay and compute its first frame, as `capcon replay` does before drawing: (controller, frame).

    What benchmarks time as "time to open a replay" (file open, poll index, warm-up, first views).
    """
    from console.replay.controller import ReplayController  # noqa: PLC0415 - the controller builds on this module

    replay = open_replay(path, fleets, start, end)
    controller = ReplayController(replay, playing=False, start=start)
    return controller, controller.open()
