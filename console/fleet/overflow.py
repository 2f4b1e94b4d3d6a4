"""The overflow panel's words: what the gateways did over the window, the mode they enforce, and when to switch.

Pure: the gateways' figures (console.metrics.gateway), the fleet view and the plan's hour come in; lines
of text with a style name go out. A figure no gateway gave is `?`, never 0: a panel that reads "0 rejected/s"
while the gateway is down would say the opposite of what is happening.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from console.fleet import format as fmt
from console.fleet.client import panel_client_line
from console.fleet.flags import Flag
from console.fleet.plan_now import PlanNow
from console.metrics.figures import Figures
from console.metrics.gateway import MIXED, GatewayFigures, PolicyInForce

MODE_WORDS = {"bounded_queue": "bounded queue", "hosted": "hosted", "defer": "defer", "pass": "pass", MIXED: "MIXED"}
# The flags after which the plan's overflow policy is the answer (console.fleet.flags kinds).
SUGGESTING_KINDS = ("saturation", "slo_breach_")
SWITCH_KEY = "m"
# The history's events of a switch: asked for (console/overflow/audit.py), taken by a gateway (its history).
ATTEMPT_KIND = "overflow_attempt"
SWITCH_KIND = "overflow_switch"


@dataclass(frozen=True)
class Line:
    text: str
    style: str = ""  # "", "warning", "critical", "unknown", "suggest"


def mode_words(mode: str | None) -> str:
    return MODE_WORDS.get(mode or "", mode or "?")


def utc_hhmm(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M")


def policy_words(policy: PolicyInForce | None, hhmm: Callable[[float], str] = utc_hhmm) -> str:
    """The header's word on the mode in force: "hosted by alice 14:02-14:32", "bounded queue (plan)".

    `hhmm` writes a time of day (the console passes the terminal's local time, as its flags use)."""
    if policy is None:
        return "?"
    words = mode_words(policy.mode)
    if policy.mode == MIXED:
        return words
    if policy.from_plan:
        return f"{words} (plan)"
    words += f" by {policy.actor or '?'}"
    if policy.set_at is not None:
        words += f" {hhmm(policy.set_at)}"
    if policy.expires_at is not None:
        words += f" until {hhmm(policy.expires_at)}"
    return words


def _per_second(value: float | None) -> str:
    return f"{fmt.rate(value)}/s" if value is not None else "?/s"


def _dollars(value: float | None) -> str:
    if value is None:
        return "$?"
    return f"${value:,.0f}" if value >= 100 else f"${value:.2f}"


def replica_dollars_per_hour(plan: PlanNow | None) -> float | None:
    """What one more replica costs an hour: its GPUs at the plan's price."""
    if plan is None or plan.gpus_per_replica is None:
        return None
    return plan.gpus_per_replica * plan.gpu_price_per_hour


def suggestion(
    flags: tuple[Flag, ...], fleet: Figures, plan: PlanNow | None, policy: PolicyInForce | None
) -> str | None:
    """The plan's chosen mode and the key that applies it, when saturation or an SLO breach has lasted its minimum
    (an active flag) and the load is above the plan; None otherwise, or when that mode is already in force."""
    if plan is None:
        return None
    if not any(f.kind.startswith(SUGGESTING_KINDS) for f in flags):
        return None
    load = fleet.requests_per_second
    if load is None or not load > plan.planned_load_rps:
        return None
    if policy is not None and policy.mode == plan.overflow_mode:
        return None
    return f"▶ plan says {mode_words(plan.overflow_mode)}: {SWITCH_KEY} to switch"


def panel_lines(gateway: GatewayFigures | None, plan: PlanNow | None, suggest: str | None) -> list[Line]:
    """The panel's lines (the clients' TTFT when the gateways give it, three of figures, the suggestion), each at
    most 40 characters: the right column at 80."""
    if gateway is None or gateway.answering == 0:
        shown = "no gateway answering" if gateway is not None else "no gateway watched"
        lines = [Line(f"{shown}: every figure unknown", "unknown")]
        if gateway is not None and gateway.error:
            lines.append(Line(gateway.error, "unknown"))
        return lines + ([Line(suggest, "suggest")] if suggest else [])
    g = gateway
    queue = fmt.count(g.queue_length) if g.queue_length is not None else "?"
    wait = f" (p95 {fmt.seconds(g.queue_wait_p95_seconds)})" if g.queue_wait_p95_seconds is not None else ""
    refused = (g.rejected_per_second or 0) + (g.timed_out_per_second or 0)
    lines = [
        Line(f"admitted {_per_second(g.admitted_per_second)} · queue {queue}{wait}"),
        Line(
            f"429 {_per_second(g.rejected_per_second)} · 503 {_per_second(g.timed_out_per_second)}"
            f" · defer {_per_second(g.deferred_per_second)}",
            "warning" if refused > 0 else "",
        ),
        Line(
            f"hosted {_per_second(g.hosted_per_second)} {_dollars(g.hosted_dollars_per_hour)}/h"
            f" · +1 replica {_dollars(replica_dollars_per_hour(plan))}/h"
        ),
    ]
    if g.client_ttft_p95_seconds is not None or g.client_e2e_p95_seconds is not None:
        # First: the latency the users waited, queue included, red over the plan's target for it.
        ttft, e2e = g.client_ttft_p95_seconds, g.client_e2e_p95_seconds
        if ttft is not None:
            over = plan is not None and plan.ttft_p95_target_seconds is not None and ttft > plan.ttft_p95_target_seconds
        else:
            over = (
                plan is not None
                and plan.e2e_p95_target_seconds is not None
                and e2e is not None
                and e2e > plan.e2e_p95_target_seconds
            )
        lines.insert(0, Line(panel_client_line(g), "critical" if over else ""))
    if g.answering < g.gateways:
        lines.append(Line(f"{g.gateways - g.answering} of {g.gateways} gateways not answering", "critical"))
    elif g.policy is not None and g.policy.mode == MIXED:
        lines.append(Line("gateways disagree: " + ", ".join(mode_words(m) for m in g.modes), "critical"))
    if suggest:
        lines.append(Line(suggest, "suggest"))
    return lines


@dataclass(frozen=True)
class SwitchNote:
    """A policy switch on the flags panel's timeline: one asked for here (with its reason and outcome), one a
    gateway was seen to take (someone else's switch, or an expiry), or one read back from the history."""

    at: float
    mode: str
    actor: str
    reason: str = ""
    outcome: str = ""  # "2 of 2 applied"; "" when only seen on a gateway


MAX_NOTES = 8  # the most recent switches the panel keeps


def note_line(note: SwitchNote, hhmm: Callable[[float], str] = utc_hhmm) -> str:
    """ "⇄ 10:02 pass by alice: spike at 10:02 (2 of 2 applied)"."""
    line = f"⇄ {hhmm(note.at)} {mode_words(note.mode)} by {note.actor or '?'}"
    if note.reason:
        line += f": {note.reason}"
    if note.outcome:
        line += f" ({note.outcome})"
    return line


def seen_switch(before: PolicyInForce | None, after: PolicyInForce | None) -> SwitchNote | None:
    """A switch the gateways show between two reads (console/live/session.py tells one asked there from others')."""
    if after is None or after.mode == MIXED or before is None:
        return None
    if (after.mode, after.actor, after.set_at) == (before.mode, before.actor, before.set_at):
        return None
    at = after.set_at if after.set_at is not None else 0.0
    return SwitchNote(at, after.mode, "plan (expiry)" if after.from_plan else after.actor)


def notes_from_events(events: Sequence[tuple[float, str, Mapping[str, object] | None]]) -> tuple[SwitchNote, ...]:
    """The timeline from a history's events, newest first: (at, kind, detail) of `overflow_attempt` (what was
    asked, with its answers) and `overflow_switch` (what a gateway took). A gateway's record of a switch that was
    also asked for here is the same switch; it stands alone for an expiry or a switch asked elsewhere."""
    asked: list[SwitchNote] = []
    taken: list[SwitchNote] = []
    for at, kind, detail in events:
        d = detail or {}
        mode, actor, reason = str(d.get("to", "?")), str(d.get("actor", "")), str(d.get("reason", ""))
        if kind == ATTEMPT_KIND:
            applied, failed = d.get("applied"), d.get("failed")
            outcome = (
                "refused by the plan"  # console/live/switch.py: nothing was sent
                if d.get("refused")
                else f"{applied} of {applied + failed} applied"
                if isinstance(applied, int) and isinstance(failed, int)
                else ""
            )
            asked.append(SwitchNote(at, mode, actor, reason, outcome))
        elif kind == SWITCH_KIND:
            taken.append(SwitchNote(at, mode, "plan (expiry)" if d.get("expired") else actor, reason))
    alone = [
        t for t in taken if not any(a.mode == t.mode and a.actor == t.actor and abs(a.at - t.at) < 60 for a in asked)
    ]
    notes = sorted(asked + alone, key=lambda n: n.at)
    return tuple(reversed(notes[-MAX_NOTES:]))
