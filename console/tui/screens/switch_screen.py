"""The overflow switch: choose a mode, its parameters (the plan's, prefilled), a reason and an expiry, see in one line
what changes for clients, confirm, and read what every gateway (or webhook, or command) answered.

Keyboard only, and it fits 80x24: ←/→ or 1-4 choose the mode (the dialog opens on it), Tab and ↑/↓ move
between the fields, Enter on the reason asks to confirm, Enter again applies, Esc closes (or steps back from
the confirmation).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from console.fleet.overflow import mode_words
from console.live.actuators import ActuatorAnswer
from console.live.switch import SwitchOutcome
from console.overflow.policy import MODES, Policy, PolicyError
from console.overflow.switch import SwitchRequest, describe, request
from console.text import printable

# The fields, in Tab order: (id, label, the request's parameter, the modes it belongs to).
FIELDS = (
    ("max_queue", "max queue", "max_queue", ("bounded_queue", "hosted", "defer")),
    ("max_wait", "max wait s", "max_wait_seconds", ("bounded_queue", "hosted", "defer")),
    ("hosted_after", "hosted after", "hosted_after_queue", ("hosted",)),
    ("defer_action", "deferrable", "defer_action", ("defer",)),
    ("for", "for", None, MODES),
    ("reason", "reason", None, MODES),
)


@dataclass(frozen=True)
class SwitchContext:
    """What the dialog needs from the console: the plan's policy, what is in force, who, and where it goes."""

    plan_policy: Policy  # the plan's overflow section as a gateway reads it: the prefilled values
    current_mode: str | None  # what the gateways enforce now (None: not known)
    replicas: int
    actor: str
    targets: Sequence[str]  # the actuators' names, for the confirmation ("apply to 2 gateways")
    apply: Callable[[SwitchRequest], Awaitable[SwitchOutcome]]  # the one switch (console/live/switch.py)


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class ModeChoice(Static, can_focus=True):
    """The mode line: ←/→ (or 1-4) choose while it has the focus; Tab goes on to the fields."""

    BINDINGS = [
        Binding("left", "step(-1)", "previous mode", show=False, id="switch-mode-left"),
        Binding("right", "step(1)", "next mode", show=False, id="switch-mode-right"),
        *(Binding(str(n), f"pick({n - 1})", show=False, id=f"switch-mode-{n}") for n in range(1, len(MODES) + 1)),
    ]

    def action_step(self, step: int) -> None:
        self.screen.choose((MODES.index(self.screen.mode) + step) % len(MODES))  # type: ignore[attr-defined]

    def action_pick(self, index: int) -> None:
        self.screen.choose(index)  # type: ignore[attr-defined]  # always on a SwitchScreen


