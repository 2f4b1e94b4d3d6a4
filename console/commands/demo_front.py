"""`capcon demo`'s front door: a real gateway in front of the simulated fleet, a second simulator as "hosted".

Composed here, beside the verb, not in the gateway's server room: the gateway knows nothing of the simulator.

Everything on loopback: the hosted endpoint is another simulated replica of the same model (priced at the
plan's hosted $/M, or DEMO_HOSTED_PRICE), so hosted overflow is allowed here whatever the plan's
data.prompts_may_leave says: no prompt leaves the machine. The gateway starts in `pass` (a switch by
"demo", said in the header), so the story is the operator's: spike, watch the flags, press m.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from console.gateway.config import GatewayConfig, planned_cap_from_plan
from console.gateway.history import SwitchHistory
from console.gateway.server import Gateway
from console.overflow.policy import policy_from_plan
from console.plan.model import FleetSource, GatewayAddress, Plan
from console.sim.fleet import SimFleet

if TYPE_CHECKING:
    from console.store.recorder import Recorder

DEMO_HOSTED_PRICE = 3.0  # dollars per million tokens, when the plan names none
TOKEN_ENV = "CAPCON_DEMO_ADMIN_TOKEN"  # the demo console's own environment: never the process's


@dataclass(frozen=True)
class DemoFront:
    gateway: Gateway
    hosted: SimFleet
    plan: Plan  # the demo's plan, with fleet.gateways and the admin token's variable filled in
    environ: dict[str, str]  # what the console reads the admin token from


@contextlib.asynccontextmanager
async def demo_front(plan: Plan, sim: SimFleet, recorder: Recorder | None = None) -> AsyncIterator[DemoFront]:
    """The gateway and the hosted simulator; with `recorder` (the demo's --db) the gateway writes its switches and
    its tallies through it, the file's one writer, so `capcon history` tells what each mode did."""
    token = secrets.token_urlsafe(24)
    history = None
    if recorder is not None:
        if recorder.status.state == "off":
            # Another process records this fleet into the file, so this recorder writes nothing: the gateway
            # writes its own events (the recorder's thread never started, so it is still the one writer here).
            history = SwitchHistory(recorder.path, plan.name)
            history.open()
        else:
            history = SwitchHistory.through(recorder, plan.name)
    async with SimFleet(plan, replicas=1, traffic="off", seed=sim.seed + 7) as hosted:
        price = plan.overflow.hosted_price_per_million or DEMO_HOSTED_PRICE
        plan_policy = replace(policy_from_plan(plan, len(sim.replicas)), hosted_allowed=True, hosted_after_queue=8)
        config = GatewayConfig(
            targets=tuple(sim.urls),
            plan_policy=plan_policy,
            planned_cap=planned_cap_from_plan(plan),
            listen=("127.0.0.1", 0),
            admin=("127.0.0.1", 0),
            admin_token=token,
            hosted_url=hosted.urls[0] + "/v1",
            hosted_models={"*": plan.model.name},
            hosted_key=secrets.token_urlsafe(16),
            hosted_price_per_million=price,
            health_interval=1.0,
            fleet_name=plan.name,
            history=history,
        )
        gateway = Gateway(config)
        await gateway.start()
        try:
            gateway.switch(
                {
                    "mode": "pass",
                    "actor": "demo",
                    "reason": "the demo starts with no overflow control: spike it (x), then switch (m)",
                }
            )
            fleet = FleetSource(targets=tuple(sim.urls), gateways=(GatewayAddress(gateway.url, gateway.admin_url),))
            shown = replace(
                plan,
                fleet=fleet,
                data=replace(plan.data, prompts_may_leave=True),
                overflow=replace(plan.overflow, admin_token_env=TOKEN_ENV, hosted_price_per_million=price),
            )
            await sim.send_traffic_to(gateway.url)
            yield DemoFront(gateway, hosted, shown, {TOKEN_ENV: token})
        finally:
            await sim.stop_traffic()  # the clients leave first: nothing is cut off in flight at the gateway
            await gateway.stop(drain_timeout=1.0)  # writes the last tally and closes the history
