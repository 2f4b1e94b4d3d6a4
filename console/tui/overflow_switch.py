"""The console's overflow switch behind key m: the actuators of the fleet on screen, the attempt's record.

Built when the key is pressed, so a console that only watches never needs the admin token; a missing
token or a plan that names no way to switch is said in a notice, and the console keeps watching.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from console.errors import UserError
from console.fleet.overflow import SwitchNote
from console.gateway.config import policy_from_plan
from console.overflow.actuators import ActuatorAnswer, actuators_for, apply_all
from console.overflow.audit import EVENT_KIND, attempt_detail, subject
from console.overflow.policy import Policy
from console.overflow.switch import SwitchRequest, default_actor
from console.tui.screens.switch_screen import SwitchContext

if TYPE_CHECKING:
    from console.tui.app import ConsoleApp

# Each actuator's own timeout bounds it; this bounds the dialog's wait whatever an actuator does.
APPLY_TIMEOUT_SECONDS = 15.0


def switch_context(app: ConsoleApp, index: int) -> SwitchContext:
    """What the dialog needs for fleet `index`; UserError saying why the switch cannot be offered."""
    handle = app.fleets[index]
    plan = handle.plan
    listed = plan.fleet.gateways if plan is not None and plan.fleet is not None else ()
    if not any(g.admin_url for g in listed) and not (plan is not None and plan.overflow.actuators):
        raise UserError(
            "no gateway admin API to switch: expected fleet.gateways entries with admin_url in the plan "
            "(or overflow.actuators); --gateway only watches a gateway's /metrics"
        )
    actuators = actuators_for(plan, None, app.admin_token_env, app.environ)
    view = app.views[index]
    replicas = max(1, len(view.rows)) if view is not None else 1
    plan_policy = policy_from_plan(plan, replicas) if plan is not None else Policy()
    gateways = app.gateway_views[index]
    policy = gateways.figures.policy if gateways is not None else None
    actor = app.actor or default_actor()
    fleet = handle.name

    async def apply(request: SwitchRequest) -> Sequence[ActuatorAnswer]:
        answers = await apply_all(actuators, request.body(), timeout=APPLY_TIMEOUT_SECONDS)
        at = app.clock()
        if app.recorder is not None:  # every attempt, applied or not, goes to the history
            before = {a.name: a.previous_mode for a in answers}
            detail = attempt_detail(at, request, before, answers)
            app.recorder.event(at, EVENT_KIND, fleet=fleet, subject=subject(request, answers), detail=detail)
        applied = sum(a.ok for a in answers)
        outcome = f"{applied} of {len(answers)} applied"
        app.note_switch(index, SwitchNote(at, request.mode, request.actor, request.reason, outcome))
        app.driver.poll_now()  # the header and the panel show what the gateways now enforce
        return answers

    return SwitchContext(
        plan_policy=plan_policy,
        current_mode=policy.mode if policy is not None else None,
        replicas=replicas,
        actor=actor,
        targets=tuple(a.name for a in actuators),
        apply=apply,
    )
