"""A real incident recorded and replayed: the replay shows the same flags at the same moments.

The simulated fleet (real HTTP /metrics servers on loopback, the plan's traffic at a fast
time scale) is watched through the live path: a real ScrapeSource, `Watcher.poll()`,
the console's PollFeed (the view with the default Thresholds, a checkpoint every few polls when asked),
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
from console.live.feed import PollFeed
from console.live.handle import FleetHandle
from console.live.watcher import Watcher
from console.plan.schema import load_plan
from console.replay.fleet_replay import RESTORE_COST, FleetReplay
from console.replay.loader import open_replay
from console.sim.fleet import SimFleet
from console.sources.scrape import ScrapeSource
from console.store.database import Store
from console.targets import Target
from tests.replay.recording import PLAN

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

INTERVAL = 0.5
DOWN_SECONDS = 13.0  # more than the 10 s a replica must be down before its flag shows


class WriteAtOnce:
    """A recorder that writes each record on the caller's thread (the real one queues them for its own)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def submit(self, record) -> None:
        self.store.write_poll(record)


async def record_incident(path, state_every: int | None = None):
    """`state_every`: attach the feed's state (a replay checkpoint) to every that many polls."""
    plan = load_plan(PLAN)
    store = Store.open(path)
    live = []  # (at, active flag ids, pending ids) per poll, as the console showed them
    async with SimFleet(plan, replicas=3, speed=60.0, seed=3, start_week_seconds=10 * 3600.0) as sim:
        source = ScrapeSource([Target(f"replica-{i}", url) for i, url in enumerate(sim.metrics_urls)], timeout=2.0)
        watcher = Watcher(source, 5.0, interval_seconds=INTERVAL)
        handle = FleetHandle(plan.name, plan, watcher, plan_clock=lambda now: week_time(sim.traffic.week_seconds()))
        # The console's own poll step: the feed builds each view and hands its record (a checkpoint every
        # `state_every` polls) to the recorder, here one that writes at once.
        feed = PollFeed(handle, WriteAtOnce(store), checkpoint_every=state_every or 10**9)

        async def poll_for(seconds: float) -> None:
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                poll = await watcher.poll()
                view = feed.add(poll, time.time())
                live.append((view.now, [f.id for f in view.flags], [p.id for p in view.pending]))
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


async def test_jumps_into_a_recorded_incident_show_what_playing_to_each_moment_shows(tmp_path):
    """Recorded with a checkpoint every 5 polls: a jump to any poll (a fresh replay each time) carries on from
    the checkpoint before it, across the replica going down, its restart and the restart flag's hold."""
    path = tmp_path / "incident.sqlite"
    _, live = await record_incident(path, state_every=5)
    replay = open_replay(path)
    try:
        (recorded,) = replay.fleets
        assert len(recorded.checkpoints) >= len(recorded.times) // 5 - 1
        played = FleetReplay(recorded)
        restored = 0
        for index in range(len(recorded.times)):
            played.go_to(index)
            jumped = FleetReplay(recorded)
            computed = jumped.go_to(index)
            restored += computed < index + 1
            assert computed <= 5 + RESTORE_COST  # from the run's start while that is cheaper
            assert jumped.view == played.view, f"poll {index} differs"
            assert ([f.id for f in jumped.view.flags], [p.id for p in jumped.view.pending]) == tuple(live[index][1:])
        assert restored > len(recorded.times) // 2
    finally:
        replay.close()
