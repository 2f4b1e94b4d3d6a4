"""The one overflow switch: what key m in the console and `capcon overflow set` both call.

`switch` checks the request against the plan's rules (hosted only when data.prompts_may_leave; the same
check the gateway makes), stamps the moment it was asked, sends it to every actuator, records the attempt
once through the audit sink (applied, partly applied, refused by the plan, or interrupted), and returns
each actuator's answer. The two callers differ only in how they show the outcome, so they cannot disagree
in words, in time stamps or in what reaches the history.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from console.fleet.overflow import SwitchNote
from console.live.actuators import Actuator, ActuatorAnswer, apply_all
from console.live.audit import AuditSink, attempt_detail, subject
from console.overflow.policy import MAX_ACTOR, Policy, PolicyError
from console.overflow.switch import SwitchRequest, check_allowed

# Said of an actuator still asking when the switch was stopped (Ctrl+C, the console closing).
INTERRUPTED = "interrupted before it answered: it may have applied; see `capcon overflow status`"


@dataclass(frozen=True)
class SwitchOutcome:
    request: SwitchRequest
    at: float  # when it was asked: the moment the operator confirmed
    answers: tuple[ActuatorAnswer, ...]
    refused: str = ""  # why the plan's rules refused it (then nothing was sent); "" when it was sent
    unrecorded: str = ""  # why the history could not take the attempt; "" when it did

    @property
    def applied(self) -> int:
        return sum(a.ok for a in self.answers)

    @property
    def ok(self) -> bool:
        return not self.refused and bool(self.answers) and self.applied == len(self.answers)

    def words(self) -> str:
        """ "2 of 2 applied", "refused by the plan": how the timeline and the dialog sum it up."""
        return "refused by the plan" if self.refused else f"{self.applied} of {len(self.answers)} applied"

    def note(self) -> SwitchNote:
        """The switch on the console's timeline."""
        r = self.request
        return SwitchNote(self.at, r.mode, r.actor, r.reason, self.words())


def refusal(request: SwitchRequest, rules: Policy) -> str:
    """Why the plan's rules refuse `request`, in the words both the console and the CLI show; "" if allowed."""
    try:
        check_allowed(request, rules)
    except PolicyError as problem:
        message = str(problem)
        prefix = f"{problem.field}: "
        return message[len(prefix) :] if message.startswith(prefix) else message
    return ""


def plan_rules(plan: object) -> Policy:
    """The rules a switch is checked against: the plan's data.prompts_may_leave (no plan: the gateway's own say)."""
    if plan is None:
        return Policy(hosted_allowed=True)  # no plan to hold it to: each gateway refuses by its own plan
    return Policy(hosted_allowed=bool(plan.data.prompts_may_leave))  # type: ignore[attr-defined]  # a Plan


async def switch(
    request: SwitchRequest,
    *,
    fleet: str | None,
    rules: Policy,
    actuators: Callable[[], Sequence[Actuator]],
    audit: AuditSink,
    clock: Callable[[], float] = time.time,
    timeout: float | None = None,  # noqa: ASYNC109 - a bound on each actuator, each answering on its own
) -> SwitchOutcome:
    """Check, send, record, answer. `actuators` builds them once the rules allow the switch (a missing token is
    then a UserError, raised before anything is sent or recorded). A refusal by the plan is recorded too:
    someone asked for it."""
    at = clock()
    refused = refusal(request, rules)
    if refused:
        return await _recorded(SwitchOutcome(request, at, (), refused), fleet, audit)
    targets = list(actuators())
    try:
        answers = await apply_all(targets, request.body(), timeout=timeout)
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Stopped while asking: the attempt is still recorded, its outcome unknown.
        await _recorded(
            SwitchOutcome(request, at, tuple(ActuatorAnswer(a.name, False, INTERRUPTED, 0.0) for a in targets)),
            fleet,
            audit,
        )
        raise
    return await _recorded(SwitchOutcome(request, at, answers), fleet, audit)


async def _recorded(outcome: SwitchOutcome, fleet: str | None, audit: AuditSink) -> SwitchOutcome:
    request, answers = outcome.request, outcome.answers
    detail = attempt_detail(outcome.at, request, {a.name: None for a in answers}, answers, outcome.refused)
    try:
        await audit.record(outcome.at, fleet, subject(request, answers, outcome.refused), detail)
    except Exception as error:  # noqa: BLE001 - the switch happened (or not) all the same: say it was not recorded
        words = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        return SwitchOutcome(request, outcome.at, answers, outcome.refused, words)
    return outcome


def default_actor() -> str:
    """Who is switching, when --actor does not say: user@host, printable and bounded."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name, no passwd entry (a container's numeric uid)
        user = "unknown"
    try:
        host = socket.gethostname()
    except OSError:
        host = ""
    text = f"{user}@{host}" if host else user
    flat = "".join(c if c.isprintable() else " " for c in text).strip()
    return flat[:MAX_ACTOR] or "unknown"