class SwitchScreen(ModalScreen[None]):
    AUTO_FOCUS = "#switch-modes"  # the mode first: Tab then walks the fields
    DEFAULT_CSS = """
    SwitchScreen { align: center middle; }
    #switch { width: 80; max-width: 100%; height: auto; max-height: 100%; background: $surface;
              border: round $primary; padding: 0 1; }
    #switch-modes { height: 1; }
    .switch-row { height: 1; }
    .switch-row > Static { width: 14; }
    .switch-row > Input { height: 1; border: none; padding: 0; width: 1fr; background: $boost; }
    .switch-row > Input:focus { background: $accent 30%; }
    #switch-summary { height: auto; text-style: bold; margin-top: 1; }
    #switch-error { height: auto; color: $error; }
    #switch-result { height: auto; }
    #switch-hint { height: 1; color: $foreground-muted; }
    """
    BINDINGS = [
        Binding("escape", "back", "close", id="switch-close"),
        Binding("down", "app.focus_next", "next field", show=False, id="switch-next"),
        Binding("up", "app.focus_previous", "previous field", show=False, id="switch-previous"),
    ]

    def __init__(self, context: SwitchContext, mode: str | None = None) -> None:
        super().__init__()
        self.context = context
        self.mode = mode if mode in MODES else context.plan_policy.mode
        self.confirming: SwitchRequest | None = None
        self.applying = False
        self.answers: tuple[ActuatorAnswer, ...] | None = None
        self.outcome: SwitchOutcome | None = None

    def compose(self) -> ComposeResult:
        policy = self.context.plan_policy
        prefilled = {
            "max_queue": policy.max_queue,
            "max_wait": policy.max_wait_seconds,
            "hosted_after": policy.hosted_after_queue,
            "defer_action": policy.defer_action,
            "for": "",
            "reason": "",
        }
        with Vertical(id="switch"):
            now = mode_words(self.context.current_mode) if self.context.current_mode else "not known"
            yield Static(f"overflow switch · in force: {now}", id="switch-title", markup=False)
            yield ModeChoice(id="switch-modes", markup=False)
            for field_id, label, _parameter, _modes in FIELDS:
                with Horizontal(classes="switch-row", id=f"row-{field_id}"):
                    yield Static(label, markup=False)
                    yield Input(value=_text(prefilled[field_id]), id=f"field-{field_id}", placeholder=_hint(field_id))
            yield Static(id="switch-summary", markup=False)
            yield Static(id="switch-error", markup=False)
            yield Static(id="switch-result", markup=False)
            yield Static(id="switch-hint", markup=False)

    def on_mount(self) -> None:
        self._show_mode()

    # --- the mode ------------------------------------------------------------

    def choose(self, index: int) -> None:
        if self.applying or self.answers is not None:
            return
        self.mode = MODES[index]
        self.confirming = None
        self._show_mode()

    def _show_mode(self) -> None:
        line = Text("mode ")
        for number, mode in enumerate(MODES, start=1):
            chosen = mode == self.mode
            line.append(f" {number} {mode_words(mode)} ", style="bold reverse" if chosen else "")
        line.append(" ←/→")
        self.query_one("#switch-modes", Static).update(line)
        for field_id, _label, _parameter, modes in FIELDS:
            self.query_one(f"#row-{field_id}").display = self.mode in modes
        self._refresh_summary()

    # --- the fields ----------------------------------------------------------

    def _built(self, reason: str | None = None) -> SwitchRequest:
        """The request the fields say (with `reason` instead of the field's, to describe it before one is typed);
        PolicyError naming the field when one is wrong."""
        values = {f: self.query_one(f"#field-{f}", Input).value.strip() for f, *_ in FIELDS}
        if reason is not None:
            values["reason"] = reason
        parameters: dict[str, object] = {}
        for field_id, _label, parameter, modes in FIELDS:
            if parameter is None or self.mode not in modes or not values[field_id]:
                continue
            parameters[parameter] = _parsed(parameter, values[field_id])
        return request(self.mode, values["reason"], self.context.actor, values["for"] or None, **parameters)

    def on_input_changed(self, _event: Input.Changed) -> None:
        if self.confirming is not None:
            self.confirming = None
        self._refresh_summary()

    def _refresh_summary(self) -> None:
        error = ""
        try:
            built = self._built()
        except PolicyError as problem:
            built = None
            # A missing reason is not an error while it is being typed: the summary says it is needed.
            error = "" if problem.field == "reason" else f"{_label_of(problem.field)}: {problem}"
        summary = self.query_one("#switch-summary", Static)
        if built is not None:
            summary.update(Text(describe(built, self._current_policy(), self.context.replicas)))
        else:
            summary.update(Text(self._summary_without_reason()))
        self.query_one("#switch-error", Static).update(Text(printable(error)))
        self._show_hint()

    def _summary_without_reason(self) -> str:
        try:
            trial = self._built(reason="(to be said)")
        except PolicyError:
            return ""
        return describe(trial, self._current_policy(), self.context.replicas)

    def _current_policy(self) -> Policy | None:
        mode = self.context.current_mode
        return Policy(mode=mode) if mode in MODES else None

    def _show_hint(self) -> None:
        hint = self.query_one("#switch-hint", Static)
        targets = len(self.context.targets)
        where = f"{targets} {'target' if targets == 1 else 'targets'}"
        if self.applying:
            hint.update(f"applying to {where}…")
        elif self.answers is not None:
            hint.update("Esc closes")
        elif self.confirming is not None:
            hint.update(Text(f"Enter applies to {where} · Esc goes back", style="bold"))
        elif isinstance(self.focused, ModeChoice):
            hint.update("←/→ or 1-4 choose the mode · Tab to the fields · Esc closes")
        elif self.focused is not None and self.focused.id == "field-reason":
            hint.update("the reason: Enter to confirm · Tab/↑↓ fields · Esc closes")
        else:
            hint.update("Tab/↑↓ fields · Enter on the reason to confirm · Esc closes")

    def on_descendant_focus(self, _event: events.DescendantFocus) -> None:
        self._show_hint()  # the hint says what the focused field takes

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.applying or self.answers is not None:
            return
        if event.input.id != "field-reason":
            self.focus_next()
            return
        if self.confirming is not None:
            self._apply(self.confirming)
            return
        try:
            built = self._built()
        except PolicyError as problem:
            self.query_one("#switch-error", Static).update(Text(printable(f"{_label_of(problem.field)}: {problem}")))
            return
        self.confirming = built
        self._show_hint()

    # --- applying ------------------------------------------------------------

    def _apply(self, chosen: SwitchRequest) -> None:
        self.applying = True
        self.confirming = None
        self._show_hint()
        self.run_worker(self._carry_out(chosen), exit_on_error=False, group="switch")

    async def _carry_out(self, chosen: SwitchRequest) -> None:
        outcome = await self.context.apply(chosen)
        self.applying = False
        self.outcome = outcome
        self.answers = outcome.answers
        self.query_one("#switch-result", Static).update(result_text(outcome))
        for field in self.query(Input):
            field.disabled = True
        self._show_hint()

    def action_back(self) -> None:
        if self.applying:
            return  # the answers are on their way (each actuator has its timeout)
        if self.confirming is not None:
            self.confirming = None
            self._show_hint()
            return
        self.dismiss(None)


