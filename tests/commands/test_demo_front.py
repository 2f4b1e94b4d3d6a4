"""`capcon demo`'s front door (console/commands/demo_front.py): a real gateway in front of the simulated fleet,
its switches and tallies written through the demo's recorder, the history file's one writer."""

from __future__ import annotations

import threading

import aiohttp
import pytest

from console.bench.estimate import load_plan
from console.commands.demo import demo_plan_path
from console.commands.demo_front import TOKEN_ENV, demo_front
from console.gateway.history import EVENT_KIND
from console.sim.fleet import SimFleet
from console.store.database import Store
from console.store.recorder import Recorder

pytestmark = pytest.mark.timeout(120)


async def test_the_demo_gateway_starts_in_pass_and_writes_through_the_recorder(tmp_path):
    plan = load_plan(demo_plan_path())
    db = tmp_path / "demo.sqlite"
    recorder = Recorder(db)
    recorder.start(detail={"command": "demo", "fleets": [plan.name], "interval": 1.0})
    try:
        async with SimFleet(plan, replicas=1, traffic="off") as sim, demo_front(plan, sim, recorder) as front:
            assert not any(t.name.startswith("capcon-gateway-history") for t in threading.enumerate())
            token = front.environ[TOKEN_ENV]
            async with (
                aiohttp.ClientSession() as http,
                http.get(
                    front.gateway.admin_url + "/admin/policy", headers={"Authorization": f"Bearer {token}"}
                ) as answer,
            ):
                policy = (await answer.json())["policy"]
            assert policy["mode"] == "pass" and policy["actor"] == "demo"
            assert front.plan.fleet.gateways[0].url == front.gateway.url
            assert front.plan.overflow.admin_token_env == TOKEN_ENV and front.plan.data.prompts_may_leave
    finally:
        recorder.close(timeout=5.0)
    store = Store.open(db, read_only=True)
    try:
        switched = [e for e in store.events() if e.kind == EVENT_KIND]
    finally:
        store.close()
    assert [(e.fleet, e.detail["to"], e.detail["actor"]) for e in switched] == [(plan.name, "pass", "demo")]
