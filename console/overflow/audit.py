"""Every switch attempt, applied or not, as an `overflow_attempt` event in the history file.

What an operator asked for and what each actuator answered: who, when, from (each gateway's mode before,
when it said), to, the parameters, the reason, and each answer (name, ok, detail). The gateways write
their own `overflow_switch` events when they apply one; this is the asking side's record, so a switch
that reached no gateway is in the history as well. Names are already redacted and details bounded by
the actuators; no token or secret is ever handed to this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from console.overflow.actuators import ActuatorAnswer
from console.overflow.switch import SwitchRequest

EVENT_KIND = "overflow_attempt"


def attempt_detail(at: float, request: SwitchRequest, before: Mapping[str, str | None], answers) -> dict:
    applied = sum(a.ok for a in answers)
    return {
        "actor": request.actor,
        "at": at,
        "from": dict(before),
        "to": request.mode,
        "parameters": request.parameters(),
        "for_seconds": request.for_seconds,
        "reason": request.reason,
        "answers": [{"name": a.name, "ok": a.ok, "detail": a.detail, "seconds": a.seconds} for a in answers],
        "applied": applied,
        "failed": len(answers) - applied,
    }


def subject(request: SwitchRequest, answers: Sequence[ActuatorAnswer]) -> str:
    applied = sum(a.ok for a in answers)
    outcome = "applied" if answers and applied == len(answers) else f"{applied} of {len(answers)} applied"
    return f"-> {request.mode}: {outcome}"


def record_attempt(
    store,
    at: float,
    fleet: str | None,
    request: SwitchRequest,
    before: Mapping[str, str | None],
    answers: Sequence[ActuatorAnswer],
) -> dict:
    """Write the attempt to `store` (a console.store.database.Store) and return the event's detail.

    `before` maps an actuator's name to the mode it reported before the switch (None: not known);
    answers' own `previous_mode` fill in what `before` leaves out.
    """
    known = dict(before)
    for answer in answers:
        if known.get(answer.name) is None and answer.previous_mode is not None:
            known[answer.name] = answer.previous_mode
    detail = attempt_detail(at, request, known, answers)
    store.write_event(at, kind=EVENT_KIND, fleet=fleet, subject=subject(request, answers), detail=detail)
    return detail