def result_text(outcome: SwitchOutcome) -> Text:
    """Applied by every one, or which failed and why: one line each; or why the plan refused it."""
    text = Text()
    answers = outcome.answers
    applied = outcome.applied
    if outcome.refused:
        text.append(f"✖ nothing sent: {printable(outcome.refused)}\n", style="bold")
    elif outcome.ok:
        text.append(f"✓ applied by every one ({applied})\n", style="bold")
    else:
        text.append(f"✖ {applied} of {len(answers)} applied\n", style="bold")
    for answer in answers:
        mark = "✓" if answer.ok else "✖"
        text.append(f"{mark} {printable(answer.name)}: {printable(answer.detail)}\n"[:200])
    if outcome.unrecorded:
        text.append(f"✖ not recorded in the history: {printable(outcome.unrecorded)}\n"[:200])
    return text


def _parsed(parameter: str, value: str) -> object:
    if parameter == "defer_action":
        return value
    try:
        number = float(value)
    except ValueError:
        raise PolicyError(parameter, f"got {value[:20]!r}; expected a number") from None
    if parameter == "max_wait_seconds":
        return number
    if not number.is_integer():
        raise PolicyError(parameter, f"got {value[:20]!r}; expected a whole number")
    return int(number)


def _label_of(field: str) -> str:
    for _field_id, label, parameter, _modes in FIELDS:
        if parameter == field:
            return label
    return field


def _hint(field_id: str) -> str:
    return {
        "for": "optional: 30m, 2h; empty: until the next switch",
        "reason": "required: why, in words (it goes to the history)",
        "defer_action": "reject or hold",
    }.get(field_id, "")
