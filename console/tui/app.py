"""The console app: wires a driver (live polls or a replay) to the screens, the keys and the header.

`open_console(fleets, args, recorder=None)` is what `capcon watch` calls; `capcon demo` and
`capcon replay` build a ConsoleApp themselves (a demo fleet beside it, or a replay controller).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from textual import events
from textual.app import App
from textual.binding import Binding
from textual.screen import ModalScreen

from console.errors import UserError
from console.fleet import format as fmt
from console.fleet.view import FleetView
from console.live.collector import COLLECTOR
from console.live.defaults import DEFAULT_INTERVAL_SECONDS
from console.live.freshness import STALE_AFTER_INTERVALS
from console.live.gateways import GatewayWatch
from console.live.handle import FleetHandle
from console.live.session import FleetSession
from console.plan.model import DAYS
from console.store.paths import default_history_path
from console.text import printable
from console.tui.demo import Demo, DemoControls
from console.tui.drivers import Driver, LiveDriver, RecordedFleetLabel, ReplayDriver
from console.tui.forecast_accuracy import ForecastAccuracyWatch
from console.tui.messages import (
    ForecastAccuracyMeasured,
    FrameShown,
    GatewaysUpdated,
    PolicySwitched,
    PollFailed,
    SwitchAsked,
    ViewUpdated,
)
from console.tui.screens.base import ConsoleScreen, local_hhmm
from console.tui.screens.fault_screen import FaultMenu, FaultScreen
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.screens.goto_screen import GoToScreen
from console.tui.screens.help_screen import HelpScreen
from console.tui.screens.overview_screen import OverviewScreen
from console.tui.screens.plan_screen import PlanScreen
from console.tui.widgets.console_header import HeaderInfo

if TYPE_CHECKING:
    import argparse

    from console.replay.controller import ReplayController
    from console.store.recorder import Recorder

# Follows the terminal's own 16-colour palette, which is what an SSH session has.
DEFAULT_THEME = "ansi-dark"
# What `o` says with one fleet watched (the help says it too).
ONE_FLEET = "one fleet: the overview lists several plans' fleets (capcon watch PLAN PLAN ...)"
ONE_FLEET_RECORDED = "one fleet in this history: the overview lists several (recorded by capcon watch PLAN PLAN ...)"
# After SIGHUP the console leaves cleanly if it can, and is gone this long after it whatever it computes.
HANGUP_GRACE_SECONDS = 1.5


DEFAULT_SWITCH_HISTORY = "default"  # ConsoleApp's switch_history: the user's history file
# What signal.signal takes and gives back: a handler, SIG_DFL or SIG_IGN, or None (one set outside Python).
SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class ConsoleApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "capcon"
    ENABLE_COMMAND_PALETTE = False
    # Actions that change something outside the console: `--read-only` dims them, in one place.
    CHANGING_ACTIONS = frozenset({"spike", "fault", "overflow_switch"})
    DEMO_ACTIONS = frozenset({"spike", "fault"})
    # Offered by one kind of driver only (console.tui.drivers): the live keys, the replay keys.
    DRIVER_ACTIONS = LiveDriver.actions | ReplayDriver.actions

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
        Binding("m", "overflow_switch", "overflow", id="overflow-switch"),
        Binding("i", "whatif", "what-if", show=False, id="whatif"),
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
        fleets: Sequence[FleetHandle | RecordedFleetLabel],
        interval: float = DEFAULT_INTERVAL_SECONDS,
        read_only: bool = False,
        demo: DemoControls | None = None,
        theme: str | None = None,
        clock: Callable[[], float] = time.time,
        screenshot_dir: str | Path | None = None,
        recorder: Recorder | None = None,
        replay: ReplayController | None = None,
        admin_token_env: str | None = None,
        actor: str | None = None,
        environ: Mapping[str, str] | None = None,
        gateway_watch: Callable[[FleetHandle], GatewayWatch] | None = None,
        switch_history: str | Path | None = DEFAULT_SWITCH_HISTORY,
    ) -> None:
        super().__init__()
        if not fleets:
            raise ValueError("the console needs at least one fleet")
        # One session per watched fleet: its handle, view, gateways' view, switch timeline and error. The
        # message handlers below are their only writers; the screens are handed the session they show.
        self.sessions = [FleetSession(index, handle) for index, handle in enumerate(fleets)]
        self._handles = tuple(fleets)  # the sessions' handles, as the kinds they were handed in as
        self.read_only = read_only
        # The overflow switch (key m): who switches, and where the gateways' admin token is read from.
        self.admin_token_env = admin_token_env
        self.actor = actor
        self.environ = environ if environ is not None else os.environ
        # Key w writes here; None: capcon's data directory, beside the history file (never the working
        # directory, where a screenshot taken inside a clone shows in `git status`).
        self.screenshot_dir = Path(screenshot_dir) if screenshot_dir is not None else default_screenshot_dir()
        # Writes each poll to the history file on its own thread (console.store.recorder); None: not recording.
        self.recorder = recorder
        # Where a switch is recorded when no polls are (the user's history file); None: nowhere (`capcon demo`
        # without --db, which must not fill the user's own history with a demo's switches).
        self.switch_history: Path | None = (
            default_history_path()
            if switch_history is DEFAULT_SWITCH_HISTORY
            else None
            if switch_history is None
            else Path(switch_history)
        )
        self._recorder_state: str | None = None  # the last state the operator was told about
        self._hangup_before: SignalHandler = (
            None  # the SIGHUP handler before the console's (console.tui.app._on_hangup)
        )
        # Live polls, or `capcon replay` (a console.replay.controller.ReplayController): then the views
        # come from the recording and the app's clock is the replay clock (header age, trends, flags all read it).
        if replay is not None:
            self.driver: Driver = ReplayDriver(replay, float(interval))
        else:
            handles = [h for h in self.fleets if isinstance(h, FleetHandle)]
            self.driver = LiveDriver(handles, interval, clock, gateway_watch)
        self.clock = self.driver.now
        self.watching_since = self.clock()  # set again on mount: before a first poll, the age counts from here
        self.demo = Demo(demo, self.fleets[0].name, recorder, self.clock) if demo is not None else None
        # How wrong the forecast has been on each fleet: the history file backtested off the UI thread.
        self.forecast_accuracy = ForecastAccuracyWatch(self)
        if theme:
            self.theme = theme

    @property
    def fleets(self) -> list[FleetHandle | RecordedFleetLabel]:
        """Each fleet's handle, in the order they were named."""
        return list(self._handles)

    @property
    def views(self) -> list[FleetView | None]:
        """Each fleet's latest view (None: not polled yet), in the order they were named."""
        return [session.view for session in self.sessions]

    @property
    def interval(self) -> float:
        return self.driver.interval

    @property
    def paused(self) -> bool:
        return self.driver.paused

    @property
    def demo_faults_on(self) -> int:
        return self.demo.faults.count() if self.demo is not None else 0

    # --- start, polls, stop --------------------------------------------------

    def on_mount(self) -> None:
        self.push_screen(OverviewScreen() if len(self.sessions) > 1 else FleetScreen(self.sessions[0]))
        self.watching_since = self.clock()  # before a fleet's first poll, its figures' age counts from here
        self.driver.start(self)
        self.forecast_accuracy.start()
        self.set_interval(1.0, self._redraw)  # the data age moves even when the figures do not
        self.set_interval(1.0, self._watch_recorder)
        self._hangup_before = _on_hangup(self)

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
                severity="warning",
                timeout=10,
                markup=False,
            )

    async def on_unmount(self) -> None:
        if self._hangup_before is not None:  # put back what was there (SIG_DFL unless a caller set one)
            signal.signal(signal.SIGHUP, self._hangup_before)
            self._hangup_before = None
        await self.driver.stop()

    def on_view_updated(self, message: ViewUpdated) -> None:
        self.sessions[message.index].viewed(message.view)
        self._redraw()

    def on_gateways_updated(self, message: GatewaysUpdated) -> None:
        self.sessions[message.index].gateways_read(message.view)
        self._redraw()

    def on_switch_asked(self, message: SwitchAsked) -> None:
        self.sessions[message.index].asked(message.request)

    def on_policy_switched(self, message: PolicySwitched) -> None:
        self.sessions[message.index].switched(message.outcome)
        self.driver.poll_now()  # the header and the panel show what the gateways now enforce
        self._redraw()

    def on_forecast_accuracy_measured(self, message: ForecastAccuracyMeasured) -> None:
        self.sessions[message.index].forecast_accuracy = message.accuracy
        self._redraw()

    def on_poll_failed(self, message: PollFailed) -> None:
        self.sessions[message.index].failed(message.error)
        self._redraw()

    def on_frame_shown(self, message: FrameShown) -> None:
        """A replay's frame: every fleet's view at once, and the timelines as they stood then."""
        for index, session in enumerate(self.sessions):
            switches = message.switches[index] if message.switches is not None else None
            session.replayed(message.views[index], switches)
        self._redraw()

    def _console_screen(self) -> ConsoleScreen | None:
        """The screen on top when it is one of the console's own (not a menu or the help)."""
        return self.screen if isinstance(self.screen, ConsoleScreen) else None

    def _shown_screen(self) -> ConsoleScreen | None:
        """The console's screen that is showing: on top, or behind a dialog (the help, the switch, a menu)."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, ConsoleScreen):
                return screen
            if not isinstance(screen, ModalScreen):
                return None  # a full screen of another kind hides everything below it
        return None

    def _redraw(self) -> None:
        # Only the screen showing renders (behind an open dialog too: the fleet keeps moving there);
        # hidden screens catch up when they come back.
        screen = self._shown_screen()
        if screen is not None:
            screen.redraw()

    def stale_words(self, session: FleetSession) -> str:
        """'stale 7s: poll failed: ...' when the fleet has had no fresh poll for two intervals while live
        (a poll failing as a whole, or one that never ends), else "": the header says it in place of `● live`."""
        if self.driver.words() is not None or self.paused:  # a replay, or paused: nothing is due
            return ""
        view = session.view
        now = self.clock()
        age = now - (view.figures.at if view else self.watching_since)
        if age < STALE_AFTER_INTERVALS * self.driver.interval_of(session.index):
            return ""
        reason = session.error or "a poll still running"
        return f"stale {fmt.age(age)}: {reason}"

    def header_info(self, session: FleetSession | None) -> HeaderInfo:
        """The header of one fleet's screens, or of the overview (None)."""
        if session is None:
            errors = [s.error for s in self.sessions if s.error]
            stale = [words for words in (self.stale_words(s) for s in self.sessions) if words]
            return HeaderInfo(
                fleet=f"{len(self.fleets)} fleets",
                plan=None,
                source=None,
                window_seconds=None,
                age_seconds=max((self.clock() - v.figures.at for v in self.views if v), default=None),
                interval_seconds=self.interval,
                paused=self.paused,
                read_only=self.read_only,
                demo_faults=self.demo_faults_on,
                error=errors[0] if errors else "",
                recording=self.recording_words(),
                replay=self.driver.words(),
                stale=f"{len(stale)} of {len(self.fleets)} fleets {stale[0]}" if stale else "",
            )
        view, index = session.view, session.index
        now = view.plan if view else None
        return HeaderInfo(
            stale=self.stale_words(session),
            fleet=session.name,
            plan=session.plan.name if session.plan else (view.plan.plan_name if view and view.plan else None),
            source=view.figures.source if view else None,
            window_seconds=view.figures.window_seconds if view else None,
            age_seconds=self.clock() - view.figures.at if view else None,
            interval_seconds=self.driver.interval_of(index),
            paused=self.paused,
            read_only=self.read_only,
            demo_faults=self.demo_faults_on,
            error=session.error or (view.figures.source_error if view else ""),
            overflow=session.overflow_words(now, local_hhmm),
            overflow_mode=session.overflow_mode(now),
            plan_at=f"{DAYS[now.weekday].capitalize()} {now.hour:02d}:00" if now else None,
            recording=self.recording_words(),
            replay=self.driver.words(),
        )

    # --- the read-only gate --------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.DRIVER_ACTIONS and action not in self.driver.actions:
            return False  # live keys mean nothing on recorded data, replay keys nothing live
        if action in self.DEMO_ACTIONS and self.demo is None:
            return False  # no demo fleet: the keys are not shown at all
        if action in self.CHANGING_ACTIONS and self.read_only:
            return None  # shown dimmed: the operator sees it exists and is off
        if action == "overview" and len(self.fleets) < 2:
            return False
        if action == "overflow_switch":
            index = self._index_on_screen()
            return index is not None and self.can_switch(index)
        # No plan to show here (the overview, or a fleet watched without a plan); a what-if runs on the plan too.
        return not (action in ("plan", "whatif") and self._fleet_on_screen() is None)

    def on_key(self, event: events.Key) -> None:
        if event.key == "o" and len(self.fleets) < 2 and self._console_screen() is not None:
            # `o` is off the footer with one fleet (check_action): pressed anyway, it says why nothing opens.
            event.stop()
            self.clear_notifications()
            replaying = isinstance(self.driver, ReplayDriver)
            self.notify(ONE_FLEET_RECORDED if replaying else ONE_FLEET, timeout=4, markup=False)
            return
        # A dimmed key reaches here because check_action refused it: say why instead of doing nothing.
        if not self.read_only:
            return
        for binding in self.BINDINGS:
            if (
                isinstance(binding, Binding)
                and binding.action in self.CHANGING_ACTIONS
                and event.key in binding.key.split(",")
            ):
                if binding.action != "overflow_switch" and self.demo is None:
                    continue
                index = self._index_on_screen()
                if binding.action == "overflow_switch" and (index is None or not self.can_switch(index)):
                    continue
                what = "the gateways' overflow policy" if binding.action == "overflow_switch" else "the demo fleet"
                event.stop()
                self.clear_notifications()
                self.notify(
                    f"read-only: {event.character or event.key} ({binding.description}) would change {what};"
                    " the console was started with --read-only",
                    severity="warning",
                    timeout=3,
                    markup=False,
                )
                return

    # --- actions -------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        self.driver.toggle_pause()
        self._redraw()

    def action_poll_now(self) -> None:
        self.driver.poll_now()

    def action_slower(self) -> None:
        self.driver.slower()
        self._say_interval()

    def action_faster(self) -> None:
        self.driver.faster()
        self._say_interval()

    def _say_interval(self) -> None:
        # A narrow header gives up "every Ns" early: the key's answer is said where it always shows.
        self.clear_notifications()
        self.notify(f"refreshing every {self.interval:g}s", timeout=2, markup=False)
        self._redraw()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def _index_on_screen(self) -> int | None:
        screen = self._console_screen()
        return screen.index if screen is not None else None

    def can_switch(self, index: int) -> bool:
        """A fleet whose overflow policy can be switched from here: gateways watched, or actuators in its plan."""
        session = self.sessions[index]
        plan = session.plan
        return session.watches_gateways or bool(plan is not None and plan.overflow.actuators)

    def action_overflow_switch(self) -> None:
        index = self._index_on_screen()
        if index is None or not self.can_switch(index):
            return
        from console.tui.overflow_switch import switch_context  # noqa: PLC0415 - the switch's machinery when pressed

        try:
            context = switch_context(self, self.sessions[index])
        except UserError as problem:
            self.clear_notifications()
            self.notify(
                f"overflow switch unavailable: {printable(str(problem))}", severity="error", timeout=10, markup=False
            )
            return
        from console.tui.screens.switch_screen import SwitchScreen  # noqa: PLC0415 - as above

        self.push_screen(SwitchScreen(context))

    def _fleet_on_screen(self) -> int | None:
        screen = self._console_screen()
        index = screen.index if screen is not None else None
        if index is None or self.fleets[index].plan is None:
            return None
        return index

    def action_plan(self) -> None:
        index = self._fleet_on_screen()
        plan = self.sessions[index].plan if index is not None else None
        if index is not None and plan is not None and not isinstance(self.screen, PlanScreen):
            self.push_screen(PlanScreen(self.sessions[index], plan))

    def action_whatif(self) -> None:
        index = self._fleet_on_screen()
        plan = self.sessions[index].plan if index is not None else None
        if index is None or plan is None:
            return
        from console.tui.screens.whatif_screen import WhatIfContext, WhatIfScreen  # noqa: PLC0415 - when pressed

        session = self.sessions[index]
        self.push_screen(
            WhatIfScreen(WhatIfContext(session.name, plan, session.watches_gateways, lambda: session.view))
        )

    def action_overview(self) -> None:
        while len(self.screen_stack) > 2 and not isinstance(self.screen, OverviewScreen):
            self.pop_screen()
        if not isinstance(self.screen, OverviewScreen):
            self.pop_screen()

    def action_save_screenshot(self) -> None:
        try:
            self.screenshot_dir.mkdir(parents=True, exist_ok=True)
            # The full path: the data directory is nowhere an operator looks by chance.
            path = self.save_screenshot(path=str(self.screenshot_dir.resolve()))
        except OSError as error:
            self.notify(
                f"screenshot not saved: {self.screenshot_dir}: {error.strerror or error}",
                severity="error",
                timeout=8,
                markup=False,
            )
            return
        self.notify(f"screenshot saved: {path}", timeout=6, markup=False)

    async def action_spike(self) -> None:
        if self.demo is not None:
            self.notify(await self.demo.spike(), timeout=3)

    def _chosen_replica(self) -> tuple[int, int, str, dict[int, str]]:
        """The replica the fault menu acts on: the one chosen in the table (or shown in detail), else the first.

        Returns its index in the source's order (the demo fleet's replica number), the fleet's replica count,
        its name, and every replica's name by index.
        """
        screen = self._console_screen()
        view = self.sessions[(screen.index if screen is not None else None) or 0].view
        names = {i: row.key for i, row in enumerate(view.rows)} if view is not None else {}
        key = screen.chosen_replica() if screen is not None else None
        index = next((i for i, name in names.items() if name == key), 0)
        return index, len(names), names.get(index, f"replica {index}"), names

    def action_fault(self) -> None:
        if self.demo is None:
            return
        faults = self.demo.faults
        index, replicas, name, names = self._chosen_replica()
        menu = FaultMenu(index, name, replicas, faults.kinds(index), faults.summary(names))

        async def chosen(key: str | None) -> None:
            if key is not None:
                await self._apply_fault_choice(key, index, name, names)

        self.push_screen(FaultScreen(menu), chosen)

    async def _apply_fault_choice(self, key: str, index: int, name: str, names: dict[int, str]) -> None:
        if self.demo is None or not self.check_action("fault", ()):
            return
        try:
            said = await self.demo.apply(key, index, name)
        except Exception as error:  # noqa: BLE001 - the demo fleet refused: say so, keep the console up
            self.notify(
                f"demo fault failed: {type(error).__name__}: {error}", severity="error", timeout=6, markup=False
            )
            return
        summary = self.demo.faults.summary(names)
        self.notify(f"demo: {printable(said)}\nfaults on: {printable(summary)}", timeout=5, markup=False)
        self._redraw()

    # --- replay -------------------------------------------------------------------

    def action_replay_play(self) -> None:
        self.driver.play()

    def action_replay_step(self, direction: int) -> None:
        self.driver.step(direction)

    def action_replay_speed(self, factor: float) -> None:
        self.driver.speed(factor)

    def action_replay_jump(self, seconds: float) -> None:
        self.driver.jump(seconds)

    def action_replay_edge(self, edge: str) -> None:
        self.driver.edge(edge)

    def action_replay_go(self) -> None:
        def chosen(at: float | None) -> None:
            if at is not None:
                self.driver.go(at)

        self.push_screen(GoToScreen(self.clock()), chosen)


