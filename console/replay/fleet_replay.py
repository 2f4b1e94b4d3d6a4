"""One fleet's views rebuilt from its recorded polls, exactly as the live console built them.

Each recorded poll goes through the same steps as a live one:

    figures = watcher.replay(poll.results, poll.watched_at)     # or poll.figures (a figure source)
    view = advance(previous, fleet, figures, plan_now(plan, poll.plan_clock), poll.at,
                   profile=plan_profile(plan, poll.plan_clock))

so feeding every poll in order gives the same flags at the same moments. Going
back or jumping far ahead cannot skip polls: the flags and trends remember the
last minutes. A jump carries on from the checkpoint the console stored before the
target in the same run (console.replay.restore: the live state after that poll, a
few dozen polls back), or, in a file without one (an older capcon, other flag
rules), restarts the chain WARMUP_SECONDS before the target (or at the start of
the console run that took it, if later) and feeds every poll from there; whichever
computes fewer polls. Stepping back restores a keyframe (the watcher's rings and
the view, taken every KEYFRAME_EVERY polls) and feeds the few polls after it, when
the chain already held enough warm figures at that moment; otherwise it starts again.

What a warm-up cannot know: a condition that held since before it began. Such a
flag shows as raised (after its minimum duration) with its `since` at the warm-up
start; everything else (figures, trends, flags born inside the warm-up) is what a
replay from the start shows. A chain from a checkpoint shows exactly that too.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

from console.ahead.profile import plan_profile
from console.fleet.plan_now import plan_now
from console.fleet.view import FleetView, advance
from console.live.watcher import RecordedSource, Watcher, WatcherMemory
from console.replay.loader import RecordedFleet
from console.replay.restore import restore
from console.store.records import RecordedPoll

# What the flags and trends remember: trends 600 s, a drift looks back 120 s, a restart is held
# 300 s, minimum durations 30-120 s. Fifteen minutes of polls before a target covers all of them.
WARMUP_SECONDS = 15 * 60.0
# The trends a view carries (advance()'s span): a chain shows the views of a full replay once it holds
# this much, plus two windows for the watcher's rings, of warm figures.
TREND_SPAN_SECONDS = 600.0
KEYFRAME_EVERY = 30  # polls between keyframes: stepping back one poll recomputes at most this many
# What restoring a checkpoint costs, in polls fed: it reads back the polls holding the window's samples.
RESTORE_COST = 15  # measured: about as long as feeding 15 polls (20 replicas, a 60 s window at 1 s)
KEYFRAME_REACH_SECONDS = 30 * 60.0  # keyframes kept this far either side of the replay clock (memory stays bounded)


class ReplayStopped(Exception):
    """The console is closing: a warm-up in progress gives up between batches."""


@dataclass(frozen=True)
class Restore:
    index: int  # the checkpointed poll a chain carries on from


@dataclass(frozen=True)
class Keyframe:
    index: int  # the last poll fed
    watcher: WatcherMemory | None
    view: FleetView | None
    poll: RecordedPoll | None


class FleetReplay:
    """Where one fleet's replay stands: the last poll fed (`position`) and the view it gave."""

    def __init__(
        self, recorded: RecordedFleet, warmup_seconds: float = WARMUP_SECONDS, stopping: threading.Event | None = None
    ) -> None:
        self.recorded = recorded
        self.stopping = stopping  # a threading.Event: set when the console closes
        self.warmup_seconds = warmup_seconds
        self.position = -1  # index of the last poll fed; -1: none yet
        self.view: FleetView | None = None
        self.poll: RecordedPoll | None = None  # the last poll fed, without its samples
        self._watcher: Watcher | None = None
        self._keyframes: dict[int, Keyframe] = {
            -1: Keyframe(-1, None, None, None)
        }  # the current chain's, by poll index
        self._chain_start = 0  # the first poll the current chain fed: it remembers nothing before it
        self._unusable: set[int] = set()  # checkpoints that could not be read back

    @property
    def name(self) -> str:
        return self.recorded.name

    def cost(self, index: int) -> int:
        """How many polls `go_to(index)` would compute."""
        return self._plan(index)[1]

    def go_to(self, index: int) -> int:
        """Make `view` the view at poll `index` (-1: before the recording); returns the polls computed."""
        index = min(index, len(self.recorded.times) - 1)
        if index == self.position:
            return 0
        if index < 0:
            self._reset(-1)
            return 0
        origin, _ = self._plan(index)
        if isinstance(origin, Restore):
            if not self._restore(origin.index):
                self._unusable.add(origin.index)  # plan again without it
                return self.go_to(index)
        elif isinstance(origin, Keyframe):
            self._load(origin)
        elif isinstance(origin, int) and origin != self.position:  # (None only for a move to where it stands)
            self._reset(origin - 1)  # a new chain: nothing remembered before `origin`
        return self._feed(index)

    def _plan(self, index: int) -> tuple[Keyframe | Restore | int | None, int]:
        """Where to compute `index` from (the current position, a keyframe, a checkpoint, or a warm-up start)
        and how many polls that computes: the cheapest of them."""
        if index == self.position or index < 0:
            return None, 0
        # Nothing before the console run that took the poll counts: that run started from nothing too.
        session = self.recorded.session_start(index)
        warm = max(self.recorded.index_from(self.recorded.times[index] - self.warmup_seconds), session)
        exact = self._chain_start <= session  # the current chain began with the run (or at a checkpoint of it)
        # (estimated cost, origin, polls computed); on a tie the first listed wins.
        choices: list[tuple[float, Keyframe | Restore | int, int]] = []
        if self.position < index and (self.position + 1 >= warm or exact):
            choices.append((index - self.position, self.position, index - self.position))
        # A keyframe serves only if its chain reaches back at least as far as a warm-up would: one taken
        # early in a chain started for a later target has not warmed up yet (its trends begin mid-way).
        if self._warm_enough(index):
            low = session - 1 if exact else warm - 1
            kept = [i for i in self._keyframes if low <= i <= index]
            if kept:
                best = self._keyframes[max(kept)]
                choices.append((index - best.index, best, index - best.index))
        stored = self._checkpoint_before(index, session)
        if stored is not None:
            choices.append((index - stored + RESTORE_COST, Restore(stored), index - stored))
        choices.append((index - warm + 1, warm, index - warm + 1))
        _, origin, computed = min(choices, key=lambda choice: choice[0])
        return origin, computed

    def _checkpoint_before(self, index: int, session: int) -> int | None:
        """The latest usable checkpoint of the run of poll `index` before it."""
        checkpoints = self.recorded.checkpoints
        at = bisect_left(checkpoints, index) - 1
        while at >= 0 and checkpoints[at] >= session:
            if checkpoints[at] not in self._unusable:
                return checkpoints[at]
            at -= 1
        return None

    def _restore(self, index: int) -> bool:
        restored = restore(self.recorded, index)
        if restored is None:
            return False
        self._watcher, self.view = restored
        self.position, self.poll = index, None
        self._chain_start = self.recorded.session_start(index)  # as good as a chain from the run's start
        self._keyframes = {}  # the view after `index` itself was not rebuilt: nothing to step back to there
        return True

    def _warm_enough(self, index: int) -> bool:
        """Whether the current chain remembers enough before poll `index` to show the view a full replay shows there."""
        if self._chain_start <= self.recorded.session_start(index):
            return True  # it began with the console run itself
        times = self.recorded.times
        window = self.poll.window_seconds if self.poll is not None else 0.0
        needed = min(self.warmup_seconds, TREND_SPAN_SECONDS + 2 * window)
        return times[index] - times[self._chain_start] >= needed

    def _reset(self, index: int) -> None:
        self.position, self.view, self.poll, self._watcher = index, None, None, None
        self._chain_start = index + 1
        self._keyframes = {index: Keyframe(index, None, None, None)}

    def _load(self, keyframe: Keyframe) -> None:
        self.position, self.view, self.poll = keyframe.index, keyframe.view, keyframe.poll
        self._watcher = Watcher.from_memory(keyframe.watcher) if keyframe.watcher is not None else None

    def _feed(self, index: int) -> int:
        start = self.position + 1
        fed = 0
        # In batches: a long warm-up never holds every decoded poll in memory at once.
        for lo in range(start, index + 1, 120):
            if self.stopping is not None and self.stopping.is_set():
                self._reset(-1)  # half a chain is no view to keep
                raise ReplayStopped()
            hi = min(lo + 119, index)
            for poll in self.recorded.read(lo, hi):
                self._step(poll)
                fed += 1
                if self.position % KEYFRAME_EVERY == 0:
                    self._keep()
        self._trim()
        return fed

    def _step(self, poll: RecordedPoll) -> None:
        index = self.position + 1
        if index in self.recorded.session_starts:
            self.view, self._watcher = None, None  # a new console run: no view, no samples remembered
        if poll.figures is not None:
            figures = poll.figures  # a figure source: what it answered is what the console showed
        else:
            watcher = self._watcher
            if watcher is None or watcher.source_name != poll.source or watcher.window_seconds != poll.window_seconds:
                if watcher is None:
                    # The run's watcher kept the interval it started with (its window slack depends on it);
                    # a later poll may record another one (older consoles wrote the one set with +/-).
                    interval = self.recorded.run_interval(index, poll)
                else:
                    self.view = None  # a new source or window is a new console run: empty watcher, no view
                    interval = poll.interval_seconds
                watcher = self._watcher = Watcher(
                    RecordedSource(poll.source), poll.window_seconds, interval_seconds=interval
                )
            figures = watcher.replay(poll.results or (), poll.watched_at)
        plan, clock = self.recorded.plan(poll.plan_id), poll.plan_clock
        expected = plan_now(plan, clock) if plan is not None and clock is not None else None
        # The plan's next half hour, as the live feed hands it to the forecast: the same flags on replay.
        profile = plan_profile(plan, clock) if plan is not None and clock is not None else None
        self.view = advance(self.view, self.recorded.name, figures, expected, poll.at, profile=profile)
        self.position += 1
        self.poll = RecordedPoll(
            poll.id,
            poll.fleet,
            poll.at,
            poll.watched_at,
            poll.source,
            poll.window_seconds,
            poll.interval_seconds,
            poll.source_error,
            poll.plan_id,
            None,
            None,
            poll.plan_clock,
        )

    def _keep(self) -> None:
        state = self._watcher.memory() if self._watcher is not None else None
        self._keyframes[self.position] = Keyframe(self.position, state, self.view, self.poll)

    def _trim(self) -> None:
        if self.position < 0 or not self._keyframes:
            return
        now = self.recorded.times[self.position]
        times = self.recorded.times
        self._keyframes = {
            i: k for i, k in self._keyframes.items() if i < 0 or abs(times[i] - now) <= KEYFRAME_REACH_SECONDS
        }
