"""Every switch attempt, applied, refused or not, as one `overflow_attempt` event in the history file.

What an operator asked for and what each actuator answered: who, when, from (each gateway's mode before,
when it said), to, the parameters, the reason, and each answer (name, ok, detail), or why the plan's
rules refused it before anything was sent. The gateways write their own `overflow_switch` events when
they apply one; this is the asking side's record, so a switch that reached no gateway is in the history
as well. Names are already redacted and details bounded by the actuators; no token or secret is ever
handed to this module.

One sink writes it, whoever asked: `StoreAudit` on a history file opened for the purpose (`capcon
overflow set`, or a console that is not recording), `RecorderAudit` through the recorder's own writer
thread (a console recording its polls), so a file never has two writers in one process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from console.live.actuators import ActuatorAnswer
from console.overflow.switch import SwitchRequest

EVENT_KIND = "overflow_attempt"


class AuditSink(Protocol):
    """Where an attempt is recorded: one event, written or queued; raises when it cannot be."""

    async def record(self, at: float, fleet: str | None, subject: str, detail: dict) -> None: ...


class StoreAudit:
    """A console.store.database.Store already open (so a file that cannot be written stops a switch before it is sent)."""

    def __init__(self, store: object) -> None:
        self.store = store

    async def record(self, at: float, fleet: str | None, subject: str, detail: dict) -> None:
        self.store.write_event(at, kind=EVENT_KIND, fleet=fleet, subject=subject, detail=detail)  # type: ignore[attr-defined]  # a Store


class FileAudit:
    """The history file at `path`, opened for each attempt and closed after: a console that records no polls."""

    def __init__(self, path: str | Path) -> None:
        self.path = path

    async def record(self, at: float, fleet: str | None, subject: str, detail: dict) -> None:
        # On a thread: the file may be busy for a moment (another writer's lock), and the console keeps drawing.
        await asyncio.to_thread(self._write, at, fleet, subject, detail)

    def _write(self, at: float, fleet: str | None, subject: str, detail: dict) -> None:
        from console.store.database import Store  # noqa: PLC0415 - the storage machinery only when a switch is made

        store = Store.open(self.path)
        try:
            store.write_event(at, kind=EVENT_KIND, fleet=fleet, subject=subject, detail=detail)
        finally:
            store.close()


class NoAudit:
    """No history to write to (`capcon demo` without --db): the attempt is on the console's timeline only."""

    async def record(self, at: float, fleet: str | None, subject: str, detail: dict) -> None:
        return None


class RecorderAudit:
    """A running console.store.recorder.Recorder: the event joins its queue, written by its one thread."""

    def __init__(self, recorder: object) -> None:
        self.recorder = recorder

    async def record(self, at: float, fleet: str | None, subject: str, detail: dict) -> None:
        self.recorder.event(at, EVENT_KIND, fleet=fleet, subject=subject, detail=detail)  # type: ignore[attr-defined]  # a Recorder


def attempt_detail(
    at: float,
    request: SwitchRequest,
    before: Mapping[str, str | None],
    answers: Sequence[ActuatorAnswer],
    refused: str = "",
) -> dict:
    """The event's detail; `before` maps an actuator's name to its mode before (answers fill in what it lacks)."""
    known = dict(before)
    for answer in answers:
        if known.get(answer.name) is None and answer.previous_mode is not None:
            known[answer.name] = answer.previous_mode
    applied = sum(a.ok for a in answers)
    detail = {
        "actor": request.actor,
        "at": at,
        "from": known,
        "to": request.mode,
        "parameters": request.parameters(),
        "for_seconds": request.for_seconds,
        "reason": request.reason,
        "answers": [{"name": a.name, "ok": a.ok, "detail": a.detail, "seconds": a.seconds} for a in answers],
        "applied": applied,
        "failed": len(answers) - applied,
    }
    if refused:
        detail["refused"] = refused
    return detail


def outcome_words(answers: Sequence[ActuatorAnswer], refused: str = "") -> str:
    """ "applied", "1 of 2 applied", "refused by the plan": the event's subject and the timeline's word."""
    if refused:
        return "refused by the plan"
    applied = sum(a.ok for a in answers)
    return "applied" if answers and applied == len(answers) else f"{applied} of {len(answers)} applied"


def subject(request: SwitchRequest, answers: Sequence[ActuatorAnswer], refused: str = "") -> str:
    return f"-> {request.mode}: {outcome_words(answers, refused)}"
