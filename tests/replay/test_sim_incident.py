"""A real incident recorded and replayed: the replay shows the same flags at the same moments.

The simulated fleet (real HTTP /metrics servers on loopback, the plan's traffic at a fast
time scale) is watched through the live path: a real ScrapeSource, `Watcher.poll()`,
`advance(previous, name, figures, handle.plan_at(now), now)` with the default Thresholds,
and each poll written with `Store.write_poll(poll_record(...))` into a real SQLite file.
Replica 1 is stopped (fault "down") long enough for its "down" flag to be raised (10 s)
and then brought back, which clears it and raises its restart flag. Flags run on the
wall clock here, as live: the recording lasts about 25 s, bounded by the test's timeout.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from console.fleet.plan_now import week_time
from console.fleet.view import advance
from console.live.feed import poll_record
from console.live.handle import FleetHandle
from console.live.watcher import Watcher
from console.plan.schema import load_plan
from console.replay.fleet_replay import FleetReplay
from console.replay.loader import open_replay
from console.sim.fleet import SimFleet
from console.sources.scrape import ScrapeSource
from console.store.database import Store
from console.targets import Target
from tests.replay.recording import PLAN

pytestmark = pytest.mark.timeout(120)

INTERVAL = 0.5
DOWN_SECONDS = 13.0  # more than the 10 s a replica must be down before its flag shows


async def record_incident(path):
    plan = load_plan(PLAN)
    store = Store.open(path)
    live = []  # (at, active flag ids, pending ids) per poll, as the console showed them
    async with SimFleet(plan, replicas=3, speed=60.0, seed=3, start_week_seconds=10 * 3600.0) as sim:
        source = ScrapeSource([Target(f"replica-{i}", url) for i, url in enumerate(sim.metrics_urls)], timeout=2.0)
        watcher = Watcher(source, 5.0, interval_seconds=INTERVAL)
        handle = FleetHandle(plan.name, plan, watcher, plan_clock=lambda now: week_time(sim.traffic.week_seconds()))
        previous = None

        async def poll_for(seconds: float) -> None:
            nonlocal previous
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                poll = await watcher.poll()
                now = time.time()
                view = advance(previous, handle.name, poll.figures, handle.plan_at(now), now)
                store.write_poll(
                    poll_record(handle.name, poll, previous, view, handle.plan, handle.plan_time(view.now))
                )
                live.append((view.now, [f.id for f in view.flags], [p.id for p in view.pending]))
                previous = view
                await asyncio.sleep(INTERVAL)

        try:
            await poll_for(3.0)
            await sim.fault(1, "down")
            await poll_for(DOWN_SECONDS)
            await sim.clear_fault(1, "down")
            await poll_for(5.0)
        finally:
            await watcher.aclose()
    store.close()
    return plan.name, live


async def test_a_recorded_incident_replays_with_the_same_flags_at_the_same_moments(tmp_path):
    path = tmp_path / "incident.sqlite"
    fleet, live = await record_incident(path)
    seen = {flag for _, flags, _ in live for flag in flags}
    assert "replica_down:replica-1" in seen, (
        f"the incident must raise the down flag for this test to mean anything; saw {seen}"
    )
    assert "replica_down:replica-1" not in live[-1][1], "and clear it once the replica is back"

    replay = open_replay(path)
    try:
        (recorded,) = replay.fleets
        fleet_replay = FleetReplay(recorded)
        replayed = []
        changes = []
        before = None
        for index in range(len(recorded.times)):
            fleet_replay.go_to(index)
            view = fleet_replay.view
            replayed.append((view.now, [f.id for f in view.flags], [p.id for p in view.pending]))
            ids = {f.id for f in view.flags}
            changes += [(view.now, "cleared", i) for i in sorted(before - ids)] if before is not None else []
            changes += [(view.now, "raised", i) for i in sorted(ids - (before or set()))]
            before = ids
        assert replayed == live

        stored = sorted((e.at, e.change, e.flag_id) for e in replay.store.flag_events(fleet))
        assert stored == sorted(changes)
        assert any(change == "raised" and flag == "replica_down:replica-1" for _, change, flag in stored)
        assert any(change == "cleared" and flag == "replica_down:replica-1" for _, change, flag in stored)
    finally:
        replay.close()
