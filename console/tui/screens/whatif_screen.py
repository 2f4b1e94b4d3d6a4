"""The what-if dialog: choose a lever and the minutes ahead, run it on the simulator in a worker, read the verb's table.

Keyboard only: ←/→ or 1-5 choose the lever (+1 replica, -1 replica, a bounded queue of N, hosted after N,
defer batch), Tab and ↑/↓ move to N and the minutes, Enter runs. The scenario runs in a thread (pure CPU,
console/ahead/whatif_report.py): the console keeps polling and redrawing behind the dialog, and the table
that comes back is `capcon whatif`'s, "now" first. Esc closes; a run still going is left to finish unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from console.ahead.whatif import Lever
from console.fleet.view import FleetView
from console.plan.model import Plan
from console.text import printable

# The levers, in key order: (words shown, the N field's label or None, the lever for N).
LEVERS: tuple[tuple[str, str | None, Callable[[int], Lever]], ...] = (
    ("+1 replica", None, lambda _n: Lever(replicas="+1")),
    ("-1 replica", None, lambda _n: Lever(replicas="-1")),
    ("bounded queue N", "queue bound N", lambda n: Lever(mode="bounded_queue", max_queue=n)),
    ("hosted after N", "queued N", lambda n: Lever(mode="hosted", hosted_after_queue=n)),
    ("defer batch", None, lambda _n: Lever(mode="defer")),
)
DEFAULT_N = {2: 32, 3: 16}  # the verb's default levers: a bounded queue of 32, hosted after 16
DEFAULT_MINUTES = 15  # shorter than the verb's 30: an answer within seconds while the spike is on
MAX_MINUTES = 120
MAX_N = 100_000


@dataclass(frozen=True)
class WhatIfContext:
    """What the dialog needs from the console: the fleet's plan and name, whether gateways front it, and its
    latest view (read when the run starts, so the scenario starts from the fleet as it is then)."""

    name: str
    plan: Plan
    gateways: bool
    latest_view: Callable[[], FleetView | None]
    run: Callable[[WhatIfContext, FleetView, Lever, int], list[str]] = lambda *asked: run_whatif(*asked)


def run_whatif(context: WhatIfContext, view: FleetView, lever: Lever, minutes: int) -> list[str]:
    """The verb's lines for "now" and `lever` over `minutes` (pure CPU: what the worker runs)."""
    from console.ahead.whatif_report import from_view, run_levers  # noqa: PLC0415 - the simulator when asked

    window = view.figures.window_seconds or 60.0
    situation = from_view(context.plan, context.name, view, context.gateways, minutes, window)
    if isinstance(situation, str):
        return [situation]
    try:
        report = run_levers(context.plan, situation, [lever], minutes)
    except ValueError as problem:
        return [f"{context.name}: {problem}"]
    return report.lines()


class LeverChoice(Static, can_focus=True):
    """The lever line: ←/→ (or 1-5) choose while it has the focus; Tab goes on to the fields."""

    BINDINGS = [
        Binding("left", "step(-1)", "previous lever", show=False, id="whatif-lever-left"),
        Binding("right", "step(1)", "next lever", show=False, id="whatif-lever-right"),
        *(Binding(str(n), f"pick({n - 1})", show=False, id=f"whatif-lever-{n}") for n in range(1, len(LEVERS) + 1)),
    ]

    def action_step(self, step: int) -> None:
        screen = self.screen
        if isinstance(screen, WhatIfScreen):
            screen.choose((screen.lever + step) % len(LEVERS))

    def action_pick(self, index: int) -> None:
        screen = self.screen
        if isinstance(screen, WhatIfScreen):
            screen.choose(index)


