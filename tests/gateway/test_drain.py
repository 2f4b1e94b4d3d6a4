"""Retry-After tells the truth from the first second: the drain is estimated from the slots and the service time."""

from __future__ import annotations

import asyncio

import pytest

from console.gateway.drain import DrainMeter
from console.overflow.admission import retry_after

from .conftest import completion, gateway, send, switch, until
from .test_client_latency import FIRST_EVENT_AFTER, STREAM_ENDS_AFTER, slow_replica

pytestmark = pytest.mark.timeout(60)


def test_before_any_completion_the_plans_service_time_gives_the_rate():
    meter = DrainMeter(started=0.0, expected_service=2.0)
    assert meter.rate(0.5) is None  # nothing measured yet...
    assert meter.drain_rate(0.5, slots=8) == pytest.approx(4.0)  # ...but 8 slots each freeing every 2 s
    assert DrainMeter(started=0.0).drain_rate(0.5, slots=8) is None  # no plan, nothing measured: unknown


def test_a_quiet_spell_leaves_the_service_time_as_it_was():
    meter = DrainMeter(started=0.0, expected_service=10.0)
    for t in range(1, 21):
        meter.completed(float(t), service_seconds=0.5)  # the first measured lease replaces the plan's guess
    assert meter.service_seconds == pytest.approx(0.5)
    busy = meter.drain_rate(20.0, slots=4)
    assert busy == pytest.approx(max(20 / 20.0, 4 / 0.5))
    # Ten minutes later the window is empty, but 4 slots still free every 0.5 s.
    assert meter.rate(620.0) is None
    assert meter.drain_rate(620.0, slots=4) == pytest.approx(8.0)
    # One completion in a quiet window would read 1/30 per second on its own; the capacity's rate wins.
    meter.completed(621.0, service_seconds=0.5)
    assert meter.drain_rate(621.0, slots=4) == pytest.approx(8.0)
    assert retry_after(7, meter.drain_rate(621.0, slots=4), 30.0) == 1


def test_service_times_are_averaged_and_nonsense_ignored():
    meter = DrainMeter(started=0.0, expected_service=float("nan"))
    assert meter.service_seconds is None
    meter.completed(1.0, service_seconds=1.0)
    meter.completed(2.0, service_seconds=float("inf"))
    meter.completed(3.0, service_seconds=-1.0)
    assert meter.service_seconds == pytest.approx(1.0)
    meter.completed(4.0, service_seconds=2.0)
    assert 1.0 < meter.service_seconds < 2.0
    assert meter.capacity_rate(0) is None


async def test_the_first_refusals_after_start_say_about_the_real_drain(session):
    """A fresh gateway, nothing completed yet: its first 429s give a Retry-After near the queue's real drain."""
    service = FIRST_EVENT_AFTER + STREAM_ENDS_AFTER  # the slow replica holds each stream this long
    async with slow_replica() as url, gateway([url], planned_cap=2, expected_service_seconds=service) as server:
        await switch(
            session, server, mode="bounded_queue", max_queue=4, max_wait_seconds=30, max_inflight_per_replica=2
        )
        loop = asyncio.get_running_loop()
        admitted = [asyncio.create_task(send(session, server.url, completion(stream=True))) for _ in range(6)]
        assert await until(lambda: server.in_flight() == 2 and len(server.queue) == 4)
        refused = [await send(session, server.url, completion(stream=True)) for _ in range(3)]
        refused_at = loop.time()
        assert await until(lambda: not server.queue, timeout=30)
        drained = loop.time() - refused_at  # the queue's real drain from the refusals on
        answers = await asyncio.gather(*admitted)
    assert all(a.status == 200 for a in answers)
    assert all(r.status == 429 for r in refused), [r.status for r in refused]
    said = [int(r.headers["Retry-After"]) for r in refused]
    # The queue of 4 drains 2 at a time every 0.5 s: about 1 s. Whole seconds, at least 1, within a small factor
    # (before, with nothing counted, it said max_wait_seconds: 30).
    assert all(drained / 3 <= s <= 3 * drained + 1 for s in said), (said, drained)
