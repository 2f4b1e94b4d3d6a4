"""The overflow policy a gateway enforces: what it is, where it came from, when it ends.

A policy starts as the plan's (its `overflow` section) and can be switched at
runtime by an operator, with a reason, and optionally for a while only: an
emergency setting must not outlive the emergency, so an expired switch gives
way to the plan's policy without anyone having to remember it.

Pure: the switch's time is passed in, bodies are plain data already decoded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from console.plan.model import Plan

Mode = Literal["pass", "bounded_queue", "hosted", "defer"]
MODES: tuple[Mode, ...] = ("pass", "bounded_queue", "hosted", "defer")
DeferAction = Literal["reject", "hold"]

# Bounds on what an operator may set: a queue longer than this, or a wait longer than this, is no bound.
MAX_QUEUE = 100_000
MAX_WAIT_SECONDS = 600.0
MAX_INFLIGHT = 10_000
MAX_SWITCH_SECONDS = 7 * 86_400.0
MAX_REASON = 500
MAX_ACTOR = 100
# What a switch may set besides its mode, reason, actor and duration: the one list that the gateway's admin
# API, `capcon overflow set` and the console's dialog all read. A parameter left out keeps the plan's value.
SWITCH_PARAMETERS = (
    "max_queue",
    "max_wait_seconds",
    "max_inflight_per_replica",
    "hosted_after_queue",
    "defer_action",
    "max_batch_queue",
)
# The fields of a switch's body (PUT /admin/policy, a webhook's JSON, a command's stdin).
SWITCH_FIELDS = ("mode", *SWITCH_PARAMETERS, "reason", "actor", "for")


class PolicyError(ValueError):
    """A policy body that cannot be applied: `field` names the part, the message says what was expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Policy:
    mode: Mode = "bounded_queue"
    max_queue: int = 64  # the gateway's waiting requests, all replicas together
    max_wait_seconds: float = 5.0  # an absolute deadline per queued request
    # Requests in flight per replica before new ones wait; None: no cap (pass) or the planner's figure.
    max_inflight_per_replica: int | None = None
    hosted_after_queue: int = 0  # hosted: queued requests past which new ones go to the hosted endpoint
    defer_action: DeferAction = "reject"  # deferrable requests: refused until off-peak, or held in a batch queue
    max_batch_queue: int = 1_000
    hosted_allowed: bool = False  # the plan's data.prompts_may_leave: hosted is refused without it
    # Who set it, why and when; "plan" for the plan's own policy.
    actor: str = "plan"
    reason: str = "the plan's overflow section"
    set_at: float = 0.0
    expires_at: float | None = None

    @property
    def from_plan(self) -> bool:
        return self.actor == "plan"


def policy_from_plan(plan: Plan, replicas: int, instances: int = 1, set_at: float = 0.0) -> Policy:
    """The plan's overflow section as a policy for one of `instances` gateways in front of `replicas` replicas.

    The plan's `max_queue` is per replica (console/plan/model.py), so the gateway's bound is that
    times the replicas it fronts, shared out between the gateways behind the load balancer. Hosted is
    allowed only when the plan's data.prompts_may_leave says so.
    """
    overflow = plan.overflow
    return Policy(
        mode=overflow.mode,
        max_queue=max(1, math.ceil(overflow.max_queue * max(1, replicas) / max(1, instances))),
        max_wait_seconds=float(overflow.max_wait_seconds),
        hosted_allowed=bool(plan.data.prompts_may_leave),
        actor="plan",
        reason=f"the plan's overflow section ({plan.source_path or plan.name})",
        set_at=set_at,
    )


def in_force(current: Policy, plan_policy: Policy, now: float) -> Policy:
    """The policy to enforce at `now`: a switch until it expires, then the plan's own."""
    if current.expires_at is not None and now >= current.expires_at:
        return plan_policy
    return current


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, None: 1.0}


def parse_duration(value: object, field: str) -> float:
    """ "30m", "2h", "90s", "1d" or a number of seconds; positive, finite, at most a week."""
    if isinstance(value, bool):
        raise PolicyError(field, f"got {value!r}; expected a duration such as 30m, 2h or 90 (seconds)")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)) is not None:
        seconds = float(match[1]) * _UNITS[match[2]]
    else:
        raise PolicyError(field, f"got {_shown(value)}; expected a duration such as 30m, 2h or 90 (seconds)")
    if not math.isfinite(seconds) or seconds <= 0:
        raise PolicyError(field, f"got {_shown(value)}; expected a duration longer than zero")
    if seconds > MAX_SWITCH_SECONDS:
        raise PolicyError(field, f"got {_shown(value)}; expected at most 7d (a switch is for an emergency)")
    return seconds


