"""The replay clock and what the keys do to it: play, pause, speed, step, jump, seek.

The clock is the recorded moment on screen. Playing moves it by the wall time
elapsed times the speed; each fleet then shows the view of its last poll at or
before the clock (every poll in between is fed, only the last one is drawn).

A file may still be written by a recorder: reaching the end (playing, stepping, End, a
go-to or jump past it) first indexes the polls written since, and carries on through them.

Every method that moves the clock computes views, which can take a while after a
seek (a warm-up): the console calls them on a worker thread, one at a time, and
draws the Frame they return.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from console.fleet.overflow import ATTEMPT_KIND, SWITCH_KIND, SwitchNote, notes_from_events
from console.fleet.view import FleetView
from console.replay import MAX_SPEED, MIN_SPEED
from console.replay.fleet_replay import WARMUP_SECONDS, FleetReplay
from console.replay.loader import Replay, open_replay, shown_time
from console.store.records import RecordedPoll

if TYPE_CHECKING:
    from console.plan.schema import CapacityEstimator

# A stalled event loop (a suspended terminal) must not fling the clock far ahead when it wakes.
MAX_WALL_STEP_SECONDS = 1.0
END_WORDS = "end of recording"


def end_words(last: float, stopped: bool) -> str:
    """What reaching the end says: plainly when the recorder said it stopped, else that more may come."""
    if stopped:
        return END_WORDS
    return f"{END_WORDS} (last poll {shown_time(last)[-8:]}; the recorder may still be writing: press End again to catch up)"


@dataclass(frozen=True)
class Frame:
    """What the console draws after a move: the clock, each fleet's view, and what to tell the operator."""

    at: float
    views: tuple[FleetView | None, ...]
    polls: tuple[RecordedPoll | None, ...]  # each fleet's last poll fed (interval, source), without samples
    playing: bool
    speed: float
    computed: int = 0  # polls fed for this move
    ended: bool = False  # this move reached the end of the recording
    note: str = ""
    # Each fleet's overflow switches up to `at`, newest first: the flags panel's timeline, as it read live.
    switches: tuple[tuple[SwitchNote, ...], ...] = ()


def speed_words(speed: float) -> str:
    return f"×{speed:g}"


def frame_words(frame: Frame) -> str:
    """The header's replay text: the recorded moment, the speed, and ▶ playing or ‖ paused."""
    return f"{shown_time(frame.at)} {speed_words(frame.speed)} {'▶' if frame.playing else '‖'}"