class WhatIfScreen(ModalScreen[None]):
    AUTO_FOCUS = "#whatif-levers"
    DEFAULT_CSS = """
    WhatIfScreen { align: center middle; }
    #whatif { width: 116; max-width: 100%; height: auto; max-height: 100%; background: $surface;
              border: round $primary; padding: 0 1; }
    #whatif-levers { height: 1; }
    .whatif-row { height: 1; }
    .whatif-row > Static { width: 16; }
    .whatif-row > Input { height: 1; border: none; padding: 0; width: 12; background: $boost; }
    .whatif-row > Input:focus { background: $accent 30%; }
    #whatif-status { height: auto; margin-top: 1; }
    #whatif-result-box { height: auto; max-height: 16; }
    #whatif-result { width: 1fr; }  /* the report's prose wraps; its table fits 100 columns */
    #whatif-hint { height: 1; color: $foreground-muted; }
    """
    BINDINGS = [
        Binding("escape", "app.pop_screen", "close", id="whatif-close"),
        Binding("down", "app.focus_next", "next field", show=False, id="whatif-next"),
        Binding("up", "app.focus_previous", "previous field", show=False, id="whatif-previous"),
        Binding("enter", "run", "run", show=False, id="whatif-run"),
    ]

    def __init__(self, context: WhatIfContext) -> None:
        super().__init__()
        self.context = context
        self.lever = 0
        self.running = False
        self.lines: list[str] | None = None  # the last run's table, once it is back

    def compose(self) -> ComposeResult:
        with Vertical(id="whatif"):
            yield Static(
                f"what-if · {printable(self.context.name)} · simulated first, nothing is changed",
                id="whatif-title",
                markup=False,
            )
            yield LeverChoice(id="whatif-levers", markup=False)
            with Horizontal(classes="whatif-row", id="row-n"):
                yield Static("N", id="label-n", markup=False)
                yield Input(value="", id="field-n", restrict=r"[0-9]*")
            with Horizontal(classes="whatif-row", id="row-minutes"):
                yield Static("minutes ahead", markup=False)
                yield Input(value=str(DEFAULT_MINUTES), id="field-minutes", restrict=r"[0-9]*")
            yield Static(id="whatif-status", markup=False)
            with VerticalScroll(id="whatif-result-box"):
                yield Static(id="whatif-result", markup=False)
            yield Static("1-5 or ←/→ lever · Tab fields · Enter run · Esc close", id="whatif-hint", markup=False)

    def on_mount(self) -> None:
        self._show_lever()

    # --- the lever -----------------------------------------------------------

    def choose(self, index: int) -> None:
        self.lever = index
        self._show_lever()

    def _show_lever(self) -> None:
        line = Text("lever ")
        for number, (words, _label, _make) in enumerate(LEVERS, start=1):
            line.append(f" {number} {words} ", style="bold reverse" if number - 1 == self.lever else "")
        self.query_one("#whatif-levers", Static).update(line)
        label = LEVERS[self.lever][1]
        row = self.query_one("#row-n")
        row.display = label is not None
        if label is not None:
            self.query_one("#label-n", Static).update(label)
            self.query_one("#field-n", Input).value = str(DEFAULT_N.get(self.lever, ""))

    # --- the run -------------------------------------------------------------

    def _asked(self) -> tuple[Lever, int] | str:
        """The lever and minutes the fields say, or what is wrong with them (one line)."""
        minutes_text = self.query_one("#field-minutes", Input).value.strip()
        if not minutes_text.isdigit() or not 1 <= int(minutes_text) <= MAX_MINUTES:
            return f"minutes ahead {printable(minutes_text)!r}: expected a whole number from 1 to {MAX_MINUTES}"
        _words, label, make = LEVERS[self.lever]
        n = 0
        if label is not None:
            n_text = self.query_one("#field-n", Input).value.strip()
            if not n_text.isdigit() or int(n_text) > MAX_N:
                return f"{label} {printable(n_text)!r}: expected a whole number from 0 to {MAX_N}"
            n = int(n_text)
        return make(n), int(minutes_text)

    def action_run(self) -> None:
        if self.running:
            return
        asked = self._asked()
        status = self.query_one("#whatif-status", Static)
        if isinstance(asked, str):
            status.update(Text(asked, style="bold red"))
            return
        view = self.context.latest_view()
        if view is None:
            status.update(Text("no poll of this fleet yet: try again after the first one", style="bold red"))
            return
        lever, minutes = asked
        self.running = True
        status.update(
            f"running {LEVERS[self.lever][0].replace(' N', '')} over {minutes} min on the simulator… "
            "(the console keeps updating behind)"
        )
        self._run(view, lever, minutes)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_run()

    @work(thread=True, exclusive=True, group="whatif", exit_on_error=False)
    def _run(self, view: FleetView, lever: Lever, minutes: int) -> None:
        try:
            lines = self.context.run(self.context, view, lever, minutes)
        except Exception as error:  # noqa: BLE001 - a failed run is said in the dialog, the console stays up
            lines = [f"the what-if failed: {type(error).__name__}: {error}"]
        try:
            self.app.call_from_thread(self._show, lines)
        except RuntimeError:
            pass  # the console closed while the scenario ran: nobody to show it to

    def _show(self, lines: list[str]) -> None:
        self.running = False
        self.lines = lines
        if not self.is_attached:
            return
        self.query_one("#whatif-status", Static).update("done: Enter runs again, Esc closes")
        self.query_one("#whatif-result", Static).update(Text("\n".join(printable(line) for line in lines)))
