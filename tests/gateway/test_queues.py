"""Admission's waiting rooms on their own (console/gateway/queues.py): real futures and timers, no sockets.

Each waiter gets exactly one answer (granted, timed out, shut down); a lease granted to a client that left
goes back at once; held deferrable work waits behind interactive requests.
"""

from __future__ import annotations

import asyncio

from console.gateway.queues import Granted, Queues
from console.gateway.replicas import ReplicaSet
from console.gateway.telemetry import Telemetry
from console.overflow.admission import Load, Refuse, Wait
from console.overflow.policy import Policy

from .conftest import until

URLS = ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
POLICY = Policy(mode="bounded_queue", max_queue=8, max_wait_seconds=5.0)


class Room:
    """Queues wired to a real replica set as the gateway wires them: a release ends the lease and pumps."""

    def __init__(self, urls=URLS, cap: int = 1, policy: Policy = POLICY) -> None:
        self.pool = ReplicaSet(urls)
        self.cap = cap
        self.policy = policy
        self.released = 0
        telemetry = Telemetry(
            [],
            queue_length=lambda q: self.queues.length(q),
            in_flight=lambda n: self.pool.by_name[n].in_flight,
            healthy=lambda n: self.pool.by_name[n].healthy,
        )
        self.queues = Queues(
            telemetry,
            lease=self.pool.lease,
            release=self.release,
            replica_load=lambda: Load(self.pool.load()),
            load=lambda: Load(self.pool.load(), queued=len(self.queues.interactive)),
            drain_rate=lambda: None,
            batch_release_share=0.5,
        )

    def release(self, replica) -> None:
        self.released += 1
        self.pool.end_lease(replica)
        self.pump()

    def pump(self) -> None:
        self.queues.pump(self.policy, self.cap)

    def wait(self, queue: str = "interactive", deadline: float | None = None) -> asyncio.Task:
        return asyncio.ensure_future(self.queues.wait(Wait(queue, deadline), self.policy, self.pump))


async def test_waiters_are_granted_in_arrival_order_as_slots_free():
    room = Room(cap=1)
    holders = [room.pool.lease(r.name) for r in room.pool.replicas]  # both replicas at the cap
    waiting = [room.wait() for _ in range(3)]
    assert await until(lambda: len(room.queues.interactive) == 3)
    room.pump()
    assert len(room.queues.interactive) == 3  # no free slot: nobody moves
    room.pool.end_lease(holders[1])
    room.pump()
    first = await waiting[0]
    assert isinstance(first, Granted) and first.replica is holders[1] and first.replica.in_flight == 1
    assert not waiting[1].done() and len(room.queues) == 2
    room.pool.end_lease(holders[0])
    room.pump()
    assert (await waiting[1]).replica is holders[0]
    room.release(first.replica)  # the first answer ends: the third waiter takes its slot
    assert (await waiting[2]).replica is holders[1] and len(room.queues) == 0


async def test_a_deadline_answers_the_waiter_503_once():
    room = Room(cap=1)
    for replica in room.pool.replicas:
        room.pool.lease(replica.name)
    loop = asyncio.get_running_loop()
    answer = await room.wait(deadline=loop.time() + 0.05)
    assert isinstance(answer, Refuse) and answer.status == 503 and answer.code == "queue_timeout"
    assert len(room.queues) == 0


async def test_a_client_that_leaves_while_waiting_leaves_the_queue_and_takes_no_lease():
    room = Room(cap=1)
    for replica in room.pool.replicas:
        room.pool.lease(replica.name)
    task = room.wait(deadline=asyncio.get_running_loop().time() + 30)
    assert await until(lambda: len(room.queues) == 1)
    task.cancel()
    assert await until(task.done)
    assert len(room.queues) == 0 and room.pool.in_flight() == 2


async def test_a_lease_granted_to_a_client_already_gone_is_given_back():
    room = Room(cap=1)
    holder = room.pool.lease(room.pool.replicas[0].name)
    room.pool.lease(room.pool.replicas[1].name)
    task = room.wait()
    assert await until(lambda: len(room.queues) == 1)
    waiter = next(iter(room.queues.interactive.values()))
    waiter.future.cancel()  # the client left in the same step as its grant
    room.pool.end_lease(holder)
    room.pump()
    assert room.released == 1 and holder.in_flight == 0 and len(room.queues) == 0
    assert await until(task.done)


async def test_shutting_down_answers_every_waiter_in_both_queues():
    room = Room(cap=1)
    for replica in room.pool.replicas:
        room.pool.lease(replica.name)
    tasks = [room.wait(), room.wait("batch")]
    assert await until(lambda: len(room.queues) == 2)
    room.queues.shut()
    answers = [await t for t in tasks]
    assert all(isinstance(a, Refuse) and a.code == "shutting_down" for a in answers)


async def test_held_work_waits_behind_interactive_requests_and_in_defer_mode_for_room():
    room = Room(urls=URLS[:1], cap=4, policy=Policy(mode="defer", max_inflight_per_replica=4))
    replica = room.pool.replicas[0]
    for _ in range(4):
        room.pool.lease(replica.name)
    interactive, held = room.wait(), room.wait("batch")
    assert await until(lambda: len(room.queues) == 2)
    room.pool.end_lease(replica)
    room.pump()
    assert isinstance(await interactive, Granted) and not held.done()  # the free slot went to the interactive one
    for _ in range(2):
        room.pool.end_lease(replica)
    room.pump()
    assert not held.done()  # 2 in flight: not under half the cap of 4
    room.pool.end_lease(replica)
    room.pump()
    assert isinstance(await held, Granted) and replica.in_flight == 2