class ReplayController:
    def __init__(
        self,
        replay: Replay,
        speed: float = 1.0,
        playing: bool = True,
        start: float | None = None,
        wall: Callable[[], float] = time.monotonic,
        warmup_seconds: float = WARMUP_SECONDS,
    ) -> None:
        self.replay = replay
        self.stopping = threading.Event()
        self.fleets = [FleetReplay(f, warmup_seconds, self.stopping) for f in replay.fleets]
        self.start, self.end = replay.start, replay.end
        self.speed = min(max(speed, MIN_SPEED), MAX_SPEED)
        self.playing = playing
        self.at = min(max(start if start is not None else self.start, self.start), self.end)
        self._wall = wall
        self._mark = wall()
        self._switch_events = self._read_switch_events()

    def stop(self) -> None:
        """The console is closing: a move in progress stops at its next batch of polls."""
        self.stopping.set()

    # --- reading ---------------------------------------------------------------

    def words(self) -> str:
        return frame_words(self.frame())

    def cost(self, at: float) -> int:
        """Polls to compute to show `at`: the console says "seeking…" when it is many."""
        at = self._clamp(at)
        return sum(f.cost(f.recorded.index_at(at)) for f in self.fleets)

    def frame(self, computed: int = 0, ended: bool = False, note: str = "") -> Frame:
        return Frame(
            self.at,
            tuple(f.view for f in self.fleets),
            tuple(f.poll for f in self.fleets),
            self.playing,
            self.speed,
            computed,
            ended,
            note,
            tuple(self._switches_of(f.recorded.name) for f in self.fleets),
        )

    def _read_switch_events(self) -> dict[str, list[tuple[float, str, dict | None]]]:
        """The recording's overflow switches (asked for, and taken by a gateway), by fleet: read once, and again
        when the recording grows."""
        with self.replay.lock:
            events = self.replay.store.events(None, self.replay.end)
        by_fleet: dict[str, list[tuple[float, str, dict | None]]] = {}
        for event in events:
            if event.kind in (ATTEMPT_KIND, SWITCH_KIND) and event.fleet is not None:
                by_fleet.setdefault(event.fleet, []).append((event.at, event.kind, event.detail))
        return by_fleet

    def _switches_of(self, fleet: str) -> tuple[SwitchNote, ...]:
        events = self._switch_events.get(fleet, [])
        return notes_from_events([e for e in events if e[0] <= self.at])

    # --- moving (worker thread, one at a time) ------------------------------------

    def open(self) -> Frame:
        """The first frame: the views at the starting moment (warmed up on the polls before it)."""
        return self._move(self.at)

    def tick(self) -> Frame | None:
        """Playing: move the clock by the wall time since the last tick times the speed; None when paused."""
        wall = self._wall()
        elapsed = min(max(wall - self._mark, 0.0), MAX_WALL_STEP_SECONDS)
        self._mark = wall
        if not self.playing:
            return None
        target = self.at + elapsed * self.speed
        if target >= self.end and not self._catch_up():
            self.playing = False
            return self._move(self.end, ended=True, note=self._end_words())
        return self._move(min(target, self.end), playing_on=True)

    def toggle(self) -> Frame:
        """Play or pause; playing at the end plays on through polls written since, or else starts again from the start."""
        self._mark = self._wall()
        if self.playing:
            self.playing = False
            return self.frame()
        self.playing = True
        if self.at >= self.end and not self._catch_up():
            return self._move(self.start, note="from the start")
        return self.frame()

    def pause(self) -> None:
        self.playing = False

    def set_speed(self, factor: float) -> Frame:
        speed = min(max(self.speed * factor, MIN_SPEED), MAX_SPEED)
        note = (
            ""
            if speed != self.speed
            else f"speed stays {speed_words(speed)} ({speed_words(MIN_SPEED)} to {speed_words(MAX_SPEED)})"
        )
        self.speed = speed
        return self.frame(note=note)

    def step(self, direction: int) -> Frame:
        """One poll forward (1) or back (-1) on the nearest fleet's polls; pauses."""
        self.playing = False
        if direction > 0:
            found = self._next_polls()
            if not found and self._catch_up():
                found = self._next_polls()
            if not found:
                return self._move(self.end, ended=True, note=self._end_words())
            return self._move(min(found))
        found = [
            f.recorded.times[i] for f in self.fleets if (i := f.recorded.index_from(self.at) - 1) >= f.recorded.first
        ]
        if not found:
            return self._move(self.start, note="start of recording")
        return self._move(max(found))

    def jump(self, seconds: float) -> Frame:
        return self.seek(self.at + seconds)

    def seek(self, at: float) -> Frame:
        """Go to `at` (clamped to the recording) and keep playing or paused as before.

        The header shows whole seconds, so `at` means the second shown: the clock lands on the last poll
        taken in that second when there is one (`g 14:05:30` shows the poll of 14:05:30.6 with its age 0,
        and `.` then moves to the next poll), else stays at `at` with the poll before it.
        """
        note = ""
        if at > self.end:
            self._catch_up()
        if at < self.start:
            note = f"the recording starts at {shown_time(self.start)}"
        elif at > self.end:
            note = f"the recording ends at {shown_time(self.end)}"
            if not self.replay.recording_stopped():
                note += " so far (the recorder may still be writing: press End to catch up)"
        target = self._in_second(self._clamp(at))
        if target >= self.end and self.playing:
            self.playing = False
            return self._move(target, ended=True, note=self._end_words())
        return self._move(target, note=note)

    def to_start(self) -> Frame:
        return self._move(self.start, note="start of recording")

    def to_end(self) -> Frame:
        """The last poll, after reading the polls a recorder wrote since the file was indexed."""
        self.playing = False
        self._catch_up()
        return self._move(self.end, ended=True, note=self._end_words())

    def _in_second(self, at: float) -> float:
        """The last poll of any fleet taken in the second `at` falls in, at or after `at`; else `at`."""
        second_end = math.floor(at) + 1.0
        later = [
            f.recorded.times[i]
            for f in self.fleets
            if (i := bisect_left(f.recorded.times, second_end) - 1) >= 0 and f.recorded.times[i] > at
        ]
        return min(max(later, default=at), self.end)

    def _catch_up(self) -> bool:
        """Index the polls written since (a recorder may still be writing the file); whether there were any."""
        if not self.replay.refresh():
            return False
        self.end = self.replay.end
        self._switch_events = self._read_switch_events()
        return True

    def _end_words(self) -> str:
        return end_words(self.end, self.replay.recording_stopped())

    def _next_polls(self) -> list[float]:
        return [f.recorded.times[i] for f in self.fleets if (i := f.recorded.index_at(self.at) + 1) <= f.recorded.last]

    def _clamp(self, at: float) -> float:
        return min(max(at, self.start), self.end)

    def _move(self, at: float, ended: bool = False, note: str = "", playing_on: bool = False) -> Frame:
        self.at = at
        computed = sum(f.go_to(f.recorded.index_at(at)) for f in self.fleets)
        if not playing_on:
            self._mark = self._wall()  # a long seek is not time played; the time a tick computes is
        return self.frame(computed, ended, note)


def first_view(
    path: str | Path,
    fleets: list[str] | None = None,
    start: float | None = None,
    end: float | None = None,
    estimate: CapacityEstimator | None = None,
) -> tuple[ReplayController, Frame]:
    """Open a replay and compute its first frame, as `capcon replay` does before drawing: (controller, frame).

    What benchmarks time as "time to open a replay" (file open, poll index, warm-up, first views). `estimate`
    as open_replay's (a recorded plan without a measured capacity).
    """
    replay = open_replay(path, fleets, start, end, estimate)
    controller = ReplayController(replay, playing=False, start=start)
    return controller, controller.open()
