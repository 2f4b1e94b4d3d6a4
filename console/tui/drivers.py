"""Where a console's views come from: live polls (`LiveDriver`) or a recording (`ReplayDriver`).

The app wires keys, screens and the header to one driver and never asks which kind it has:
each driver names the actions it offers (`check_action` hides the rest) and does the ones it
offers; the others are no-ops here, never reached through a key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from console.fleet.view import FleetView
from console.live.defaults import MIN_CONSOLE_INTERVAL_SECONDS
from console.live.feed import PollFeed
from console.live.gateways import GatewayWatch
from console.live.handle import FleetHandle
from console.live.loop import Cadence, failure_words, poll_loop
from console.plan.model import Plan
from console.text import printable
from console.tui.messages import FrameShown, GatewaysUpdated, PollFailed, ViewUpdated

if TYPE_CHECKING:
    from console.replay.controller import Frame, ReplayController
    from console.tui.app import ConsoleApp

# Replay: how often the replay clock moves while playing, and how many polls to compute before
# saying "seeking…" (a warm-up of a few hundred polls takes a moment).
REPLAY_TICK_SECONDS = 0.25
SEEK_NOTICE_POLLS = 150
# Live keys + and -: a step of a second below 10 s, of five above.
FINE_STEP_BELOW_SECONDS = 10.0


@dataclass(frozen=True)
class RecordedFleetLabel:
    """A replayed fleet as the screens name it: what a FleetHandle gives them, without a watcher."""

    name: str
    plan: Plan | None


class Closable(Protocol):
    """A source the live driver closes on exit: a poll feed, or before any poll a fleet's watcher or gateways."""

    async def aclose(self) -> None: ...


class Driver:
    actions: frozenset[str] = frozenset()

    @property
    def interval(self) -> float:
        """The refresh interval the console runs at."""
        raise NotImplementedError

    @property
    def paused(self) -> bool:
        return False

    def start(self, app: ConsoleApp) -> None:
        """Begin: start the polls, or draw the recording's first frame."""

    async def stop(self) -> None:
        """The console is closing."""

    def now(self) -> float:
        """The console's clock: ages, trends and flags read it."""
        raise NotImplementedError

    def interval_of(self, index: int) -> float:
        """The refresh interval the header shows for fleet `index`."""
        return self.interval

    def words(self) -> str | None:
        """The header's word on a replay: None live."""
        return None

    def toggle_pause(self) -> None: ...
    def poll_now(self) -> None: ...
    def slower(self) -> None: ...
    def faster(self) -> None: ...
    def play(self) -> None: ...
    def step(self, direction: int) -> None: ...
    def speed(self, factor: float) -> None: ...
    def jump(self, seconds: float) -> None: ...
    def edge(self, edge: str) -> None: ...
    def go(self, at: float) -> None: ...


class LiveDriver(Driver):
    """Each fleet on its own chain of polls (console.live.loop), sharing one cadence: pause, +/- and "poll now" act on all."""

    actions = frozenset({"poll_now", "slower", "faster"})

    def __init__(
        self,
        fleets: list[FleetHandle],
        interval: float,
        clock: Callable[[], float] = time.time,
        gateway_watch: Callable[[FleetHandle], GatewayWatch] | None = None,
    ) -> None:
        self.fleets = fleets
        self.cadence = Cadence(max(float(interval), MIN_CONSOLE_INTERVAL_SECONDS))
        self.clock = clock
        # The gateways in front of each fleet, read on the same cadence as its replicas.
        watch = gateway_watch or (lambda h: GatewayWatch(h.gateways, h.watcher.window_seconds or 60.0, clock=clock))
        self.gateways: dict[int, GatewayWatch] = {
            index: watch(handle) for index, handle in enumerate(fleets) if handle.gateways
        }
        self.feeds: list[PollFeed] = []  # each fleet's poll step, once started: closed with its sources on exit

    @property
    def interval(self) -> float:
        return self.cadence.interval_seconds

    @property
    def paused(self) -> bool:
        return self.cadence.paused

    def now(self) -> float:
        return self.clock()

    def start(self, app: ConsoleApp) -> None:
        for index, handle in enumerate(self.fleets):
            # The same step `capcon record` takes: the view (flags carried over), handed to the recorder if any.
            # The fleet's gateways are read in the same step as its replicas: the view judges the plan's latency
            # targets on what their clients saw over the same window.
            feed = PollFeed(handle, app.recorder, gateways=self.gateways.get(index))
            self.feeds.append(feed)

            def shown(view: FleetView, index: int = index, feed: PollFeed = feed) -> None:
                if feed.gateway_view is not None:
                    app.post_message(GatewaysUpdated(index, feed.gateway_view))
                app.post_message(ViewUpdated(index, view))

            def failed(error: Exception, index: int = index) -> None:
                app.post_message(PollFailed(index, f"poll failed: {failure_words(error)}"))

            app.run_worker(
                poll_loop(feed, self.cadence, shown, failed, clock=app.clock),
                name=f"poll-{index}",
                group="polls",
                exit_on_error=False,
            )

    async def stop(self) -> None:
        # Each started feed closes its replicas', gateways' and GPU pages' sources; before a start, the handles'.
        closing: list[Closable] = [*self.feeds] or [*(h.watcher for h in self.fleets), *self.gateways.values()]
        for source in closing:
            try:
                await source.aclose()
            except Exception:  # noqa: BLE001 - leaving anyway: a source that fails to close must not block the exit
                pass

    def toggle_pause(self) -> None:
        self.cadence.paused = not self.cadence.paused
        if not self.cadence.paused:
            self.cadence.wake()  # poll at once on resume

    def poll_now(self) -> None:
        self.cadence.wake()

    def slower(self) -> None:
        # At most half the shortest window: two refreshes always fall inside it, or every rate
        # and percentile would be unknown. Never lowered here, and 60 s without a window.
        longest = min((h.watcher.window_seconds / 2 for h in self.fleets if h.watcher.window_seconds > 0), default=60.0)
        longest = max(longest, MIN_CONSOLE_INTERVAL_SECONDS)
        interval = self.cadence.interval_seconds
        step = 1.0 if interval < FINE_STEP_BELOW_SECONDS else 5.0
        self.cadence.interval_seconds = max(interval, min(longest, interval + step))

    def faster(self) -> None:
        interval = self.cadence.interval_seconds
        step = 5.0 if interval > FINE_STEP_BELOW_SECONDS else 1.0
        self.cadence.interval_seconds = max(MIN_CONSOLE_INTERVAL_SECONDS, interval - step)
        self.cadence.wake()  # do not sit out the rest of the old, longer wait


