"""The gateway server: the fleet's front door, enforcing the overflow policy (aiohttp, one event loop).

Every arrival is put to `console.overflow.admission.admit` with the policy in force and the load
now. The answer is carried out here:

- Forward: a lease on the replica is taken at once (its in-flight count goes up in the same
  step as the decision, so no two arrivals see the same free slot) and held until the whole
  response has been passed on, streaming included; a client that disconnects cancels its
  handler (aiohttp's handler cancellation), which closes the upstream connection, so the
  replica aborts the request and frees its KV. A replica that refuses the connection is marked
  unhealthy (the request never reached it, so it is decided again) and retried by the health
  checks. One that breaks off once its answer began (reset, closed, silent) is a failure the
  client sees: a stream ends in an error event with no [DONE], a whole answer is a 502.
- Wait: one FIFO queue with an absolute deadline per request (a timer answers 503 when it
  passes), and a batch queue for held deferrable work. Whenever a lease ends, a policy switches
  or a replica comes back, the head of the queue goes to `least_loaded`.
- Hosted: the request goes to the hosted endpoint; if that fails before anything was sent to
  the client (a 200 that is no completion included), the request is decided again under the
  bounded queue.
- Refuse: an OpenAI-style error with Retry-After, at once.

The replica set may change at run time (a Prometheus-sourced fleet, `set_replicas`): in one
synchronous step, so a decision sees the old set or the new, never half of each; a replica that
leaves keeps the leases it holds until they end and takes no new one.

Every request gets exactly one answer: each handler returns one response, and a queued request's
future is resolved once (granted, timed out or shut down), whichever comes first.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import time
import uuid
from collections import OrderedDict
from dataclasses import replace
from datetime import UTC, datetime

import aiohttp
from aiohttp import web

from console.gateway import admin_input, answers, bounded_json, credentials
from console.gateway.admin_api import AdminApi
from console.gateway.bounded_json import Unreadable
from console.gateway.config import GatewayConfig
from console.gateway.connections import ConnectionGuard, connection_cap, open_files_limit
from console.gateway.discovery import Discovery, DiscoveryError
from console.gateway.drain import DrainMeter
from console.gateway.sse import EventRelay
from console.gateway.telemetry import CONTENT_TYPE as METRICS_CONTENT_TYPE
from console.gateway.telemetry import OUTCOMES, ClientTimes, Telemetry
from console.overflow.admission import (
    Forward,
    Hosted,
    Load,
    Refuse,
    ReplicaLoad,
    Wait,
    admit,
    cap_of,
    least_loaded,
    retry_after,
    shutting_down,
    timed_out,
)
from console.overflow.clients import is_deferrable_key
from console.overflow.policy import MAX_QUEUE, Policy, PolicyError, as_json, in_force, parse_switch, summary
from console.overflow.switch import PARAMETERS as SWITCH_PARAMETERS
from console.redact import redact, redact_url
from console.text import printable

log = logging.getLogger("capcon.gateway")

GENERATE = ("/v1/completions", "/v1/chat/completions")
CLASS_HEADER = "x-capcon-class"
MAX_REQUEST_ID = 128
UPSTREAM_ERROR_BODY = 64 * 1024
KEEPALIVE_SECONDS = 4.0
CLIENT_TIMES = web.RequestKey("capcon_client_times", ClientTimes)  # kept on the aiohttp request
MODELS_EVERY_CHECKS = 12  # a healthy replica's model list is read again every this many health checks
# Refusals by admission code -> the outcome they are counted under.
REFUSAL_OUTCOMES = {
    "queue_full": "rejected",
    "no_replica_available": "rejected",
    "shutting_down": "rejected",
    "queue_timeout": "timed_out",
    "deferred": "deferred",
    "batch_queue_full": "deferred",
}


class Replica:
    """One replica as the gateway sees it: address, leases held, health, models served."""

    __slots__ = (
        "answered",
        "authorization",
        "base",
        "checks",
        "healthy",
        "in_flight",
        "models",
        "name",
        "problem",
        "refused",
        "retiring",
        "url",
    )

    def __init__(self, url: str) -> None:
        self.url = url
        # As shown in logs, /admin/state and /metrics labels: never a `user:password@` or a `?token=`.
        self.name = redact_url(url).split("://", 1)[-1]
        # Requests go to the bare address with the target's credentials as a header (credentials.py).
        self.base, self.authorization = credentials.split(url)
        self.in_flight = 0
        self.healthy = True  # until a check or a refused connection says otherwise
        self.models: frozenset[str] = frozenset()
        self.checks = 0
        self.answered = 0
        self.refused = 0
        self.problem = ""
        self.retiring = False  # gone from the fleet's list: no new leases, the ones held run out


class _Granted:
    """A queued request's lease, taken by the dispatcher on its behalf."""

    __slots__ = ("replica",)

    def __init__(self, replica: Replica) -> None:
        self.replica = replica


