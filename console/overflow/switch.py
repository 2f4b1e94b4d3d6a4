"""A switch an operator asks for (from `capcon overflow set` or the console's dialog), before it is sent.

`SwitchRequest` holds what was asked, checked by the gateway's own rules (console/overflow/policy.py's
`parse_switch`), so a bad value is refused here, naming the same field the gateway would name, before
any gateway, webhook or command sees it. `body()` is the PUT /admin/policy JSON; `describe` says in one
line what changes for clients, shown before the switch is confirmed.

Pure: no clock (a request's time is stamped by console/live/switch.py, the one switch), no network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from console.overflow.policy import (
    MAX_REASON,
    SWITCH_PARAMETERS,
    DeferAction,
    Mode,
    Policy,
    PolicyError,
    parse_switch,
    policy_from_plan,
)

NO_REASON = "(say why)"  # a prefilled request's reason: `request` refuses it, the operator must write one
LINE = 76  # describe's longest line: it fits 80 columns with the dialog's border
PARAMETERS = SWITCH_PARAMETERS  # the one list, console/overflow/policy.py; named here for older imports
# The most permissive policy a body is checked against: whether hosted is allowed is the plan's and the
# gateway's to say (check_allowed, and the gateway's own refusal).
_ANY = Policy(hosted_allowed=True)
_BARE = re.compile(r"\d+(\.\d*)?|\.\d+")  # a typed duration without its unit


@dataclass(frozen=True)
class SwitchRequest:
    mode: Mode
    reason: str
    actor: str
    for_seconds: float | None = None  # None: until the next switch
    # None: not given, the gateway keeps its plan's value.
    max_queue: int | None = None
    max_wait_seconds: float | None = None
    max_inflight_per_replica: int | None = None
    hosted_after_queue: int | None = None
    defer_action: DeferAction | None = None
    max_batch_queue: int | None = None

    def __post_init__(self) -> None:
        # The gateway's own checks, on the body it would get; the cleaned reason and actor are kept, so the
        # history file holds what the gateways hold.
        checked = parse_switch(self._raw_body(), _ANY, 0.0)
        # Control characters alone pass the gateway's "not blank" check but clean to nothing: no reason at all.
        if not checked.reason:
            raise PolicyError("reason", "no printable text; expected why, in words")
        if not checked.actor:
            raise PolicyError("actor", "no printable text; expected who switched, as text")
        object.__setattr__(self, "reason", checked.reason)
        object.__setattr__(self, "actor", checked.actor)
        if self.max_wait_seconds is not None:
            object.__setattr__(self, "max_wait_seconds", checked.max_wait_seconds)

    def _raw_body(self) -> dict:
        body: dict = {"mode": self.mode, "reason": self.reason, "actor": self.actor}
        if self.for_seconds is not None:
            body["for"] = self.for_seconds
        for name in PARAMETERS:
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body

    def body(self) -> dict:
        """The PUT /admin/policy JSON (also what a webhook gets and a command reads on stdin)."""
        return self._raw_body()

    def parameters(self) -> dict:
        """The parameters given (the others keep the gateway's plan values)."""
        return {name: getattr(self, name) for name in PARAMETERS if getattr(self, name) is not None}


def request(
    mode: object,
    reason: object,
    actor: object,
    for_text: object = None,
    **parameters: object,
) -> SwitchRequest:
    """A SwitchRequest from loose values (options, a dialog's fields); PolicyError naming the field if one is bad.

    `for_text` is a duration such as 30m, 2h or 90s, or a number of seconds (a bare number as text is
    refused: typed, it was as likely minutes); the parameters are PARAMETERS' names.
    """
    from console.overflow.policy import MAX_SWITCH_SECONDS, MODES, parse_duration  # noqa: PLC0415 - beside its one use, for the reader

    unknown = sorted(set(parameters) - set(PARAMETERS))
    if unknown:
        raise PolicyError(unknown[0], f"unknown parameter; expected one of {', '.join(PARAMETERS)}")
    if mode not in MODES:
        raise PolicyError("mode", f"got {_shown(mode)}; expected one of {', '.join(MODES)}")
    if not isinstance(reason, str) or not reason.strip() or reason.strip() == NO_REASON:
        raise PolicyError("reason", "required: say why, in words (it goes to the history with the switch)")
    if not isinstance(actor, str) or not actor.strip():
        raise PolicyError("actor", f"got {_shown(actor)}; expected who switched, as text")
    if isinstance(for_text, str) and _BARE.fullmatch(for_text.strip()):
        # `30` meant as minutes would expire after 30 seconds, without a word: the unit is asked for.
        from console.when import bare_span_problem  # noqa: PLC0415 - beside its one use

        raise PolicyError(
            "for", f"got {_shown(for_text)}: {bare_span_problem(float(for_text), None, MAX_SWITCH_SECONDS)}"
        )
    seconds = None if for_text in (None, "") else parse_duration(for_text, "for")
    given: dict[str, Any] = {k: v for k, v in parameters.items() if v is not None}  # each checked by the request
    return SwitchRequest(mode=mode, reason=reason, actor=actor, for_seconds=seconds, **given)


def check_allowed(req: SwitchRequest, plan_policy: Policy) -> None:
    """Refuse what the plan forbids (hosted without data.prompts_may_leave), as the gateway would."""
    parse_switch(req.body(), plan_policy, 0.0)


def prefilled(source: object, mode: Mode | None = None, replicas: int = 1, instances: int = 1) -> SwitchRequest:
    """A request with the plan's figures filled in, to be edited: from a Policy, or from a Plan.

    A Plan's `overflow.max_queue` is per replica: times `replicas`, shared between `instances` gateways,
    as `capcon gateway` reads it. The reason is left for the operator: a placeholder that says so.
    """
    policy = source if isinstance(source, Policy) else policy_from_plan(source, replicas, instances)  # type: ignore[arg-type]  # a Plan
    chosen = mode or policy.mode
    return SwitchRequest(
        mode=chosen,
        reason=NO_REASON,
        actor="unknown",
        max_queue=policy.max_queue,
        max_wait_seconds=policy.max_wait_seconds,
        max_inflight_per_replica=policy.max_inflight_per_replica,
        hosted_after_queue=policy.hosted_after_queue,
        defer_action=policy.defer_action,
        max_batch_queue=policy.max_batch_queue,
    )


def describe(req: SwitchRequest, current: Policy | None, replicas: int) -> str:
    """One line (at most LINE characters) saying what changes for clients if `req` is applied.

    Parameters the request leaves out are read from `current` (the gateway's policy now), else the defaults.
    """
    base = current or Policy()
    after = {f.name: getattr(base, f.name) for f in fields(Policy)}
    after.update(req.parameters())
    queue, wait = after["max_queue"], after["max_wait_seconds"]
    if req.mode == "pass":
        cap = after["max_inflight_per_replica"]
        line = "every request is forwarded"
        extras = []
        if current is not None and current.mode != "pass":
            extras.append("; the queue is released")
        if cap:
            extras.append(f"; at most {cap} in flight on each of {max(1, replicas)} replicas")
    elif req.mode == "bounded_queue":
        line = f"new requests past {queue} queued get 429 with Retry-After"
        extras = [f"; 503 after {wait:g} s waiting"]
    elif req.mode == "hosted":
        line = f"past {after['hosted_after_queue']} queued, new requests go to the hosted endpoint"
        extras = [f"; 429 past {queue} queued"]
    elif after["defer_action"] == "hold":
        line = f"deferrable requests wait in a batch queue of {after['max_batch_queue']}"
        line = line if len(line) + 28 <= LINE else f"deferrable wait in a batch queue of {after['max_batch_queue']}"
        extras = ["; interactive keep the queue"]
    else:
        line = "deferrable requests get 429 until off-peak; interactive keep the queue"
        extras = []
    if req.for_seconds is not None:
        extras.append(f"; for {_duration(req.for_seconds)}")
    for extra in extras:
        if len(line) + len(extra) <= LINE:
            line += extra
    return line if len(line) <= LINE else line[: LINE - 1] + "…"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g} s"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


__all__ = [
    "LINE",
    "MAX_REASON",
    "NO_REASON",
    "PARAMETERS",
    "SwitchRequest",
    "check_allowed",
    "describe",
    "prefilled",
    "request",
]