def open_console(
    fleets: list[FleetHandle],
    args: argparse.Namespace,
    demo: DemoControls | None = None,
    recorder: Recorder | None = None,
) -> int:
    """Run the console until the operator quits; returns the exit code.

    `fleets` holds one FleetHandle per plan; `args` gives interval, read_only, theme and
    screenshot_dir (all optional; screenshots default to capcon's data directory).
    """
    app = ConsoleApp(
        list(fleets),
        interval=getattr(args, "interval", None) or DEFAULT_INTERVAL_SECONDS,
        read_only=bool(getattr(args, "read_only", False)),
        demo=demo,
        theme=getattr(args, "theme", None) or DEFAULT_THEME,
        screenshot_dir=getattr(args, "screenshot_dir", None),
        recorder=recorder,
        admin_token_env=getattr(args, "admin_token_env", None),
        actor=getattr(args, "actor", None),
    )
    COLLECTOR.tune()  # the collector's passes between refreshes, not inside them
    app.run()
    return int(app.return_code or 0)


def default_screenshot_dir() -> Path:
    """Where key w saves: `screenshots` in capcon's data directory, the one the history file lives in."""
    return default_history_path().parent / "screenshots"


def _on_hangup(app: ConsoleApp) -> SignalHandler:
    """On SIGHUP (the SSH session or tmux went away) leave, within HANGUP_GRACE_SECONDS whatever runs.

    A Python-level handler, not the event loop's: it runs in the main thread at the next bytecode,
    even while a heavy refresh holds the loop, where a loop handler would wait its turn. It asks the
    app to exit and arms a timer that ends the process if the exit has not finished by then (a dead
    terminal can hold Textual's writer; the history file keeps every committed poll). Returns the
    handler it replaced, SIG_DFL for one set outside Python (None when none can be installed here:
    not the main thread).
    """
    loop = asyncio.get_running_loop()

    def hung_up(signum: int, _frame: object) -> None:
        timer = threading.Timer(HANGUP_GRACE_SECONDS, os._exit, args=(128 + signum,))
        timer.daemon = True
        timer.start()
        loop.call_soon_threadsafe(app.exit)

    try:
        before = signal.signal(signal.SIGHUP, hung_up)
    except (ValueError, AttributeError):  # not the main thread, or a platform without SIGHUP
        return None
    return before if before is not None else signal.SIG_DFL