class _Waiter:
    __slots__ = ("future", "policy", "queue", "since", "timer")

    def __init__(self, future: asyncio.Future, queue: str, policy: Policy, since: float) -> None:
        self.future = future
        self.queue = queue
        self.policy = policy
        self.since = since
        self.timer: asyncio.TimerHandle | None = None


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Gateway:
    def __init__(self, config: GatewayConfig, clock=time.time) -> None:
        if not config.targets and not config.prometheus_url:
            raise ValueError("a gateway needs at least one replica")
        if config.plan_policy.mode == "hosted" and not config.hosted_url:
            raise ValueError("hosted mode without a hosted endpoint")
        self.config = config
        self.clock = clock
        self._hosted_base, url_credentials = credentials.split(config.hosted_url) if config.hosted_url else ("", None)
        self._hosted_authorization = credentials.hosted_authorization(config.hosted_key, url_credentials)
        self.plan_policy = config.plan_policy
        if not self.plan_policy.set_at:
            self.plan_policy = replace(self.plan_policy, set_at=clock())
        self.current = self.plan_policy
        self.telemetry = Telemetry(
            [],  # each replica's series are added as it is named (_named)
            queue_length=lambda q: len(self.queue if q == "interactive" else self.batch),
            in_flight=lambda name: self._by_name[name].in_flight,
            healthy=lambda name: self._by_name[name].healthy,
        )
        self.replicas: list[Replica] = []
        # Replicas gone from the list with leases still held: kept until their last answer ends.
        self.retiring: list[Replica] = []
        self._by_name: dict[str, Replica] = {}
        for url in dict.fromkeys(config.targets):
            self._named(Replica(url))
        self.replicas = list(self._by_name.values())
        self.discovery: Discovery | None = None
        if config.prometheus_url:
            self.discovery = Discovery(config.prometheus_url, config.selector, config.discovery_timeout)
        self._discovery_task: asyncio.Task | None = None
        self._discovery_failing = False
        self.models: frozenset[str] = frozenset()
        self.queue: OrderedDict[int, _Waiter] = OrderedDict()
        self.batch: OrderedDict[int, _Waiter] = OrderedDict()
        self._keys = itertools.count()
        self.counts = {(o, c): 0 for o in OUTCOMES for c in ("interactive", "deferrable")}
        self.hosted_usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self.switches = 0
        self.stopping = False
        self.telemetry.policy(self.current)
        self.url = ""
        self.admin_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: DrainMeter | None = None
        self._session: aiohttp.ClientSession | None = None
        self._hosted_session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self.connections: ConnectionGuard | None = None
        self._admin_runner: web.AppRunner | None = None
        self._health_task: asyncio.Task | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._idle = asyncio.Event()
        self._hurry = asyncio.Event()
        self._closed = False

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Check the replicas once, then listen (the main port, and the admin port if configured)."""
        self._loop = asyncio.get_running_loop()
        self._drain = DrainMeter(self._loop.time(), expected_service=self.config.expected_service_seconds)
        config = self.config
        self._session = aiohttp.ClientSession(
            # Idle upstream connections are closed before a replica's own keep-alive ends them (uvicorn's,
            # in front of vLLM, is 5 s), so a request is never sent on a connection the replica is closing.
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_SECONDS),
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=config.connect_timeout, sock_read=config.upstream_timeout
            ),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        if config.hosted_url:
            self._hosted_session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=max(config.connect_timeout, 5.0), sock_read=config.upstream_timeout
                ),
            )
        try:
            if self.discovery is not None:
                await self._discover()
            await self._check_all()
            self.connections = self._connection_guard()
            keepalive = {}
            if config.idle_timeout:  # aiohttp's own keep-alive timer stays as a backstop behind the guard's
                keepalive["keepalive_timeout"] = max(config.idle_timeout, config.header_timeout) + 1.0
            self._runner = web.AppRunner(
                self._main_app(),
                access_log=None,
                handle_signals=False,
                shutdown_timeout=1.0,
                handler_cancellation=True,
                **keepalive,
            )
            await self._runner.setup()
            host, port = config.listen
            # Not a TCPSite: every connection goes through the guard (timeouts and the cap) to aiohttp's handler.
            self._listener = await self._loop.create_server(
                self.connections.protocol_factory(self._runner.server),
                host,
                port,
                reuse_address=True,
                backlog=1024,
            )
            self.url = _url_of(self._listener.sockets[0].getsockname())
            if config.admin is not None:
                if not config.admin_token:
                    raise ValueError("the admin listener needs a token")
                self._admin_runner = web.AppRunner(
                    AdminApi(self).app(), access_log=None, handle_signals=False, shutdown_timeout=1.0
                )
                await self._admin_runner.setup()
                host, port = config.admin
                await web.TCPSite(self._admin_runner, host, port, reuse_address=True).start()
                self.admin_url = _url_of(self._admin_runner.addresses[0])
        except BaseException:
            await self._close_all()
            raise
        self._health_task = asyncio.create_task(self._health_loop(), name="capcon-gateway-health")
        if self.discovery is not None:
            self._discovery_task = asyncio.create_task(self._discovery_loop(), name="capcon-gateway-discovery")
        self._arm_expiry()
        if config.history is not None:
            config.history.start_tallies(self)  # what each mode did, a period a minute (capcon history)

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop accepting; answer every queued request 503 (shutting down); let leases end, up to the drain timeout."""
        if self._closed:
            return
        self.stopping = True
        loop = self._loop
        if self._listener is not None:
            self._listener.close()
        load = self._load()
        for queue in (self.queue, self.batch):
            while queue:
                _, waiter = queue.popitem(last=False)
                self._settle(waiter, shutting_down(load))
        timeout = self.config.drain_timeout if drain_timeout is None else drain_timeout
        deadline = loop.time() + timeout
        while self.in_flight() > 0 and not self._hurry.is_set():
            left = deadline - loop.time()
            if left <= 0:
                log.warning("drain timeout: %d response(s) still in flight are cut off", self.in_flight())
                break
            self._idle.clear()
            hurry = asyncio.ensure_future(self._hurry.wait())
            idle = asyncio.ensure_future(self._idle.wait())
            await asyncio.wait({hurry, idle}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            hurry.cancel()
            idle.cancel()
        await self._close_all()

    def hurry(self) -> None:
        """A second Ctrl+C or SIGTERM: stop waiting for in-flight responses."""
        self._hurry.set()

    async def _close_all(self) -> None:
        self._closed = True
        if self._expiry is not None:
            self._expiry.cancel()
        for task in (self._health_task, self._discovery_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if self.discovery is not None:
            await self.discovery.aclose()
        if self._listener is not None:
            self._listener.close()
        for runner in (self._runner, self._admin_runner):
            if runner is not None:
                await runner.cleanup()
        for session in (self._session, self._hosted_session):
            if session is not None:
                await session.close()
        history = self.config.history
        if history is not None:
            history.stop_tallies(self)
            await asyncio.get_running_loop().run_in_executor(None, history.close)

    # ------------------------------------------------------------------ load and leases

    def in_flight(self) -> int:
        return sum(r.in_flight for r in self.replicas) + sum(r.in_flight for r in self.retiring)

    def _replica_load(self) -> Load:
        return Load(tuple(ReplicaLoad(r.name, r.in_flight, r.healthy) for r in self.replicas))

    def _load(self, request_class: str = "interactive") -> Load:
        off_peak = None
        if request_class == "deferrable" and self.config.off_peak is not None:
            off_peak = self.config.off_peak(self.clock())
        return Load(
            tuple(ReplicaLoad(r.name, r.in_flight, r.healthy) for r in self.replicas),
            queued=len(self.queue),
            batch_queued=len(self.batch),
            completions_per_second=self._drain_rate(),
            seconds_to_off_peak=off_peak,
        )

    def _drain_rate(self) -> float | None:
        """Completions per second the queue can count on (drain.py): measured, or the free slots' rate if higher."""
        if self._drain is None:
            return None
        cap = cap_of(self.current, self.config.planned_cap)
        slots = sum(cap if cap is not None else max(1, r.in_flight) for r in self.replicas if r.healthy)
        return self._drain.drain_rate(self._loop.time(), slots)

    def _lease(self, name: str) -> Replica:
        replica = self._by_name[name]
        replica.in_flight += 1
        return replica

    def _end_lease(self, replica: Replica, reached: bool, began: float | None = None) -> None:
        replica.in_flight -= 1
        if replica.retiring and replica.in_flight == 0:
            self._forget(replica)
        if reached:
            now = self._loop.time()
            self._drain.completed(now, None if began is None else now - began)
        self._pump()
        if self.stopping and self.in_flight() == 0:
            self._idle.set()

    def _pump(self) -> None:
        """Hand free slots to the head of the queue, then (with the queue empty) to held deferrable work."""
        if not self.queue and not self.batch:
            return
        policy = self.policy()
        cap = cap_of(policy, self.config.planned_cap)
        while self.queue:
            name = least_loaded(self._replica_load(), cap)
            if name is None:
                return  # interactive requests waiting: nothing for the batch either
            _, waiter = self.queue.popitem(last=False)
            self._settle(waiter, _Granted(self._lease(name)))
        if self.batch:
            batch_cap = cap
            if policy.mode == "defer":
                # Held work runs only while the fleet has room: replicas under a share of the cap.
                batch_cap = max(1, int((cap or 2) * self.config.batch_release_share))
            while self.batch:
                name = least_loaded(self._replica_load(), batch_cap)
                if name is None:
                    return
                _, waiter = self.batch.popitem(last=False)
                self._settle(waiter, _Granted(self._lease(name)))

    def _settle(self, waiter: _Waiter, result) -> None:
        """The one answer a waiting request gets from the queue (the caller has removed it from its queue)."""
        if waiter.timer is not None:
            waiter.timer.cancel()
        if waiter.future.done():
            if isinstance(result, _Granted):
                self._end_lease(result.replica, reached=False)
            return
        self.telemetry.waited(waiter.queue, self._loop.time() - waiter.since)
        waiter.future.set_result(result)

    def _expire(self, key: int, waiter: _Waiter) -> None:
        if self.queue.pop(key, None) is None:
            return
        waiter.timer = None
        self._settle(waiter, timed_out(waiter.policy, self._load()))

    async def _wait(self, decision: Wait, policy: Policy):
        queue = self.queue if decision.queue == "interactive" else self.batch
        if len(queue) >= MAX_QUEUE:  # pass with a cap waits without a bound of its own: this is the gateway's
            return Refuse(
                429,
                "queue_full",
                f"the gateway holds {len(queue)} waiting requests, its most",
                retry_after(len(queue), self._drain_rate(), policy.max_wait_seconds),
            )
        loop = self._loop
        future = loop.create_future()
        waiter = _Waiter(future, decision.queue, policy, loop.time())
        key = next(self._keys)
        queue[key] = waiter
        self.telemetry.queued(decision.queue, len(queue))
        if decision.deadline is not None:
            waiter.timer = loop.call_at(decision.deadline, self._expire, key, waiter)
        if decision.queue == "batch":
            self._pump()
        try:
            return await future
        except asyncio.CancelledError:  # the client left while waiting
            if queue.pop(key, None) is not None:
                if waiter.timer is not None:
                    waiter.timer.cancel()
                self.telemetry.waited(decision.queue, loop.time() - waiter.since)
            if future.done() and not future.cancelled() and isinstance(future.result(), _Granted):
                self._end_lease(future.result().replica, reached=False)
            future.cancel()
            raise

    # ------------------------------------------------------------------ the policy

    def policy(self) -> Policy:
        """The policy in force now: a switch until it runs out, then the plan's (the gateway switches back itself)."""
        current = self.current
        if current.expires_at is not None:
            active = in_force(current, self.plan_policy, self.clock())
            if active is not current:
                self._apply(
                    active,
                    actor="gateway",
                    reason=f"the switch by {current.actor} ran out; back to the plan's policy",
                    expired=True,
                )
                return self.current
        return current

    def switch(self, body: object) -> tuple[Policy, Policy]:
        """Apply an admin switch (PUT /admin/policy body); PolicyError naming the field if it cannot be."""
        old = self.policy()
        admin_input.screen(body)
        try:
            new = parse_switch(body, self.plan_policy, self.clock())
        except (OverflowError, TypeError, RecursionError) as problem:
            # Not reached after the screen; kept so that no JSON value can make a switch a 500. The policy is
            # pure, so nothing has changed yet.
            raise PolicyError("body", f"not a switch this gateway can apply ({type(problem).__name__})") from None
        if new.mode == "hosted" and not self.config.hosted_url:
            raise PolicyError("mode", "hosted is refused: this gateway has no hosted endpoint (--hosted-url)")
        if new.mode != "pass" and cap_of(new, self.config.planned_cap) is None:
            raise PolicyError(
                "max_inflight_per_replica",
                f"required for {new.mode}: without a plan (or "
                "--max-inflight) there is no in-flight cap per replica, so nothing would ever wait",
            )
        self._apply(new, actor=new.actor, reason=new.reason, expired=False, previous=old)
        return old, new

    def _apply(self, new: Policy, actor: str, reason: str, expired: bool, previous: Policy | None = None) -> None:
        old = previous if previous is not None else self.current
        self.current = new
        self.switches += 1
        now = self.clock()
        parameters = {k: v for k, v in as_json(new).items() if k in SWITCH_PARAMETERS}
        until = f"; until {_iso(new.expires_at)}" if new.expires_at is not None else ""
        shown = " ".join(f"{k}={v}" for k, v in parameters.items())
        log.info(
            "overflow switch by %s at %s: %s -> %s (%s%s); reason: %s",
            actor,
            _iso(now),
            old.mode,
            new.mode,
            shown,
            until,
            reason,
        )
        history = self.config.history
        if history is not None:
            history.close_period(self, now, new.mode)  # the old mode's period ends at the switch
            history.write(
                now,
                f"{old.mode} -> {new.mode}",
                {
                    "actor": actor,
                    "at": now,
                    "from": old.mode,
                    "to": new.mode,
                    "parameters": parameters,
                    "reason": reason,
                    "expires_at": new.expires_at,
                    "expired": expired,
                    "summary": summary(new),
                    "previous": {k: v for k, v in as_json(old).items() if k != "summary"},
                    "gateway": self.url,
                },
            )
        self.telemetry.policy(new, switched=True)
        self._arm_expiry()
        self._pump()

    def _arm_expiry(self) -> None:
        """A timer for the switch's end, so it reverts even with no traffic to notice it."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        expires = self.current.expires_at
        if expires is None or self._loop is None or self._closed:
            return
        delay = max(0.0, expires - self.clock()) + 0.01
        self._expiry = self._loop.call_later(delay, self._expiry_due)

    def _expiry_due(self) -> None:
        self._expiry = None
        if self.policy().expires_at is not None:
            self._arm_expiry()  # woken early (a clock step): wait again

    # ------------------------------------------------------------------ the replica set

    def _named(self, replica: Replica) -> Replica:
        """Give `replica` a name no other replica (current or retiring) has, and index it by that name."""
        base = replica.name
        number = 1
        # Two addresses that differ only by a secret read alike once redacted: number them, as the sources do.
        while replica.name in self._by_name:
            number += 1
            replica.name = f"{base}#{number}"
        self._by_name[replica.name] = replica
        self.telemetry.replica_added(replica.name)
        return replica

    def _forget(self, replica: Replica) -> None:
        if replica in self.retiring:
            self.retiring.remove(replica)
        if self._by_name.get(replica.name) is replica:
            del self._by_name[replica.name]
            self.telemetry.replica_removed(replica.name)

    def set_replicas(self, urls: list[str], checked: dict[str, Replica] | None = None) -> tuple[list[str], list[str]]:
        """Make `urls` the fleet: new ones join the rotation, missing ones retire. Names (joined, left).

        Synchronous, so no arrival sees half a change. A replica kept is the same object, leases and
        all; one that retires stays reachable by the handlers holding its leases (they end them on the
        object) and takes no new lease, since admission only sees `self.replicas`.
        """
        wanted = list(dict.fromkeys(urls))
        current = {r.url: r for r in self.replicas}
        retiring = {r.url: r for r in self.retiring}
        joined, left = [], []
        replicas = []
        for url in wanted:
            replica = current.get(url) or retiring.get(url)
            if replica is None:
                replica = self._named((checked or {}).get(url) or Replica(url))
                joined.append(replica.name)
            elif replica.retiring:
                replica.retiring = False
                self.retiring.remove(replica)
                joined.append(replica.name)
            replicas.append(replica)
        keep = set(wanted)
        for replica in self.replicas:
            if replica.url in keep:
                continue
            left.append(replica.name)
            replica.retiring = True
            if replica.in_flight > 0:
                self.retiring.append(replica)
            else:
                self._forget(replica)
        self.replicas = replicas
        self.models = frozenset().union(*(r.models for r in replicas))
        if joined:
            self._pump()
        return joined, left

    async def _discover(self) -> None:
        """One round: ask Prometheus, check the newcomers' health, then swap the set in one step."""
        discovery = self.discovery
        try:
            urls = await discovery.replica_urls(self.clock())
        except DiscoveryError as problem:
            discovery.failed(str(problem))
            if not self._discovery_failing:
                self._discovery_failing = True
                if self.replicas or self.retiring:
                    log.warning(
                        "replica discovery failed: %s; keeping the %d replica(s) known (tried every %g s)",
                        discovery.state.last_error,
                        len(self.replicas),
                        self.config.discover_every,
                    )
                else:
                    log.warning(
                        "waiting for Prometheus to name the fleet's replicas (%s): %s; requests get 503 until then "
                        "(tried every %g s)",
                        discovery.query,
                        discovery.state.last_error,
                        self.config.discover_every,
                    )
            return
        known = {r.url for r in self.replicas}
        newcomers = {url: Replica(url) for url in urls if url not in known}
        await asyncio.gather(*(self._check(r, quiet=True) for r in newcomers.values()))
        if self._closed:
            return
        joined, left = self.set_replicas(urls, newcomers)
        discovery.succeeded(len(self.replicas), self.clock())
        if self._discovery_failing:
            self._discovery_failing = False
            log.info("%s answers again: %d replica(s)", discovery.state.source, len(self.replicas))
        if joined:
            log.info("replica(s) joined from Prometheus: %s", ", ".join(printable(n) for n in joined))
        if left:
            log.info(
                "replica(s) gone from Prometheus, taking no new requests (in-flight ones finish): %s",
                ", ".join(printable(n) for n in left),
            )

    async def _discovery_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.discover_every)
            try:
                await self._discover()
            except Exception:  # a round must never end the discovering (logged, so BLE001 is content)
                log.exception("replica discovery round failed")

    # ------------------------------------------------------------------ health

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval)
            try:
                await self._check_all()
            except Exception:  # a check must never end the checking (logged, so BLE001 is content)
                log.exception("health check round failed")

    async def _check_all(self) -> None:
        await asyncio.gather(*(self._check(r) for r in self.replicas))
        models = frozenset().union(*(r.models for r in self.replicas))
        self.models = models

    async def _check(self, replica: Replica, quiet: bool = False) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.health_timeout)
        head = _auth_header(replica.authorization)
        limit = self.config.max_response_bytes
        problem = ""
        try:
            async with self._session.get(replica.base + "/health", timeout=timeout, headers=head) as response:
                await bounded_json.read_body(response, limit)
                if response.status != 200:
                    problem = f"/health answered {response.status}"
            if not problem and (not replica.models or replica.checks % MODELS_EVERY_CHECKS == 0):
                async with self._session.get(replica.base + "/v1/models", timeout=timeout, headers=head) as response:
                    if response.status == 200:
                        listing = bounded_json.loads(await bounded_json.read_body(response, limit))
                        cards = listing.get("data") if isinstance(listing, dict) else None
                        replica.models = frozenset(
                            c["id"]
                            for c in (cards if isinstance(cards, list) else ())
                            if isinstance(c, dict) and isinstance(c.get("id"), str)
                        )
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:  # Unreadable is a ValueError
            problem = _problem(error)
        replica.checks += 1
        if quiet:  # a newcomer, not yet in the rotation: nothing to announce
            replica.healthy, replica.problem = not problem, problem
            return
        self._set_health(replica, not problem, problem)

    def _set_health(self, replica: Replica, healthy: bool, problem: str) -> None:
        replica.problem = problem
        if healthy == replica.healthy:
            return
        replica.healthy = healthy
        if healthy:
            log.info("replica %s is back: requests go to it again", replica.name)
            self._pump()
        else:
            log.warning(
                "replica %s is skipped: %s (checked again every %g s)",
                replica.name,
                problem,
                self.config.health_interval,
            )

    # ------------------------------------------------------------------ the main listener

    def _connection_guard(self) -> ConnectionGuard:
        """The client connections' rules; the cap kept below what the open-files limit allows."""
        config = self.config
        allowed = connection_cap(open_files_limit())
        cap = config.max_connections
        if cap is None:
            cap = allowed
        elif cap and allowed is not None and cap > allowed:
            log.warning(
                "--max-connections %d is over what the open-files limit allows (%d, each client connection may "
                "hold an upstream one too): the cap is %d",
                cap,
                allowed,
                allowed,
            )
            cap = allowed
        guard = ConnectionGuard(config.header_timeout, config.idle_timeout, cap, self.telemetry.connection_closed)
        self.telemetry.watch_connections(lambda: guard.open)
        return guard

    def _main_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=[self.connections.middleware])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "/v1/completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "/v1/chat/completions")

    def _answered(self, outcome: str, request_class: str) -> None:
        self.counts[(outcome, request_class)] += 1
        self.telemetry.answered(outcome, request_class)

    def _invalid(
        self, status: int, message: str, code: str, rid: str, request_class: str, param: str | None = None
    ) -> web.Response:
        self._answered("invalid", request_class)
        return answers.error(status, message, code, retry_after=1, request_id=rid, outcome="invalid", param=param)

    def _refused(self, refusal: Refuse, request_class: str, rid: str) -> web.Response:
        outcome = REFUSAL_OUTCOMES.get(refusal.code, "rejected")
        self._answered(outcome, request_class)
        self.telemetry.retry_after(refusal.retry_after)
        return answers.error(
            refusal.status,
            refusal.message,
            refusal.code,
            retry_after=refusal.retry_after,
            request_id=rid,
            outcome=outcome,
            close=self.stopping,
        )

    def _retry_seconds(self, fallback: float = 5.0) -> int:
        return retry_after(len(self.queue), self._drain_rate(), fallback)

    async def _generate(self, request: web.Request, path: str) -> web.StreamResponse:
        request[CLIENT_TIMES] = ClientTimes(self._loop.time())
        rid = request.headers.get("x-request-id", "")
        if not rid or len(rid) > MAX_REQUEST_ID or not rid.isprintable():
            rid = uuid.uuid4().hex
        kind = request.headers.get(CLASS_HEADER, "interactive").strip().lower() or "interactive"
        if kind not in ("interactive", "deferrable"):
            return self._invalid(
                400,
                f"header {CLASS_HEADER}: got {kind[:40]!r}; expected interactive or deferrable",
                "invalid_class",
                rid,
                "interactive",
                CLASS_HEADER,
            )
        # The operator's list decides over the client's own header: a listed key's work is deferrable.
        if kind == "interactive" and is_deferrable_key(
            request.headers.get("Authorization"), self.config.deferrable_keys
        ):
            kind = "deferrable"
        if self.stopping:
            return self._refused(shutting_down(self._load()), kind, rid)
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._too_large(rid, kind)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large(rid, kind)
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past any real request
            return self._invalid(400, "the request body is not valid JSON", "invalid_json", rid, kind)
        if not isinstance(payload, dict):
            return self._invalid(400, "the request body must be a JSON object", "invalid_json", rid, kind)
        model = payload.get("model")
        if model is not None and not isinstance(model, str):
            return self._invalid(
                400, "model: expected the model's name as a string", "invalid_model", rid, kind, "model"
            )
        if model is not None and self.models and model not in self.models:
            return self._invalid(
                404, f"The model `{model[:200]}` does not exist.", "model_not_found", rid, kind, "model"
            )
        return await self._serve(request, path, raw, payload, kind, rid)

    def _too_large(self, rid: str, kind: str) -> web.Response:
        response = self._invalid(
            413, f"the request body is over {self.config.max_body_bytes} bytes", "request_too_large", rid, kind
        )
        response.force_close()  # the rest of the body is not read
        return response

    async def _serve(self, request, path, raw, payload, kind, rid) -> web.StreamResponse:
        loop = self._loop
        cap = self.config.planned_cap
        policy = self.policy()
        decision = admit(policy, self._load(kind), kind, loop.time(), cap)
        if type(decision) is Forward:
            decision = _Granted(self._lease(decision.replica))
        elif type(decision) is Refuse and not self.replicas and self.discovery is not None:
            decision = Refuse(
                503,
                "no_replica_available",
                f"no replicas yet: waiting for {self.discovery.state.source} to name them",
                max(1, math.ceil(self.config.discover_every)),
            )
        refused_connections = 0
        while True:
            if type(decision) is _Granted:
                answer = await self._local(request, decision.replica, path, raw, rid, kind)
                if answer is not None:
                    return answer
                # The replica refused the connection: the request never reached it; decide again.
                refused_connections += 1
                if refused_connections > len(self.replicas):
                    decision = Refuse(
                        503, "no_replica_available", "no replica of the fleet is answering", self._retry_seconds(10)
                    )
                    continue
                policy = self.policy()
                decision = admit(policy, self._load(kind), kind, loop.time(), cap)
                if type(decision) is Forward:
                    decision = _Granted(self._lease(decision.replica))
            elif type(decision) is Wait:
                decision = await self._wait(decision, policy)
            elif type(decision) is Hosted:
                answer = await self._hosted(request, path, payload, rid, kind)
                if answer is not None:
                    return answer
                # The hosted endpoint failed before answering: the bounded queue, for this request.
                policy = replace(policy, mode="bounded_queue")
                decision = admit(policy, self._load(kind), kind, loop.time(), cap)
                if type(decision) is Forward:
                    decision = _Granted(self._lease(decision.replica))
            elif type(decision) is Refuse:
                return self._refused(decision, kind, rid)
            else:  # pragma: no cover - admit returns one of the four
                raise TypeError(f"unexpected decision {decision!r}")

    async def _local(
        self, request: web.Request, replica: Replica, path: str, raw: bytes, rid: str, kind: str
    ) -> web.StreamResponse | None:
        """Pass the request to `replica` under the lease already taken, and its answer back. None: refused."""
        reached = False
        began = self._loop.time()
        try:
            headers = {"Content-Type": "application/json", "x-request-id": rid}
            # The target's own credentials, else the client's header (credentials.py says why).
            auth = credentials.replica_authorization(replica.authorization, request.headers.get("Authorization"))
            if auth:
                headers["Authorization"] = auth
            try:
                upstream = await self._session.post(replica.base + path, data=raw, headers=headers)
            except aiohttp.ClientConnectorError as error:
                replica.refused += 1
                self._set_health(replica, False, _problem(error))
                return None
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                reached = True
                return self._upstream_failed(replica, error, rid, kind)
            reached = True
            return await self._relay(request, upstream, replica, rid, kind)
        finally:
            self._end_lease(replica, reached, began)

    async def _relay(
        self, request, upstream: aiohttp.ClientResponse, replica: Replica, rid: str, kind: str
    ) -> web.StreamResponse:
        finished = False
        try:
            status = upstream.status
            outcome = "error" if status >= 500 else "local"
            if status != 200:
                try:
                    body, finished = await bounded_json.read_head(upstream, UPSTREAM_ERROR_BODY)
                except (TimeoutError, aiohttp.ClientError, OSError):
                    body = b""  # its status says enough; the connection is dropped below
                message, code, param = answers.normalized_upstream_error(status, body)
                self._answered(outcome, kind)
                replica.answered += 1
                answer = answers.error(
                    status,
                    message,
                    code,
                    retry_after=self._retry_seconds(),
                    request_id=rid,
                    outcome=outcome,
                    param=param,
                )
                return await self._written(request, answer, outcome)
            content_type = upstream.headers.get("Content-Type", "application/json")
            head = {"Content-Type": content_type, "x-request-id": rid, "x-capcon-outcome": "local"}
            encoding = upstream.headers.get("Content-Encoding")
            if encoding:
                head["Content-Encoding"] = encoding
            if not content_type.startswith("text/event-stream"):
                try:
                    body = await bounded_json.read_body(upstream, self.config.max_response_bytes)
                except (TimeoutError, aiohttp.ClientError, OSError, Unreadable) as error:
                    return self._broke_off(replica, error, rid, kind)
                finished = True
                self._answered("local", kind)
                replica.answered += 1
                return await self._written(request, web.Response(status=200, body=body, headers=head), "local")
            response, finished = await self._relay_stream(request, upstream, replica, head, kind)
            return response
        finally:
            if finished:
                upstream.release()
            else:
                upstream.close()  # a half-read answer: drop the connection so the replica sees the abort

    async def _relay_stream(
        self, request, upstream: aiohttp.ClientResponse, replica: Replica, head: dict, kind: str
    ) -> tuple[web.StreamResponse, bool]:
        """Pass a replica's stream on; one that breaks off ends in an error event, never as a finished answer.

        The outcome is counted at the stream's end, so a stream is one request under one outcome: local
        (it ended, or the client left), or upstream_error (the replica reset, closed or went silent).
        Also says whether the replica's body was read to its end (its connection may be used again).
        """
        finished = False
        head["Cache-Control"] = "no-cache"
        response = web.StreamResponse(status=200, headers=head)
        replica.answered += 1
        relay = EventRelay()
        outcome = "local"
        gone = False
        times: ClientTimes = request[CLIENT_TIMES]
        clock = self._loop.time
        try:
            await _to_client(response.prepare(request))
            async for chunk in upstream.content.iter_any():
                out = relay.feed(chunk)
                if out:
                    await _to_client(response.write(out))
                    times.wrote(clock())
            finished = True
            rest = relay.rest()
            if rest:
                await _to_client(response.write(rest))
                times.wrote(clock())
            if not relay.done and _ends_at_close(upstream):
                # A body that ends where the connection does: a replica that dies mid-stream looks like
                # a clean end here, so only the stream's own last word ([DONE]) says it was whole.
                raise aiohttp.ClientPayloadError("the replica closed the connection before the stream's end")
        except _ClientGone:
            gone = True  # the client left: closing the upstream (in _relay) aborts the request on the replica
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            outcome = "upstream_error"
            self._answered(outcome, kind)
            log.warning(
                "replica %s broke off a stream after %d bytes: %s; the client gets an error event, no [DONE]",
                replica.name,
                upstream.content.total_bytes,
                _problem(error),
            )
            try:
                event = answers.stream_error_event(f"the replica broke off the stream ({_problem(error)})")
                await response.write(relay.before_error() + event)
                await response.write_eof()
            except (ConnectionError, RuntimeError):
                pass  # the client left too
            return response, False
        finally:
            if outcome == "local":  # also when the client left or the handler was cancelled
                self._answered("local", kind)
                self.telemetry.client_first_byte(outcome, times)
        if gone:
            return response, finished
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            return response, finished
        times.ended(clock())
        self.telemetry.client_last_byte(outcome, times)
        return response, finished

    async def _written(self, request: web.Request, response: web.Response, outcome: str) -> web.Response:
        """Write a whole answer here rather than after the handler returns, so its client-seen time is known."""
        try:
            await response.prepare(request)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            return response  # the client left
        times: ClientTimes = request[CLIENT_TIMES]
        times.ended(self._loop.time())
        self.telemetry.client_first_byte(outcome, times)
        self.telemetry.client_last_byte(outcome, times)
        return response

    def _broke_off(self, replica: Replica, error: BaseException, rid: str, kind: str) -> web.Response:
        """A whole answer that broke off (or grew past --max-response-bytes) while it was read: 502."""
        replica.answered += 1
        log.warning("replica %s broke off an answer: %s; the client gets 502", replica.name, _problem(error))
        return self._replica_502(f"the replica broke off its answer ({_problem(error)})", "upstream_error", rid, kind)

    def _upstream_failed(self, replica: Replica, error: BaseException, rid: str, kind: str) -> web.Response:
        log.warning("replica %s failed a request: %s", replica.name, _problem(error))
        return self._replica_502(f"the replica failed to answer ({_problem(error)})", "error", rid, kind)

    def _replica_502(self, message: str, outcome: str, rid: str, kind: str) -> web.Response:
        """A replica's failure as the client's 502 (an OpenAI error body), counted once under `outcome`."""
        self._answered(outcome, kind)
        return answers.error(
            502, message, "upstream_error", retry_after=self._retry_seconds(), request_id=rid, outcome=outcome
        )

    # ------------------------------------------------------------------ hosted

    def _hosted_target(self, path: str) -> str:
        base = self._hosted_base.rstrip("/")
        return base + path[3:] if base.endswith("/v1") else base + path

    async def _hosted(self, request, path, payload: dict, rid: str, kind: str) -> web.StreamResponse | None:
        """Pass the request to the hosted endpoint; None if it failed before anything reached the client.

        Failing includes answering 200 with something that is not a completion (not JSON, no choices, a
        stream whose first event is not a chunk): the request falls back as if the call had failed, never
        a 200 with garbage. A stream that breaks off once begun ends in an error event, as a replica's does.
        """
        mapping = self.config.hosted_models
        body = dict(payload)
        model = payload.get("model")
        remote = mapping.get(model) if isinstance(model, str) else None
        remote = remote or mapping.get("*") or model
        if remote is not None:
            body["model"] = remote
        stream = bool(payload.get("stream"))
        strip_usage = False
        if stream:
            options = payload.get("stream_options") if isinstance(payload.get("stream_options"), dict) else {}
            if not options.get("include_usage"):
                body["stream_options"] = {**options, "include_usage": True}
                strip_usage = True  # asked for the count; the client did not want the usage chunk
        headers = {"Content-Type": "application/json", "x-request-id": rid}
        if self._hosted_authorization:  # the key, else the URL's user:password (credentials.py)
            headers["Authorization"] = self._hosted_authorization
        try:
            upstream = await self._hosted_session.post(
                self._hosted_target(path), data=json.dumps(body), headers=headers
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            log.warning("hosted endpoint failed (%s): the request falls back to the bounded queue", _problem(error))
            return None
        limit = self.config.max_response_bytes
        response = None
        counted = False
        finished = False
        times: ClientTimes = request[CLIENT_TIMES]
        clock = self._loop.time
        try:
            if upstream.status != 200:
                log.warning("hosted endpoint answered %d: the request falls back to the bounded queue", upstream.status)
                return None
            head = {
                "Content-Type": upstream.headers.get("Content-Type", "application/json"),
                "x-request-id": rid,
                "x-capcon-outcome": "hosted",
            }
            if not stream:
                data = await bounded_json.read_body(upstream, limit)
                finished = True
                answer = _completion(data)
                if answer is None:
                    log.warning(
                        "hosted endpoint answered 200 without a completion (not JSON with choices): "
                        "the request falls back to the bounded queue"
                    )
                    return None
                self._count_usage(answer)
                self._answered("hosted", kind)
                counted = True
                return await self._written(request, web.Response(status=200, body=data, headers=head), "hosted")
            head["Cache-Control"] = "no-cache"
            pending = b""
            checked = False  # the first data event was a completion chunk: only then does the answer start
            ready: list[bytes] = []
            async for chunk in upstream.content.iter_any():
                pending = (pending + chunk).replace(b"\r\n", b"\n")
                *events, pending = pending.split(b"\n\n")
                if len(pending) > limit:  # one event that never ends is a body read whole
                    raise bounded_json.TooLarge(limit)
                for event in events:
                    if not checked:
                        data = _sse_data(event)
                        if data is not None:
                            if _completion(data) is None:
                                log.warning(
                                    "hosted endpoint's stream did not start with a completion chunk: "
                                    "the request falls back to the bounded queue"
                                )
                                return None
                            checked = True
                    if self._hosted_event(event, strip_usage):
                        ready.append(event + b"\n\n")
                if checked and ready:
                    if response is None:
                        response = web.StreamResponse(status=200, headers=head)
                        await _to_client(response.prepare(request))
                    await _to_client(response.write(b"".join(ready)))
                    times.wrote(clock())
                    ready = []
            finished = True
            if response is None:
                log.warning("hosted endpoint sent an empty stream: the request falls back to the bounded queue")
                return None
            if pending.strip():
                await _to_client(response.write(pending))
                times.wrote(clock())
            self._answered("hosted", kind)  # before the end reaches the client, so it is counted when seen
            counted = True
            self.telemetry.client_first_byte("hosted", times)
            await _to_client(response.write_eof())
            times.ended(clock())
            self.telemetry.client_last_byte("hosted", times)
            return response
        except _ClientGone:
            return response  # the client left; closing the upstream (below) ends the hosted request
        except (TimeoutError, aiohttp.ClientError, OSError, Unreadable) as error:
            if response is None:
                log.warning("hosted endpoint failed (%s): the request falls back to the bounded queue", _problem(error))
                return None
            self._answered("upstream_error", kind)
            counted = True
            log.warning(
                "hosted endpoint broke off a stream: %s; the client gets an error event, no [DONE]", _problem(error)
            )
            try:
                event = answers.stream_error_event(f"the hosted endpoint broke off the stream ({_problem(error)})")
                await response.write(event)
                await response.write_eof()
            except (ConnectionError, RuntimeError):
                pass
            return response
        finally:
            if response is not None and not counted:  # begun, then the client left (or the handler was cancelled)
                self._answered("hosted", kind)
                self.telemetry.client_first_byte("hosted", times)
            if finished:
                upstream.release()
            else:
                upstream.close()

    def _hosted_event(self, event: bytes, strip_usage: bool) -> bool:
        """Count the usage an SSE event carries; False for the usage-only chunk the client did not ask for."""
        if b'"usage"' not in event:
            return True
        data = _sse_data(event)
        try:
            chunk = bounded_json.loads(data or b"")
        except ValueError:
            return True
        if not isinstance(chunk, dict) or not isinstance(chunk.get("usage"), dict):
            return True
        self._add_usage(chunk["usage"])
        return not (strip_usage and not chunk.get("choices"))

    def _count_usage(self, answer: dict) -> None:
        usage = answer.get("usage")
        if isinstance(usage, dict):
            self._add_usage(usage)

    def _add_usage(self, usage: dict) -> None:
        # A figure that is not a whole number from 0 to 1e12 is unknown (0 here): a 400-digit count would
        # reach /admin/state, the tallies and Prometheus, where no float holds it (OverflowError in every
        # later switch's tally).
        prompt = bounded_json.token_count(usage.get("prompt_tokens")) or 0
        completion = bounded_json.token_count(usage.get("completion_tokens")) or 0
        self.hosted_usage["prompt_tokens"] += prompt
        self.hosted_usage["completion_tokens"] += completion
        self.telemetry.hosted_tokens(prompt, completion, self.config.hosted_price_per_million)

    # ------------------------------------------------------------------ the other routes

    async def _models(self, request: web.Request) -> web.Response:
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        for replica in sorted((r for r in self.replicas if r.healthy), key=lambda r: r.in_flight):
            try:
                async with self._session.get(
                    replica.base + "/v1/models",
                    timeout=aiohttp.ClientTimeout(total=10),
                    headers=_auth_header(replica.authorization),
                ) as upstream:
                    body = await bounded_json.read_body(upstream, self.config.max_response_bytes)
                    if upstream.status == 200:
                        return web.Response(
                            status=200,
                            body=body,
                            headers={
                                "Content-Type": upstream.headers.get("Content-Type", "application/json"),
                                "x-request-id": rid,
                            },
                        )
            except aiohttp.ClientConnectorError as error:
                self._set_health(replica, False, _problem(error))
            except (TimeoutError, aiohttp.ClientError, OSError, Unreadable):
                continue
        return answers.error(
            503,
            "no replica of the fleet is answering",
            "no_replica_available",
            retry_after=10,
            request_id=rid,
            outcome="rejected",
        )

    async def _health(self, request: web.Request) -> web.Response:
        if self.stopping:
            refusal = shutting_down(self._load())
            return answers.error(503, refusal.message, refusal.code, retry_after=refusal.retry_after, close=True)
        if any(r.healthy for r in self.replicas):
            return web.Response(status=200)
        return answers.error(503, "no replica of the fleet is answering", "no_replica_available", retry_after=10)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.telemetry.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def _unknown(self, request: web.Request) -> web.Response:
        path = request.path
        if path in GENERATE or path in ("/v1/models", "/health", "/metrics"):
            allowed = "POST" if path in GENERATE else "GET"
            return answers.error(
                405,
                f"{request.method} is not allowed on {path}; expected {allowed}",
                "method_not_allowed",
                retry_after=1,
                headers={"Allow": allowed},
            )
        return answers.error(404, f"no route {request.method} {path[:200]}", "not_found", retry_after=1)

    def state(self) -> dict:
        policy = self.policy()
        cap = cap_of(policy, self.config.planned_cap)
        counters: dict[str, dict[str, int]] = {}
        for (outcome, kind), n in self.counts.items():
            counters.setdefault(outcome, {})[kind] = n
        rate = self._drain.rate(self._loop.time()) if self._drain else None
        return {
            "policy": as_json(policy),
            "queue": {
                "interactive": len(self.queue),
                "batch": len(self.batch),
                "max_queue": policy.max_queue,
                "max_batch_queue": policy.max_batch_queue,
                "peak": dict(self.telemetry.peaks),
            },
            "in_flight": self.in_flight(),
            "cap_per_replica": cap,
            "replicas": [
                {
                    "name": r.name,
                    "url": redact_url(r.url),  # credentials stay in the gateway
                    "healthy": r.healthy,
                    "in_flight": r.in_flight,
                    "answered": r.answered,
                    "refused_connections": r.refused,
                    "problem": r.problem,
                    "models": sorted(r.models),
                }
                for r in self.replicas
            ],
            "counters": counters,
            "totals": {o: sum(n for (oo, _), n in self.counts.items() if oo == o) for o in OUTCOMES},
            "completions_per_second": rate,
            "hosted_usage": dict(self.hosted_usage),
            "switches": self.switches,
            "stopping": self.stopping,
            "retiring": [{"name": r.name, "in_flight": r.in_flight} for r in self.retiring],
            "discovery": self.discovery.state.as_json() if self.discovery is not None else None,
        }


class _ClientGone(Exception):
    """The client closed its connection while its answer was being written."""


async def _to_client(write) -> None:
    try:
        await write
    except (ConnectionError, RuntimeError) as error:  # aiohttp: ClientConnectionResetError, closed transport
        raise _ClientGone() from error


def _problem(error: BaseException) -> str:
    text = redact(str(error)) or type(error).__name__  # client errors often quote the URL, credentials and all
    return f"{type(error).__name__}: {text}"[:300]


def _sse_data(event: bytes) -> bytes | None:
    """The data of one SSE event (its `data:` lines joined), or None for an event without any (a comment)."""
    lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _completion(data: bytes) -> dict | None:
    """A completion (or a stream's chunk) as read from the hosted endpoint: a JSON object with a list of choices."""
    try:
        answer = bounded_json.loads(data)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and isinstance(answer.get("choices"), list) else None


def _ends_at_close(upstream: aiohttp.ClientResponse) -> bool:
    """Whether the body ends where the connection does (neither a length nor chunks): a break reads as an end."""
    encoding = upstream.headers.get("Transfer-Encoding", "").lower()
    return upstream.content_length is None and "chunked" not in encoding


def _auth_header(value: str | None) -> dict[str, str] | None:
    return {"Authorization": value} if value else None


def _url_of(address) -> str:
    shown = address[0]
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{address[1]}"
