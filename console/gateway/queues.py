"""Admission's waiting rooms: one FIFO queue with an absolute deadline per request, and a batch queue.

A request that `console.overflow.admission.admit` tells to wait gets a future here; it is resolved once,
whichever comes first: granted (a lease taken on its behalf), timed out (its deadline's timer) or shut
down. Whenever a lease ends, a policy switches or a replica comes back, the gateway calls `pump`, which
hands free slots to the head of the queue, then (with the queue empty) to held deferrable work.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Callable

from console.gateway.replicas import Replica
from console.gateway.telemetry import Telemetry
from console.overflow.admission import Load, Refuse, Wait, least_loaded, retry_after, shutting_down, timed_out
from console.overflow.policy import MAX_QUEUE, Policy


class Granted:
    """A queued request's lease, taken by the dispatcher on its behalf."""

    __slots__ = ("replica",)

    def __init__(self, replica: Replica) -> None:
        self.replica = replica


class Waiter:
    __slots__ = ("future", "policy", "queue", "since", "timer")

    def __init__(self, future: asyncio.Future, queue: str, policy: Policy, since: float) -> None:
        self.future = future
        self.queue = queue
        self.policy = policy
        self.since = since
        self.timer: asyncio.TimerHandle | None = None


class Queues:
    """The interactive queue and the batch queue, and the one answer each waiter gets.

    lease(name): take a lease on a replica for a waiter; release(replica): give back one a waiter no
    longer wants (its client left as it was granted); replica_load(): the replicas in rotation; load():
    the whole load (timed-out refusals read it); drain_rate(): completions per second the queue can count on.
    """

    def __init__(
        self,
        telemetry: Telemetry,
        lease: Callable[[str], Replica],
        release: Callable[[Replica], None],
        replica_load: Callable[[], Load],
        load: Callable[[], Load],
        drain_rate: Callable[[], float | None],
        batch_release_share: float = 0.5,
    ) -> None:
        self.interactive: OrderedDict[int, Waiter] = OrderedDict()
        self.batch: OrderedDict[int, Waiter] = OrderedDict()
        self._telemetry = telemetry
        self._lease = lease
        self._release = release
        self._replica_load = replica_load
        self._load = load
        self._drain_rate = drain_rate
        self._batch_release_share = batch_release_share
        self._keys = itertools.count()

    def __len__(self) -> int:
        return len(self.interactive) + len(self.batch)

    def length(self, queue: str) -> int:
        return len(self.interactive if queue == "interactive" else self.batch)

    def pump(self, policy: Policy, cap: int | None) -> None:
        """Hand free slots to the head of the queue, then (with the queue empty) to held deferrable work."""
        while self.interactive:
            name = least_loaded(self._replica_load(), cap)
            if name is None:
                return  # interactive requests waiting: nothing for the batch either
            _, waiter = self.interactive.popitem(last=False)
            self.settle(waiter, Granted(self._lease(name)))
        if self.batch:
            batch_cap = cap
            if policy.mode == "defer":
                # Held work runs only while the fleet has room: replicas under a share of the cap.
                batch_cap = max(1, int((cap or 2) * self._batch_release_share))
            while self.batch:
                name = least_loaded(self._replica_load(), batch_cap)
                if name is None:
                    return
                _, waiter = self.batch.popitem(last=False)
                self.settle(waiter, Granted(self._lease(name)))

    def settle(self, waiter: Waiter, result: Granted | Refuse) -> None:
        """The one answer a waiting request gets from the queue (the caller has removed it from its queue)."""
        if waiter.timer is not None:
            waiter.timer.cancel()
        if waiter.future.done():
            if isinstance(result, Granted):
                self._release(result.replica)
            return
        loop = waiter.future.get_loop()
        self._telemetry.waited(waiter.queue, loop.time() - waiter.since)
        waiter.future.set_result(result)

    def shut(self) -> None:
        """Every waiting request is answered: the gateway is shutting down."""
        load = self._load()
        for queue in (self.interactive, self.batch):
            while queue:
                _, waiter = queue.popitem(last=False)
                self.settle(waiter, shutting_down(load))

    def _expire(self, key: int, waiter: Waiter) -> None:
        if self.interactive.pop(key, None) is None:
            return
        waiter.timer = None
        self.settle(waiter, timed_out(waiter.policy, self._load()))

    async def wait(self, decision: Wait, policy: Policy, pump: Callable[[], None]) -> Granted | Refuse:
        """Wait as `decision` says; `pump` is called once a batch waiter is in place (it may run at once)."""
        queue = self.interactive if decision.queue == "interactive" else self.batch
        if len(queue) >= MAX_QUEUE:  # pass with a cap waits without a bound of its own: this is the gateway's
            return Refuse(
                429,
                "queue_full",
                f"the gateway holds {len(queue)} waiting requests, its most",
                retry_after(len(queue), self._drain_rate(), policy.max_wait_seconds),
            )
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiter = Waiter(future, decision.queue, policy, loop.time())
        key = next(self._keys)
        queue[key] = waiter
        self._telemetry.queued(decision.queue, len(queue))
        if decision.deadline is not None:
            waiter.timer = loop.call_at(decision.deadline, self._expire, key, waiter)
        if decision.queue == "batch":
            pump()
        try:
            return await future
        except asyncio.CancelledError:  # the client left while waiting
            if queue.pop(key, None) is not None:
                if waiter.timer is not None:
                    waiter.timer.cancel()
                self._telemetry.waited(decision.queue, loop.time() - waiter.since)
            if future.done() and not future.cancelled() and isinstance(future.result(), Granted):
                self._release(future.result().replica)
            future.cancel()
            raise