def parse_switch(body: object, plan_policy: Policy, now: float) -> Policy:
    """The policy a switch asks for (an admin PUT body, a CLI or console switch), checked field by field.

    Parameters not given keep the plan's values; `reason` is required: the history must say why.
    """
    if not isinstance(body, dict):
        raise PolicyError("body", f"got {type(body).__name__}; expected a JSON object")
    known = set(SWITCH_FIELDS)
    unknown = sorted(str(k) for k in body if k not in known)
    if unknown:
        # An empty name is still named: the client must see which field was refused.
        raise PolicyError(unknown[0] or '""', f"unknown field; expected one of {', '.join(sorted(known))}")
    mode = body.get("mode")
    if mode not in MODES:
        raise PolicyError("mode", f"got {_shown(mode)}; expected one of {', '.join(MODES)}")
    if mode == "hosted" and not plan_policy.hosted_allowed:
        raise PolicyError(
            "mode",
            "hosted is refused: the plan's data.prompts_may_leave is false, so prompts "
            "may not be sent to a hosted endpoint",
        )
    reason = body.get("reason")
    # Judged once cleaned: control characters alone are no reason (they clean to nothing).
    if not isinstance(reason, str) or not _clean(reason, MAX_REASON):
        raise PolicyError("reason", "required: say why, in words (it goes to the history with the switch)")
    actor = body.get("actor", "unknown")
    if not isinstance(actor, str) or not _clean(actor, MAX_ACTOR):
        raise PolicyError("actor", f"got {_shown(actor)}; expected who switched, as text")
    changes = {
        "mode": mode,
        "reason": _clean(reason, MAX_REASON),
        "actor": _clean(actor, MAX_ACTOR),
        "set_at": now,
        "expires_at": now + parse_duration(body["for"], "for") if body.get("for") is not None else None,
    }
    if "max_queue" in body:
        changes["max_queue"] = _whole(body["max_queue"], "max_queue", 0, MAX_QUEUE)
    if "max_wait_seconds" in body:
        changes["max_wait_seconds"] = _seconds(body["max_wait_seconds"], "max_wait_seconds")
    if "max_inflight_per_replica" in body:
        value = body["max_inflight_per_replica"]
        changes["max_inflight_per_replica"] = (
            None if value is None else _whole(value, "max_inflight_per_replica", 1, MAX_INFLIGHT)
        )
    if "hosted_after_queue" in body:
        changes["hosted_after_queue"] = _whole(body["hosted_after_queue"], "hosted_after_queue", 0, MAX_QUEUE)
    if "max_batch_queue" in body:
        changes["max_batch_queue"] = _whole(body["max_batch_queue"], "max_batch_queue", 0, MAX_QUEUE)
    if "defer_action" in body:
        if body["defer_action"] not in ("reject", "hold"):
            raise PolicyError("defer_action", f"got {_shown(body['defer_action'])}; expected reject or hold")
        changes["defer_action"] = body["defer_action"]
    return replace(plan_policy, **changes)


def summary(policy: Policy) -> str:
    """What the policy means for clients, in one line (shown before a switch is confirmed, and in logs)."""
    if policy.mode == "pass":
        cap = policy.max_inflight_per_replica
        return "every request is forwarded" + (f"; past {cap} in flight on a replica, requests wait" if cap else "")
    queued = (
        f"new requests past {policy.max_queue} queued get 429 with Retry-After; a request waiting over "
        f"{policy.max_wait_seconds:g} s gets 503"
    )
    if policy.mode == "bounded_queue":
        return queued
    if policy.mode == "hosted":
        return (
            f"past {policy.hosted_after_queue} queued, new requests go to the hosted endpoint (the bounded "
            f"queue if it fails); {queued}"
        )
    if policy.defer_action == "hold":
        return (
            f"deferrable requests wait in a batch queue of {policy.max_batch_queue}, released while the fleet "
            f"has room; interactive: {queued}"
        )
    return f"deferrable requests get 429 with Retry-After at the next off-peak hour; interactive: {queued}"


def as_json(policy: Policy) -> dict:
    return {
        "mode": policy.mode,
        "max_queue": policy.max_queue,
        "max_wait_seconds": policy.max_wait_seconds,
        "max_inflight_per_replica": policy.max_inflight_per_replica,
        "hosted_after_queue": policy.hosted_after_queue,
        "defer_action": policy.defer_action,
        "max_batch_queue": policy.max_batch_queue,
        "hosted_allowed": policy.hosted_allowed,
        "actor": policy.actor,
        "reason": policy.reason,
        "set_at": policy.set_at,
        "expires_at": policy.expires_at,
        "summary": summary(policy),
    }


def _whole(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PolicyError(field, f"got {_shown(value)}; expected a whole number from {low} to {high}")
    return value


def _seconds(value: object, field: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_WAIT_SECONDS
    ):
        raise PolicyError(field, f"got {_shown(value)}; expected seconds over 0 and at most {MAX_WAIT_SECONDS:g}")
    return float(value)


def _clean(text: str, limit: int) -> str:
    """One line of printable text, cut at `limit`: it is shown in consoles and written to the history."""
    flat = "".join(c if c.isprintable() else " " for c in text).strip()
    return flat[:limit]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
