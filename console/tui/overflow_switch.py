"""The console's overflow switch behind key m: the dialog's view of the one switch (console/live/switch.py).

Built when the key is pressed, so a console that only watches never needs the admin token; a missing
token or a plan that names no way to switch is said in a notice, and the console keeps watching. The
switch itself (the plan's rules, the actuators, the record) is the same call `capcon overflow set` makes;
what it adds is two messages up to the app: the switch asked, and its outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from console.errors import UserError
from console.live.actuators import actuators_for
from console.live.audit import AuditSink, FileAudit, NoAudit, RecorderAudit
from console.live.session import FleetSession
from console.live.switch import SwitchOutcome, default_actor, plan_rules, switch
from console.overflow.policy import Policy, policy_from_plan
from console.overflow.switch import SwitchRequest
from console.tui.messages import PolicySwitched, SwitchAsked
from console.tui.screens.switch_screen import SwitchContext

if TYPE_CHECKING:
    from console.tui.app import ConsoleApp

# Each actuator's own timeout bounds it; this bounds the dialog's wait whatever an actuator does.
APPLY_TIMEOUT_SECONDS = 15.0


def switch_audit(recorder: object, history: Path | None) -> AuditSink:
    """Where the console records a switch: through its recorder when it records polls, else the history file
    itself; `history` None (a demo without --db): nowhere."""
    if recorder is not None:
        return RecorderAudit(recorder)
    return FileAudit(history) if history is not None else NoAudit()


def switch_context(app: ConsoleApp, session: FleetSession) -> SwitchContext:
    """What the dialog needs for the fleet of `session`; UserError saying why the switch cannot be offered."""
    plan = session.plan
    listed = plan.fleet.gateways if plan is not None and plan.fleet is not None else ()
    if not any(g.admin_url for g in listed) and not (plan is not None and plan.overflow.actuators):
        raise UserError(
            "no gateway admin API to switch: expected fleet.gateways entries with admin_url in the plan "
            "(or overflow.actuators); --gateway only watches a gateway's /metrics"
        )
    actuators = actuators_for(plan, None, app.admin_token_env, app.environ)
    view = session.view
    replicas = max(1, len(view.rows)) if view is not None else 1
    gateways = session.gateways
    policy = gateways.figures.policy if gateways is not None else None
    audit = switch_audit(app.recorder, app.switch_history)

    async def apply(request: SwitchRequest) -> SwitchOutcome:
        app.post_message(SwitchAsked(session.index, request))
        outcome = await switch(
            request,
            fleet=session.name,
            rules=plan_rules(plan),
            actuators=lambda: actuators,
            audit=audit,
            clock=app.clock,
            timeout=APPLY_TIMEOUT_SECONDS,
        )
        app.post_message(PolicySwitched(session.index, outcome))
        return outcome

    return SwitchContext(
        plan_policy=policy_from_plan(plan, replicas) if plan is not None else Policy(),
        current_mode=policy.mode if policy is not None else None,
        replicas=replicas,
        actor=app.actor or default_actor(),
        targets=tuple(a.name for a in actuators),
        apply=apply,
    )
