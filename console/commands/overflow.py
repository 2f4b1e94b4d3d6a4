"""`capcon overflow status|set`: the overflow policy from a runbook, through the same actuators as the console."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from console.args import SubParsers
from console.errors import UserError

if TYPE_CHECKING:
    from console.live.actuators import GatewayStatus
    from console.overflow.policy import PolicyError
    from console.overflow.switch import SwitchRequest
    from console.plan.model import Plan

DESCRIPTION = """\
Read or switch the overflow policy the fleet's gateways enforce, from a runbook or a shell.

status: each gateway's policy in force (mode, since when, who set it, why, until when),
its queue and its counters (GET /admin/policy and /admin/state).

set MODE: switch every actuator the plan names (overflow.actuators; default: the gateways
of fleet.gateways, or --gateway): capcon gateways through their admin API, a signed webhook,
a command. Parameters left out keep each gateway's plan values; --reason is required; with
--for the gateways return to the plan's policy by themselves when it runs out. Every
attempt, applied or not, is an `overflow_attempt` event in the history file.
"""

EPILOG = """\
modes: pass, bounded_queue, hosted (only when the plan lets prompts leave), defer.
tokens and secrets come from the environment only (--admin-token-env or the plan's
overflow.admin_token_env; a webhook's secret_env) and are never shown, logged or recorded.
exit status: 0 every gateway answered (status) or every actuator applied the switch (set);
1 some did not (one line each saying which and why); 2 bad input (a mode, a value, the plan,
a missing variable, the history file).
examples:
  capcon overflow status plans/chat.yaml
  capcon overflow status --gateway http://10.0.0.5:8081 --admin-token-env CAPCON_ADMIN_TOKEN --json
  capcon overflow set bounded_queue plans/chat.yaml --max-queue 64 --for 30m --reason "spike, scale-up coming"
  capcon overflow set pass plans/chat.yaml --reason "capacity is back\""""


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    from console.args import span
    from console.overflow.policy import MAX_SWITCH_SECONDS, MODES

    parser = sub.add_parser(
        "overflow",
        help="read or switch the gateways' overflow policy from a runbook (status, set MODE)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser(
        "status", help="each gateway's policy in force, queue and counters", description="each gateway's policy"
    )
    _common(status)
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    status.set_defaults(run=run)

    switch = actions.add_parser(
        "set",
        help="switch the policy on every actuator",
        description="switch the overflow policy on every actuator the plan names (or --gateway)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    switch.add_argument("mode", metavar="MODE", choices=MODES, help="one of " + ", ".join(MODES))
    _common(switch)
    switch.add_argument("--max-queue", type=int, metavar="N", help="queued requests, all replicas together")
    switch.add_argument("--max-wait", type=float, metavar="S", help="a queued request's deadline, seconds")
    switch.add_argument("--max-inflight", type=int, metavar="N", help="requests in flight per replica before waiting")
    switch.add_argument(
        "--hosted-after", type=int, metavar="N", help="hosted: queued requests past which new go hosted"
    )
    switch.add_argument(
        "--defer-action", choices=("reject", "hold"), help="defer: 429 until off-peak, or a batch queue"
    )
    switch.add_argument("--max-batch-queue", type=int, metavar="N", help="defer with hold: the batch queue's bound")
    switch.add_argument(
        "--for",
        dest="for_text",
        # No bare number: `--for 30` meant as minutes would expire after 30 seconds, without a word.
        type=span(MAX_SWITCH_SECONDS, bare_max=None),
        metavar="DURATION",
        help="for a while only, with its unit: 90s, 30m, 2h (at most 7d); it says when the switch expires",
    )
    switch.add_argument("--reason", required=True, help="why (required; it goes to the history with the switch)")
    switch.add_argument("--actor", help="who is switching (default: user@host)")
    switch.add_argument(
        "--db", metavar="PATH", help="the history file (default: history.sqlite in the user's data directory)"
    )
    switch.set_defaults(run=run)
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "plan", metavar="PLAN", nargs="?", help="plan file: its fleet.gateways, overflow.actuators, admin_token_env"
    )
    parser.add_argument(
        "--gateway",
        action="append",
        default=[],
        metavar="URL",
        help="a gateway's admin API (http://host:8081); repeat for each (default: the plan's fleet.gateways)",
    )
    parser.add_argument(
        "--admin-token-env",
        metavar="VAR",
        help="environment variable holding the gateways' admin token (default: the plan's overflow.admin_token_env)",
    )


# Option names for the fields a PolicyError names.
_OPTIONS = {
    "mode": "MODE",
    "reason": "--reason",
    "actor": "--actor",
    "for": "--for",
    "max_queue": "--max-queue",
    "max_wait_seconds": "--max-wait",
    "max_inflight_per_replica": "--max-inflight",
    "hosted_after_queue": "--hosted-after",
    "defer_action": "--defer-action",
    "max_batch_queue": "--max-batch-queue",
}


def _plan(args: argparse.Namespace) -> Plan | None:
    if not args.plan:
        return None
    from console.bench.estimate import load_plan

    return load_plan(args.plan)


def _admin_urls(args: argparse.Namespace) -> list[str] | None:
    if not args.gateway:
        return None
    from console.targets import base_url
    from console.targets import masked_target as shown

    urls = []
    for text in args.gateway:
        try:
            urls.append(base_url(text))
        except ValueError as problem:
            raise UserError(
                f"--gateway {shown(text)!r}: {problem}; expected http://host:port of its admin API"
            ) from None
    return urls


def _status_urls(args: argparse.Namespace, plan: Plan | None) -> list[str]:
    urls = _admin_urls(args)
    if urls:
        return urls
    listed = plan.fleet.gateways if plan is not None and plan.fleet is not None else ()
    urls = [g.admin_url for g in listed if g.admin_url]
    if not urls:
        raise UserError(
            "no gateway: expected --gateway URL (its admin API) or a plan with fleet.gateways and admin_url"
        )
    return urls


def _token(args: argparse.Namespace, plan: Plan | None) -> str:
    from console.live.actuators import MIN_TOKEN_LENGTH, env_value

    if args.admin_token_env:
        return env_value(
            os.environ, args.admin_token_env, "--admin-token-env", "the gateways' admin token", MIN_TOKEN_LENGTH
        )
    variable = plan.overflow.admin_token_env if plan is not None else None
    if not variable:
        raise UserError(
            "the gateways' admin token: expected --admin-token-env VAR or the plan's overflow.admin_token_env"
        )
    return env_value(
        os.environ, variable, "the plan's overflow.admin_token_env", "the gateways' admin token", MIN_TOKEN_LENGTH
    )


def run(args: argparse.Namespace) -> int:
    return run_status(args) if args.action == "status" else run_set(args)


# --- status -------------------------------------------------------------------------


def run_status(args: argparse.Namespace) -> int:
    import asyncio

    from console.live.actuators import read_status
    from console.redact import redact

    plan = _plan(args)
    urls = _status_urls(args, plan)
    token = _token(args, plan)

    async def read_all() -> list[GatewayStatus]:
        return await asyncio.gather(*(read_status(url, token) for url in urls))

    statuses = asyncio.run(read_all())
    if args.json:
        out = [
            {
                "gateway": s.name,
                "ok": s.ok,
                "detail": s.detail,
                "policy": s.policy,
                "plan_policy": s.plan_policy,
                "state": _state_summary(s.state),
            }
            for s in statuses
        ]
        # ensure_ascii: whatever a gateway sent reaches the terminal escaped; a token it echoed is masked.
        print(redact(json.dumps({"gateways": out}, indent=2, sort_keys=True, ensure_ascii=True), [token]))
    else:
        now = time.time()
        for s in statuses:
            for line in _status_lines(s, token, now):
                print(line)
    return 0 if all(s.ok for s in statuses) else 1


def _state_summary(state: dict | None) -> dict | None:
    if not isinstance(state, dict):
        return None
    keep = ("queue", "in_flight", "cap_per_replica", "totals", "hosted_usage", "switches", "stopping")
    summary = {k: state.get(k) for k in keep if k in state}
    replicas = state.get("replicas")
    if isinstance(replicas, list):
        summary["replicas"] = len(replicas)
        summary["healthy"] = sum(1 for r in replicas if isinstance(r, dict) and r.get("healthy") is True)
    return summary


def _status_lines(status: GatewayStatus, token: str, now: float) -> list[str]:
    from console.live.actuators import bounded
    from console.when import expiry_words, iso_when

    if not status.ok:
        return [f"{status.name}: NOT READ: {status.detail}"]
    p = status.policy or {}  # a status read ok always holds its policy

    def text(key: str, limit: int = 120) -> str:
        return bounded(str(p.get(key, "?")), [token], limit=limit)

    def moment(value: object) -> str | None:
        """A gateway's timestamp as ISO, or None if it is not one (a gateway's answer is anyone's text)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 253_402_300_800:
            return None
        return iso_when(value)

    since, until = moment(p.get("set_at")), moment(p.get("expires_at"))
    when = f" since {since}" if since else ""
    expiry = f", {expiry_words(p['expires_at'], now)}" if until else ""
    lines = [
        f"{status.name}: {text('mode', 20)}{when} by {text('actor', 100)}{expiry} ({text('reason', 200)})",
        f"  {text('summary', 300)}",
    ]
    state = _state_summary(status.state) or {}
    queue = listed if isinstance(listed := state.get("queue"), dict) else {}
    totals = counted if isinstance(counted := state.get("totals"), dict) else {}

    def n(value: object) -> str:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else "?"

    lines.append(
        f"  queue {n(queue.get('interactive'))}/{n(queue.get('max_queue'))}, batch {n(queue.get('batch'))}, "
        f"in flight {n(state.get('in_flight'))}, replicas {n(state.get('healthy'))}/{n(state.get('replicas'))} "
        f"healthy; answered: local {n(totals.get('local'))}, hosted {n(totals.get('hosted'))}, rejected "
        f"{n(totals.get('rejected'))}, timed out {n(totals.get('timed_out'))}, deferred {n(totals.get('deferred'))}"
    )
    return lines


# --- set ----------------------------------------------------------------------------


def build_request(args: argparse.Namespace) -> SwitchRequest:
    """The SwitchRequest the options ask for; UserError naming the option for a bad value."""
    from console.live.switch import default_actor
    from console.overflow.policy import PolicyError
    from console.overflow.switch import request

    try:
        return request(
            args.mode,
            args.reason,
            args.actor if args.actor is not None else default_actor(),
            args.for_text,
            max_queue=args.max_queue,
            max_wait_seconds=args.max_wait,
            max_inflight_per_replica=args.max_inflight,
            hosted_after_queue=args.hosted_after,
            defer_action=args.defer_action,
            max_batch_queue=args.max_batch_queue,
        )
    except PolicyError as problem:
        raise UserError(_option_words(problem)) from None


def _option_words(problem: PolicyError) -> str:
    option = _OPTIONS.get(problem.field, problem.field)
    message = str(problem)
    prefix = f"{problem.field}: "
    return f"{option}: {message[len(prefix) :] if message.startswith(prefix) else message}"


def run_set(args: argparse.Namespace) -> int:
    import asyncio

    from console.live.actuators import actuators_for
    from console.live.audit import StoreAudit
    from console.live.switch import plan_rules, switch
    from console.store.database import Store
    from console.store.paths import default_history_path

    plan = _plan(args)
    req = build_request(args)
    asked_at = time.time()  # the gateways count --for from their own receipt, a moment later
    admin_urls = _admin_urls(args)
    # Opened before anything is switched: a history that cannot be written stops here (exit 2), not after.
    store = Store.open(args.db if args.db else default_history_path())
    fleet = plan.name if plan is not None else "gateway"  # as `capcon gateway --db` names it
    try:
        outcome = asyncio.run(
            switch(
                req,
                fleet=fleet,
                rules=plan_rules(plan),
                actuators=lambda: actuators_for(plan, admin_urls, args.admin_token_env, os.environ),
                audit=StoreAudit(store),
            )
        )
    finally:
        store.close()
    if outcome.refused:
        raise UserError(f"{args.plan}: {outcome.refused}")
    answers = outcome.answers
    failed = [a for a in answers if not a.ok]
    for answer in answers:
        if answer.ok:
            print(f"applied by {answer.name}: {answer.detail}")
    if req.for_seconds is not None and len(failed) < len(answers):
        from console.when import expiry_words

        # Said on stdout beside what applied: a switch that runs out without a word is the trap.
        print(f"the switch {expiry_words(asked_at + req.for_seconds, asked_at)}; then the plan's policy is back")
    for answer in failed:
        print(f"NOT applied by {answer.name}: {answer.detail}", file=sys.stderr)
    if outcome.unrecorded:
        print(f"capcon overflow set: NOT recorded in {store.path}: {outcome.unrecorded}", file=sys.stderr)
    if failed:
        print(
            f"capcon overflow set: {len(answers) - len(failed)} of {len(answers)} actuators applied {req.mode}; "
            f"{len(failed)} did not (above)",
            file=sys.stderr,
        )
        return 1
    if outcome.unrecorded:
        return 1
    print(f"{req.mode} applied by all {len(answers)} actuator(s); recorded in {store.path}")
    return 0