class ReplayDriver(Driver):
    """`capcon replay`: no polls; the views come from the recording and the clock is the replay clock."""

    actions = frozenset({"replay_play", "replay_step", "replay_speed", "replay_jump", "replay_go", "replay_edge"})

    def __init__(self, controller: ReplayController, interval: float) -> None:
        self.controller = controller
        self._interval = interval  # the interval the recording started at
        self.frame: Frame | None = None  # the last Frame drawn
        self._lock = asyncio.Lock()
        self._app: ConsoleApp | None = None

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def busy(self) -> bool:
        """A move of the replay clock is being computed."""
        return self._lock.locked()

    def now(self) -> float:
        """The moment on screen: the clock of the last frame drawn, so ages match the views shown."""
        return self.frame.at if self.frame is not None else self.controller.at

    def interval_of(self, index: int) -> float:
        """The interval the shown poll was recorded at."""
        poll = self.frame.polls[index] if self.frame is not None else None
        return poll.interval_seconds if poll is not None else self.interval

    def words(self) -> str | None:
        from console.replay.controller import frame_words  # noqa: PLC0415 - only a replay needs it

        return frame_words(self.frame) if self.frame is not None else self.controller.words()

    def start(self, app: ConsoleApp) -> None:
        self._app = app
        self._run(self.controller.open, seek_to=self.controller.at)
        app.set_interval(REPLAY_TICK_SECONDS, self._tick)

    async def stop(self) -> None:
        self.controller.stop()  # a warm-up on its thread gives up instead of holding the exit

    def _run(self, move: Callable[[], Frame | None], seek_to: float | None = None) -> None:
        """Run a move of the replay clock on a worker thread, one at a time, and draw its frame."""
        assert self._app is not None, "the replay starts before any key reaches it"
        self._app.run_worker(self._move(move, seek_to), group="replay", exit_on_error=False)

    async def _move(self, move: Callable[[], Frame | None], seek_to: float | None) -> None:
        app = self._app
        assert app is not None
        async with self._lock:
            heavy = seek_to is not None and self.controller.cost(seek_to) >= SEEK_NOTICE_POLLS
            if heavy:
                app.notify(
                    "seeking… (flags and trends are recomputed from 15 minutes before)", timeout=30, markup=False
                )
            # The pure core is thread safe and the history file is read under its own lock.
            try:
                frame = await asyncio.to_thread(move)
            except Exception as error:  # noqa: BLE001 - a damaged file, say: shown, the console stays on the last frame
                app.clear_notifications()
                app.notify(f"replay failed: {type(error).__name__}: {error}", severity="error", timeout=8, markup=False)
                return
            if heavy:
                app.clear_notifications()
            if frame is not None:
                self._show(frame)

    def _show(self, frame: Frame) -> None:
        app = self._app
        assert app is not None
        self.frame = frame
        # The views, and the timeline as it stood at the moment shown.
        app.post_message(FrameShown(tuple(frame.views), tuple(frame.switches) if frame.switches else None))
        if frame.note:
            app.clear_notifications()
            app.notify(printable(frame.note), timeout=4, markup=False)

    def _tick(self) -> None:
        if self.controller.playing and not self._lock.locked():
            self._run(self.controller.tick)

    def toggle_pause(self) -> None:
        self.play()  # p pauses a replay too

    def play(self) -> None:
        self._run(self.controller.toggle)

    def step(self, direction: int) -> None:
        self._run(lambda: self.controller.step(direction))

    def speed(self, factor: float) -> None:
        self._run(lambda: self.controller.set_speed(factor))

    def jump(self, seconds: float) -> None:
        self._run(lambda: self.controller.jump(seconds), seek_to=self.now() + seconds)

    def edge(self, edge: str) -> None:
        if edge == "start":
            self._run(self.controller.to_start, seek_to=self.controller.start)
        else:
            self._run(self.controller.to_end, seek_to=self.controller.end)

    def go(self, at: float) -> None:
        self._run(lambda: self.controller.seek(at), seek_to=at)
