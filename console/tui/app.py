"""The console app: polls each fleet in a chained worker and hands immutable views to the screens.

`open_console(fleets, args, demo=None)` is what `capcon watch` and `capcon demo` call.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from textual.app import App
from textual.binding import Binding

from console.fleet.view import FleetView
from console.fleet_handle import FleetHandle, utc_offset_seconds  # noqa: F401 - re-exported: the console's fleets
from console.metrics.figures import FleetFigures
from console.plan.model import DAYS
from console.store.poll_feed import PollFeed
from console.tui.demo_faults import CLEAR_ALL_KEY, CLEAR_REPLICA_KEY, LASTING_KINDS, DemoFaults, choice_for
from console.tui.literal import printable
from console.tui.messages import PollFailed, ViewUpdated
from console.tui.widgets.console_header import HeaderInfo

MIN_INTERVAL_SECONDS = 1.0
# Replay: how often the replay clock moves while playing, and how many polls to compute before
# saying "seeking…" (a warm-up of a few hundred polls takes a moment).
REPLAY_TICK_SECONDS = 0.25
SEEK_NOTICE_POLLS = 150
# Follows the terminal's own 16-colour palette, which is what an SSH session has.
DEFAULT_THEME = "ansi-dark"
DEFAULT_INTERVAL_SECONDS = 2.0


class Watcher(Protocol):
    async def poll(self) -> FleetFigures: ...


class DemoControls(Protocol):
    """What `capcon demo` hands over so the console can stir its simulated fleet."""

    def spike(self, factor: float, seconds: float) -> Any: ...

    def fault(self, index: int, kind: str) -> Any: ...

    def clear_fault(self, index: int, kind: str) -> Any: ...

    def clear_all_faults(self) -> Any: ...


class ConsoleApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "capcon"
    ENABLE_COMMAND_PALETTE = False
    # Actions that change something outside the console: `--read-only` dims them, in one place.
    CHANGING_ACTIONS = frozenset({"spike", "fault"})
    DEMO_ACTIONS = frozenset({"spike", "fault"})
    # Keys of `capcon replay` only; and the live keys that mean nothing on recorded data.
    REPLAY_ACTIONS = frozenset({"replay_play", "replay_step", "replay_speed", "replay_jump", "replay_go", "replay_edge"})
    LIVE_ACTIONS = frozenset({"poll_now", "slower", "faster", "spike", "fault"})

    BINDINGS = [
        Binding("q", "quit", "quit", id="quit"),
        # On-call hands reach for Ctrl+C first; Textual's default only hints at Ctrl+Q.
        Binding("ctrl+c", "quit", "quit", show=False, priority=True, id="quit-ctrl-c"),
        Binding("p", "toggle_pause", "pause", id="pause"),
        # Off the footer (80 columns hold about ten keys); `?` lists every key.
        Binding("plus,equals_sign", "slower", "slower", show=False, id="interval-up"),
        Binding("minus", "faster", "faster", show=False, id="interval-down"),
        Binding("n", "poll_now", "poll now", show=False, id="poll-now"),
        Binding("question_mark", "help", "help", id="help"),
        Binding("o", "overview", "fleets", id="overview"),
        Binding("P", "plan", "plan", id="plan"),
        Binding("w", "save_screenshot", "screenshot", show=False, id="screenshot"),
        Binding("x", "spike", "spike", id="demo-spike"),
        Binding("f", "fault", "faults", id="demo-fault"),
        # Replay only (hidden in the live console by check_action).
        Binding("space", "replay_play", "play/pause", id="replay-play"),
        Binding("full_stop", "replay_step(1)", "step", show=False, id="replay-step"),
        Binding("comma", "replay_step(-1)", "step back", show=False, id="replay-step-back"),
        Binding("right_square_bracket", "replay_speed(2.0)", "faster", show=False, id="replay-faster"),
        Binding("left_square_bracket", "replay_speed(0.5)", "slower", show=False, id="replay-slower"),
        Binding("greater_than_sign", "replay_jump(60)", "+1 min", show=False, id="replay-forward"),
        Binding("less_than_sign", "replay_jump(-60)", "-1 min", show=False, id="replay-back"),
        Binding("right_curly_bracket", "replay_jump(600)", "+10 min", show=False, id="replay-forward-more"),
        Binding("left_curly_bracket", "replay_jump(-600)", "-10 min", show=False, id="replay-back-more"),
        Binding("g", "replay_go", "go to", id="replay-go"),
        Binding("home", "replay_edge('start')", "start", show=False, id="replay-start"),
        Binding("end", "replay_edge('end')", "end", show=False, id="replay-end"),
    ]

    def __init__(
        self,
        fleets: list[FleetHandle],
        interval: float = DEFAULT_INTERVAL_SECONDS,
        read_only: bool = False,
        demo: DemoControls | None = None,
        theme: str | None = None,
        clock: Callable[[], float] = time.time,
        screenshot_dir: str | Path = ".",
        recorder: Any = None,
        replay: Any = None,
    ) -> None:
        super().__init__()
        if not fleets:
            raise ValueError("the console needs at least one fleet")
        self.fleets = list(fleets)
        self.views: list[FleetView | None] = [None] * len(fleets)
        self.errors: list[str] = [""] * len(fleets)
        self.interval = max(float(interval), MIN_INTERVAL_SECONDS)
        self.read_only = read_only
        self.demo = demo
        self.paused = False
        self.clock = clock
        self.screenshot_dir = Path(screenshot_dir)
        self._wake = asyncio.Event()
        self.demo_faults = DemoFaults()  # what this console turned on in the demo fleet
        # Writes each poll to the history file on its own thread (console.store.recorder); None: not recording.
        self.recorder = recorder
        self._recorder_state: str | None = None  # the last state the operator was told about
        # `capcon replay`: a console.replay.controller.ReplayController; no polls, the views come from
        # the recording and the app's clock is the replay clock (header age, trends, flags all read it).
        self.replay = replay
        self.replay_frame = None  # the last Frame drawn
        self._replay_lock = asyncio.Lock()
        if replay is not None:
            self.clock = self._replay_clock
        if theme:
            self.theme = theme

    # --- start, polls, stop --------------------------------------------------

    def on_mount(self) -> None:
        from console.tui.screens.fleet_screen import FleetScreen
        from console.tui.screens.overview_screen import OverviewScreen

        self.push_screen(OverviewScreen() if len(self.fleets) > 1 else FleetScreen(0))
        if self.replay is not None:
            self._replay_run(self.replay.open, seek_to=self.replay.at)
            self.set_interval(REPLAY_TICK_SECONDS, self._replay_tick)
        else:
            for index in range(len(self.fleets)):
                self.run_worker(self._poll_loop(index), name=f"poll-{index}", group="polls", exit_on_error=False)
        self.set_interval(1.0, self._redraw)  # the data age moves even when the figures do not
        self.set_interval(1.0, self._watch_recorder)
        try:
            # The SSH session went away: leave cleanly instead of writing to a dead terminal.
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.exit)
        except (NotImplementedError, RuntimeError, ValueError):
            pass

    async def _poll_loop(self, index: int) -> None:
        """One poll at a time per fleet: the next starts `interval` after the last one finished."""
        # The same step `capcon record` takes: the view (flags carried over), handed to the recorder if any.
        feed = PollFeed(self.fleets[index], self.recorder, self.interval)
        while True:
            self._wake.clear()  # before polling, so a "poll now" during this poll is not lost
            if not self.paused:
                try:
                    figures = await feed.handle.watcher.poll()
                    self.post_message(ViewUpdated(index, feed.add(figures, self.clock())))
                except Exception as error:  # a failing source is shown, never fatal
                    self.post_message(PollFailed(index, f"poll failed: {type(error).__name__}: {error}"))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval)
            except TimeoutError:
                pass

    def recording_words(self) -> str | None:
        """The header's word on recording: None when not recording, else its state."""
        if self.recorder is None:
            return None
        status = self.recorder.status
        if status.state == "recording":
            return "rec"
        if status.state in ("locked", "read-only", "full"):
            # Short: at 80 columns the header has room for the state and what waits; the notice says why.
            return f"rec {status.state}" + (f" ({status.waiting} waiting)" if status.waiting else "")
        return f"rec {status.state}" + (f": {status.detail}" if status.detail else "")

    def _watch_recorder(self) -> None:
        """Say once, in words, when the history file stops or starts taking writes (the header keeps the short form)."""
        if self.recorder is None:
            return
        status = self.recorder.status
        before, self._recorder_state = self._recorder_state, status.state
        if before is None or status.state == before or status.state == "stopped":
            return
        if status.state == "recording":
            written = f"{status.written} poll{'' if status.written == 1 else 's'} written"
            self.notify(f"history {status.path}: recording again ({written})", timeout=6, markup=False)
        elif status.state in ("locked", "read-only", "full", "error"):
            self.notify(
                f"history {status.path}: {status.state}: {status.detail or 'no detail'}; watching goes on"
                + (", polls wait in memory" if status.waiting else ""),
                severity="warning", timeout=10, markup=False,
            )

    async def on_unmount(self) -> None:
        if self.replay is not None:
            self.replay.stop()  # a warm-up on its thread gives up instead of holding the exit
        for handle in self.fleets:
            close = getattr(handle.watcher, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # leaving anyway: a source that fails to close must not block the exit
                    pass

    def on_view_updated(self, message: ViewUpdated) -> None:
        self.views[message.index] = message.view
        self.errors[message.index] = ""
        self._redraw()

    def on_poll_failed(self, message: PollFailed) -> None:
        self.errors[message.index] = message.error
        self._redraw()

    def _redraw(self) -> None:
        # Only the screen on top renders: hidden screens catch up when they come back.
        redraw = getattr(self.screen, "redraw", None)
        if redraw is not None:
            redraw()

    def header_info(self, index: int | None) -> HeaderInfo:
        if index is None:
            errors = [e for e in self.errors if e]
            return HeaderInfo(
                fleet=f"{len(self.fleets)} fleets", plan=None, source=None, window_seconds=None,
                age_seconds=max((self.clock() - v.figures.at for v in self.views if v), default=None),
                interval_seconds=self.interval, paused=self.paused, read_only=self.read_only,
                demo_faults=self.demo_faults.count(), error=errors[0] if errors else "",
                recording=self.recording_words(), replay=self.replay_words(),
            )
        view, handle = self.views[index], self.fleets[index]
        now = view.plan if view else None
        return HeaderInfo(
            fleet=handle.name,
            plan=handle.plan.name if handle.plan else (view.plan.plan_name if view and view.plan else None),
            source=view.figures.source if view else None,
            window_seconds=view.figures.window_seconds if view else None,
            age_seconds=self.clock() - view.figures.at if view else None,
            interval_seconds=self._interval_of(index),
            paused=self.paused,
            read_only=self.read_only,
            demo_faults=self.demo_faults.count(),
            error=self.errors[index] or (view.figures.source_error if view else ""),
            overflow=now.overflow_mode if now else (handle.plan.overflow.mode if handle.plan else None),
            plan_at=f"{DAYS[now.weekday].capitalize()} {now.hour:02d}:00" if now else None,
            recording=self.recording_words(),
            replay=self.replay_words(),
        )

    # --- the read-only gate --------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.REPLAY_ACTIONS and self.replay is None:
            return False
        if action in self.LIVE_ACTIONS and self.replay is not None:
            return False  # recorded data: nothing to poll, nothing to stir
        if action in self.DEMO_ACTIONS and self.demo is None:
            return False  # no demo fleet: the keys are not shown at all
        if action in self.CHANGING_ACTIONS and self.read_only:
            return None  # shown dimmed: the operator sees it exists and is off
        if action == "overview" and len(self.fleets) < 2:
            return False
        if action == "plan" and self._fleet_on_screen() is None:
            return False  # no plan to show here (overview, or a fleet watched without a plan)
        return True

    def on_key(self, event) -> None:
        # A dimmed key reaches here because check_action refused it: say why instead of doing nothing.
        if not self.read_only or self.demo is None:
            return
        for binding in self.BINDINGS:
            if binding.action in self.CHANGING_ACTIONS and event.key in binding.key.split(","):
                event.stop()
                self.clear_notifications()
                self.notify(
                    f"read-only: {event.character or event.key} ({binding.description}) would change the demo fleet;"
                    " the console was started with --read-only",
                    severity="warning", timeout=3, markup=False,
                )
                return

    # --- actions -------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        if self.replay is not None:
            self.action_replay_play()  # p pauses a replay too
            return
        self.paused = not self.paused
        if not self.paused:
            self._wake.set()  # poll at once on resume
        self._redraw()

    def action_poll_now(self) -> None:
        self._wake.set()

    def action_slower(self) -> None:
        # At most half the shortest window: two refreshes always fall inside it, or every rate
        # and percentile would be unknown. Never lowered here, and 60 s without a window.
        windows = [getattr(h.watcher, "window_seconds", None) for h in self.fleets]
        longest = min((w / 2 for w in windows if isinstance(w, (int, float)) and w > 0), default=60.0)
        longest = max(longest, MIN_INTERVAL_SECONDS)
        self.interval = max(self.interval, min(longest, self.interval + (1.0 if self.interval < 10 else 5.0)))
        self._redraw()

    def action_faster(self) -> None:
        self.interval = max(MIN_INTERVAL_SECONDS, self.interval - (5.0 if self.interval > 10 else 1.0))
        self._wake.set()  # do not sit out the rest of the old, longer wait
        self._redraw()

    def action_help(self) -> None:
        from console.tui.screens.help_screen import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def _fleet_on_screen(self) -> int | None:
        index = getattr(self.screen, "index", None)
        if index is None or self.fleets[index].plan is None:
            return None
        return index

    def action_plan(self) -> None:
        from console.tui.screens.plan_screen import PlanScreen

        index = self._fleet_on_screen()
        if index is not None and not isinstance(self.screen, PlanScreen):
            self.push_screen(PlanScreen(index, self.fleets[index].plan))

    def action_overview(self) -> None:
        from console.tui.screens.overview_screen import OverviewScreen

        while len(self.screen_stack) > 2 and not isinstance(self.screen, OverviewScreen):
            self.pop_screen()
        if not isinstance(self.screen, OverviewScreen):
            self.pop_screen()

    def action_save_screenshot(self) -> None:
        self.screenshot_dir.mkdir(parents=True, exist_ok=True)
        # The full path: "." means little to an operator who forgot where capcon was started.
        path = self.save_screenshot(path=str(self.screenshot_dir.resolve()))
        self.notify(f"screenshot saved: {path}", timeout=6, markup=False)

    async def action_spike(self) -> None:
        await self._demo("spike", 3.0, 60.0)
        self._demo_event("demo_spike", None, {"factor": 3.0, "seconds": 60.0})
        self.notify("demo: traffic x3 for 60 s", timeout=3)

    def _demo_event(self, kind: str, subject: str | None, detail: dict) -> None:
        """What the operator did to the demo fleet goes into the history too: a replayed outage then says it was injected."""
        if self.recorder is not None:
            self.recorder.event(self.clock(), kind, fleet=self.fleets[0].name, subject=subject, detail=detail)

    def _chosen_replica(self) -> tuple[int, int, str, dict[int, str]]:
        """The replica the fault menu acts on: the one chosen in the table (or shown in detail), else the first.

        Returns its index in the source's order (the demo fleet's replica number), the fleet's replica count,
        its name, and every replica's name by index.
        """
        fleet = getattr(self.screen, "index", None) or 0
        view = self.views[fleet]
        names = {i: row.key for i, row in enumerate(view.rows)} if view is not None else {}
        key = getattr(self.screen, "key", None)  # the replica detail screen
        table = getattr(self.screen, "table", None)
        if key is None and table is not None:
            key = table.selected
        index = next((i for i, name in names.items() if name == key), 0)
        return index, len(names), names.get(index, f"replica {index}"), names

    def action_fault(self) -> None:
        from console.tui.screens.fault_screen import FaultMenu, FaultScreen

        index, replicas, name, names = self._chosen_replica()
        menu = FaultMenu(index, name, replicas, self.demo_faults.kinds(index), self.demo_faults.summary(names))

        async def chosen(key: str | None) -> None:
            if key is not None:
                await self._apply_fault_choice(key, index, name, names)

        self.push_screen(FaultScreen(menu), chosen)

    async def _apply_fault_choice(self, key: str, index: int, name: str, names: dict[int, str]) -> None:
        if not self.check_action("fault", ()):
            return
        faults = self.demo_faults
        try:
            if key == CLEAR_ALL_KEY:
                await self._demo("clear_all_faults")
                faults.cleared_all()
                said = "every fault cleared"
            elif key == CLEAR_REPLICA_KEY:
                # Every lasting kind, not only those this console turned on: clearing one that is off does nothing.
                for kind in LASTING_KINDS:
                    await self._demo("clear_fault", index, kind)
                faults.cleared_replica(index)
                said = f"{name}: its faults cleared"
            else:
                choice = choice_for(key)
                if choice.lasting and faults.is_on(index, choice.kind):
                    await self._demo("clear_fault", index, choice.kind)
                    faults.cleared(index, choice.kind)
                    said = f"{name}: {choice.short} cleared"
                else:
                    await self._demo("fault", index, choice.kind)
                    faults.applied(index, choice.kind)
                    said = f"{name}: {choice.label}"
        except Exception as error:  # the demo fleet refused: say so, keep the console up
            self.notify(f"demo fault failed: {type(error).__name__}: {error}", severity="error", timeout=6, markup=False)
            return
        self._demo_event("demo_fault", name, {"key": key, "said": said})
        self.notify(f"demo: {printable(said)}\nfaults on: {printable(faults.summary(names))}", timeout=5, markup=False)
        self._redraw()

    async def _demo(self, name: str, *arguments) -> None:
        result = getattr(self.demo, name)(*arguments)
        if inspect.isawaitable(result):
            await result


    # --- replay -------------------------------------------------------------------

    def _replay_clock(self) -> float:
        """The moment on screen: the clock of the last frame drawn, so ages match the views shown."""
        frame = self.replay_frame
        return frame.at if frame is not None else self.replay.at

    def replay_words(self) -> str | None:
        if self.replay is None:
            return None
        from console.replay.controller import frame_words

        return frame_words(self.replay_frame) if self.replay_frame is not None else self.replay.words()

    def _interval_of(self, index: int) -> float:
        """Live: the refresh interval; replay: the interval the shown poll was recorded at."""
        frame = self.replay_frame
        if frame is not None and frame.polls[index] is not None:
            return frame.polls[index].interval_seconds
        return self.interval

    def _replay_run(self, move, seek_to: float | None = None) -> None:
        """Run a move of the replay clock on a worker thread, one at a time, and draw its frame."""
        self.run_worker(self._replay_move(move, seek_to), group="replay", exit_on_error=False)

    async def _replay_move(self, move, seek_to: float | None) -> None:
        async with self._replay_lock:
            heavy = seek_to is not None and self.replay.cost(seek_to) >= SEEK_NOTICE_POLLS
            if heavy:
                self.notify("seeking… (flags and trends are recomputed from 15 minutes before)", timeout=30, markup=False)
            # The pure core is thread safe and the history file is read under its own lock.
            try:
                frame = await asyncio.to_thread(move)
            except Exception as error:  # a damaged file, say: shown, the console stays on the last frame
                self.clear_notifications()
                self.notify(f"replay failed: {type(error).__name__}: {error}", severity="error", timeout=8, markup=False)
                return
            if heavy:
                self.clear_notifications()
            if frame is not None:
                self._replay_show(frame)

    def _replay_show(self, frame) -> None:
        self.replay_frame = frame
        self.views = list(frame.views)
        if frame.note:
            self.clear_notifications()
            self.notify(printable(frame.note), timeout=4, markup=False)
        self._redraw()

    def _replay_tick(self) -> None:
        if self.replay.playing and not self._replay_lock.locked():
            self._replay_run(self.replay.tick)

    def action_replay_play(self) -> None:
        self._replay_run(self.replay.toggle)

    def action_replay_step(self, direction: int) -> None:
        self._replay_run(lambda: self.replay.step(direction))

    def action_replay_speed(self, factor: float) -> None:
        self._replay_run(lambda: self.replay.set_speed(factor))

    def action_replay_jump(self, seconds: float) -> None:
        target = self._replay_clock() + seconds
        self._replay_run(lambda: self.replay.jump(seconds), seek_to=target)

    def action_replay_edge(self, edge: str) -> None:
        if edge == "start":
            self._replay_run(self.replay.to_start, seek_to=self.replay.start)
        else:
            self._replay_run(self.replay.to_end, seek_to=self.replay.end)

    def action_replay_go(self) -> None:
        from console.tui.screens.goto_screen import GoToScreen

        def chosen(at: float | None) -> None:
            if at is not None:
                self._replay_run(lambda: self.replay.seek(at), seek_to=at)

        self.push_screen(GoToScreen(self._replay_clock()), chosen)


def open_console(fleets: list[FleetHandle], args: Any, demo: DemoControls | None = None, recorder: Any = None) -> int:
    """Run the console until the operator quits; returns the exit code.

    `fleets` holds one FleetHandle per plan; `args` gives interval, read_only, theme and
    screenshot_dir (all optional).
    """
    app = ConsoleApp(
        list(fleets),
        interval=getattr(args, "interval", None) or DEFAULT_INTERVAL_SECONDS,
        read_only=bool(getattr(args, "read_only", False)),
        demo=demo,
        theme=getattr(args, "theme", None) or DEFAULT_THEME,
        screenshot_dir=getattr(args, "screenshot_dir", None) or ".",
        recorder=recorder,
    )
    app.run()
    return int(app.return_code or 0)
