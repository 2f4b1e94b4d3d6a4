"""The admission decision: for one arriving request, under a policy and the gateway's load now, what happens.

Forward it to the replica with the fewest requests in flight (under the cap),
let it wait in the queue (with its absolute deadline), send it to the hosted
endpoint, or refuse it at once with a status, a reason in words and a
Retry-After. The gateway holds a lease on the replica for the whole response
(streaming and client disconnect included) and asks again when a lease ends.

Pure and table-tested: the server measures the load, this decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from console.overflow.policy import Policy

RequestClass = Literal["interactive", "deferrable"]
RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 60
DEFER_RETRY_MAX = 6 * 3600  # a deferrable job told to come back off-peak: at most six hours on
NO_REPLICA_RETRY = 10


@dataclass(frozen=True)
class ReplicaLoad:
    name: str
    in_flight: int
    healthy: bool = True


@dataclass(frozen=True)
class Load:
    replicas: tuple[ReplicaLoad, ...]
    queued: int = 0  # interactive requests waiting
    batch_queued: int = 0  # deferrable requests held (defer mode, hold)
    completions_per_second: float | None = None  # over the last 30 s; None before any
    seconds_to_off_peak: float | None = None  # the plan's next off-peak hour; None: none in the week


@dataclass(frozen=True)
class Forward:
    replica: str


@dataclass(frozen=True)
class Wait:
    queue: Literal["interactive", "batch"]
    deadline: float | None  # absolute; None: waits until released (pass with a cap, the batch queue)


@dataclass(frozen=True)
class Hosted:
    pass


@dataclass(frozen=True)
class Refuse:
    status: int  # 429 refused at once, 503 timed out or nothing to serve it
    code: str  # OpenAI-style error code
    message: str  # why, in words, for the client's logs
    retry_after: int  # seconds


Decision = Forward | Wait | Hosted | Refuse


def retry_after(queued: int, completions_per_second: float | None, fallback: float) -> int:
    """Seconds until the queue ahead has drained at the measured rate, 1 to 60; `fallback` before any is measured."""
    if completions_per_second is None or not completions_per_second > 0 or not math.isfinite(completions_per_second):
        seconds = fallback
    else:
        seconds = (queued + 1) / completions_per_second
    if not math.isfinite(seconds):
        seconds = RETRY_AFTER_MAX
    return int(min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(seconds))))


def least_loaded(load: Load, cap: int | None) -> str | None:
    """The healthy replica with the fewest requests in flight and room under the cap (ties: first listed)."""
    best: ReplicaLoad | None = None
    for replica in load.replicas:
        if not replica.healthy or (cap is not None and replica.in_flight >= cap):
            continue
        if best is None or replica.in_flight < best.in_flight:
            best = replica
    return best.name if best is not None else None


def cap_of(policy: Policy, planned_cap: int | None) -> int | None:
    """In-flight cap per replica: the policy's if set; else the planner's concurrency, except in pass mode."""
    if policy.max_inflight_per_replica is not None:
        return policy.max_inflight_per_replica
    return None if policy.mode == "pass" else planned_cap


def admit(
    policy: Policy, load: Load, request_class: RequestClass, now: float, planned_cap: int | None = None
) -> Decision:
    """What happens to a request arriving at `now`."""
    if not any(r.healthy for r in load.replicas):
        if policy.mode == "hosted" and policy.hosted_allowed:
            return Hosted()
        return Refuse(503, "no_replica_available", "no replica of the fleet is answering", NO_REPLICA_RETRY)
    if request_class == "deferrable" and policy.mode == "defer":
        return _deferred(policy, load)
    cap = cap_of(policy, planned_cap)
    replica = least_loaded(load, cap)
    # First come, first served: a newcomer never overtakes a request already waiting.
    if replica is not None and load.queued == 0:
        return Forward(replica)
    if policy.mode == "pass":
        return Wait("interactive", None)
    if policy.mode == "hosted" and policy.hosted_allowed and load.queued >= policy.hosted_after_queue:
        return Hosted()
    if load.queued >= policy.max_queue:
        return Refuse(
            429,
            "queue_full",
            f"the fleet is over its capacity: {load.queued} requests are queued, the bound is {policy.max_queue}",
            retry_after(load.queued, load.completions_per_second, policy.max_wait_seconds),
        )
    return Wait("interactive", now + policy.max_wait_seconds)


def timed_out(policy: Policy, load: Load) -> Refuse:
    """The answer to a request whose deadline passed in the queue."""
    return Refuse(
        503,
        "queue_timeout",
        f"waited {policy.max_wait_seconds:g} s in the queue (its bound) without a free replica",
        retry_after(load.queued, load.completions_per_second, policy.max_wait_seconds),
    )


def shutting_down(load: Load) -> Refuse:
    """The answer to a queued request when the gateway stops: come back once another instance has it."""
    return Refuse(
        503, "shutting_down", "the gateway is shutting down", retry_after(load.queued, load.completions_per_second, 5.0)
    )


def _deferred(policy: Policy, load: Load) -> Decision:
    if policy.defer_action == "hold":
        if load.batch_queued < policy.max_batch_queue:
            return Wait("batch", None)
        return Refuse(
            429,
            "batch_queue_full",
            f"deferrable work is held until the fleet has room; {load.batch_queued} are held, the bound "
            f"is {policy.max_batch_queue}",
            _off_peak(load),
        )
    return Refuse(429, "deferred", "deferrable work is refused during the peak: retry off-peak", _off_peak(load))


def _off_peak(load: Load) -> int:
    seconds = load.seconds_to_off_peak
    if seconds is None or not math.isfinite(seconds):
        return DEFER_RETRY_MAX
    return int(min(DEFER_RETRY_MAX, max(RETRY_AFTER_MAX, math.ceil(seconds))))
