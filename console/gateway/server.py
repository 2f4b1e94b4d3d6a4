"""The gateway server: the fleet's front door, enforcing the overflow policy (aiohttp, one event loop).

Every arrival is put to `console.overflow.admission.admit` with the policy in force and the load
now; this module wires the rooms that carry the answer out:

- Forward: a lease on the replica is taken at once (replicas.py: its in-flight count goes up in the
  same step as the decision, so no two arrivals see the same free slot) and held until the whole
  response has been passed on (replica_client.py), streaming included; a client that disconnects
  cancels its handler (aiohttp's handler cancellation), which closes the upstream connection, so the
  replica aborts the request and frees its KV. A replica that refuses the connection is marked
  unhealthy (health.py; the request never reached it, so it is decided again).
- Wait: admission's waiting rooms (queues.py). Whenever a lease ends, a policy switches or a
  replica comes back, the head of the queue goes to `least_loaded`.
- Hosted: the request goes to the hosted endpoint (hosted_client.py); if that fails before anything
  was sent to the client, the request is decided again under the bounded queue.
- Refuse: an OpenAI-style error with Retry-After (drain.py), at once.

Also here: the policy in force and its switches (the admin API, admin_api.py, calls `switch`), the
replica set's changes from Prometheus (discovery.py), the client connections' guard (connections.py)
and /metrics (telemetry.py).

Every request gets exactly one answer: each handler returns one response, and a queued request's
future is resolved once (granted, timed out or shut down), whichever comes first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypedDict

from aiohttp import web

from console.gateway import admin_input, answers
from console.gateway.admin_api import AdminApi
from console.gateway.config import GatewayConfig
from console.gateway.connections import ConnectionGuard, connection_cap, open_files_limit
from console.gateway.discovery import Discovery, DiscoveryError
from console.gateway.drain import DrainMeter
from console.gateway.health import HealthChecks
from console.gateway.hosted_client import HostedClient
from console.gateway.queues import Granted, Queues, Waiter
from console.gateway.relay_io import CLIENT_TIMES
from console.gateway.relay_io import problem_of as _problem  # named here for older imports
from console.gateway.replica_client import ReplicaClient
from console.gateway.replicas import Replica, ReplicaSet
from console.gateway.telemetry import CONTENT_TYPE as METRICS_CONTENT_TYPE
from console.gateway.telemetry import OUTCOMES, ClientTimes, Telemetry
from console.overflow.admission import (
    Decision,
    Forward,
    Hosted,
    Load,
    Refuse,
    RequestClass,
    Wait,
    admit,
    cap_of,
    retry_after,
    shutting_down,
)
from console.overflow.clients import is_deferrable_key
from console.overflow.policy import (
    SWITCH_PARAMETERS,
    Policy,
    PolicyError,
    as_json,
    in_force,
    parse_switch,
    summary,
)
from console.redact import redact_url
from console.text import printable

log = logging.getLogger("capcon.gateway")

GENERATE = ("/v1/completions", "/v1/chat/completions")
CLASS_HEADER = "x-capcon-class"
MAX_REQUEST_ID = 128
# Refusals by admission code -> the outcome they are counted under.
REFUSAL_OUTCOMES = {
    "queue_full": "rejected",
    "no_replica_available": "rejected",
    "shutting_down": "rejected",
    "queue_timeout": "timed_out",
    "deferred": "deferred",
    "batch_queue_full": "deferred",
}
__all__ = ["CLIENT_TIMES", "Gateway", "Granted", "Replica", "Waiter", "_problem"]


class _KeepAlive(TypedDict, total=False):
    """aiohttp's keep-alive option, passed only when set (its own default otherwise)."""

    keepalive_timeout: float


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        clock: Callable[[], float] = time.time,
        *,
        reuse_port: bool = False,
        metrics_from: str | None = None,
    ) -> None:
        """`reuse_port`: listen beside other workers on the same port (SO_REUSEPORT, workers.py); `metrics_from`:
        the URL of the workers' merged /metrics page, answered on this one's /metrics (None: its own)."""
        if not config.targets and not config.prometheus_url:
            raise ValueError("a gateway needs at least one replica")
        if config.plan_policy.mode == "hosted" and not config.hosted_url:
            raise ValueError("hosted mode without a hosted endpoint")
        self.config = config
        self.clock = clock
        self.reuse_port = reuse_port
        self.metrics_from = metrics_from
        self.plan_policy = config.plan_policy
        if not self.plan_policy.set_at:
            self.plan_policy = replace(self.plan_policy, set_at=clock())
        self.current = self.plan_policy
        self.telemetry = Telemetry(
            [],  # each replica's series are added as it is named (replicas.py)
            queue_length=lambda q: self.queues.length(q),
            in_flight=lambda name: self.pool.by_name[name].in_flight,
            healthy=lambda name: self.pool.by_name[name].healthy,
        )
        self.pool = ReplicaSet(config.targets, self.telemetry.replica_added, self.telemetry.replica_removed)
        self.discovery: Discovery | None = None
        if config.prometheus_url:
            self.discovery = Discovery(config.prometheus_url, config.selector, config.discovery_timeout)
        self._discovery_task: asyncio.Task | None = None
        self._discovery_failing = False
        self.queues = Queues(
            self.telemetry,
            lease=self.pool.lease,
            release=lambda replica: self._end_lease(replica, reached=False),
            replica_load=self._replica_load,
            load=self._load,
            drain_rate=self._drain_rate,
            batch_release_share=config.batch_release_share,
        )
        self.counts = {(o, c): 0 for o in OUTCOMES for c in ("interactive", "deferrable")}
        self.switches = 0
        self.stopping = False
        self.telemetry.policy(self.current)
        self.url = ""
        self.admin_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: DrainMeter | None = None
        self.health = HealthChecks(
            lambda: self.replica_client.opened(),
            config.health_interval,
            config.health_timeout,
            config.max_response_bytes,
            on_back=self._pump,
        )
        self.replica_client = ReplicaClient(
            self.telemetry,
            self.health,
            answered=self._answered,
            retry_seconds=self._retry_seconds,
            end_lease=self._end_lease,
            clock=self._now,
            connect_timeout=config.connect_timeout,
            upstream_timeout=config.upstream_timeout,
            max_response_bytes=config.max_response_bytes,
        )
        self.hosted = HostedClient(
            config.hosted_url,
            config.hosted_key,
            config.hosted_models,
            config.hosted_price_per_million,
            self.telemetry,
            answered=self._answered,
            clock=self._now,
            connect_timeout=config.connect_timeout,
            upstream_timeout=config.upstream_timeout,
            max_response_bytes=config.max_response_bytes,
        )
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self.connections: ConnectionGuard | None = None
        self._admin_runner: web.AppRunner | None = None
        self._health_task: asyncio.Task | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._idle = asyncio.Event()
        self._hurry = asyncio.Event()
        self._closed = False

    # ------------------------------------------------------------------ the rooms' state, as named before them

    @property
    def replicas(self) -> list[Replica]:
        return self.pool.replicas

    @property
    def retiring(self) -> list[Replica]:
        return self.pool.retiring

    @property
    def _by_name(self) -> dict[str, Replica]:
        return self.pool.by_name

    @property
    def models(self) -> frozenset[str]:
        return self.pool.models

    @property
    def queue(self) -> OrderedDict[int, Waiter]:
        return self.queues.interactive

    @property
    def batch(self) -> OrderedDict[int, Waiter]:
        return self.queues.batch

    @property
    def hosted_usage(self) -> dict[str, int]:
        return self.hosted.usage

    def _started_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the gateway was started in; RuntimeError before `start`."""
        if self._loop is None:
            raise RuntimeError("the gateway has not started")
        return self._loop

    def _now(self) -> float:
        return self._started_loop().time()

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Check the replicas once, then listen (the main port, and the admin port if configured)."""
        loop = self._loop = asyncio.get_running_loop()
        self._drain = DrainMeter(loop.time(), expected_service=self.config.expected_service_seconds)
        config = self.config
        self.replica_client.open()
        self.hosted.open()
        try:
            if self.discovery is not None:
                await self._discover()
            await self._check_all()
            guard = self.connections = self._connection_guard()
            keepalive: _KeepAlive = {}
            if config.idle_timeout:  # aiohttp's own keep-alive timer stays as a backstop behind the guard's
                keepalive["keepalive_timeout"] = max(config.idle_timeout, config.header_timeout) + 1.0
            runner = self._runner = web.AppRunner(
                self._main_app(guard),
                access_log=None,
                handle_signals=False,
                shutdown_timeout=1.0,
                handler_cancellation=True,
                **keepalive,
            )
            await runner.setup()
            server = runner.server
            if server is None:  # pragma: no cover - setup() makes it
                raise RuntimeError("aiohttp's runner made no server")
            host, port = config.listen
            # Not a TCPSite: every connection goes through the guard (timeouts and the cap) to aiohttp's handler.
            self._listener = await loop.create_server(
                guard.protocol_factory(server),
                host,
                port,
                reuse_address=True,
                reuse_port=self.reuse_port or None,
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
        loop = self._started_loop()
        if self._listener is not None:
            self._listener.close()
        self.queues.shut()
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
        await self.replica_client.close()
        await self.hosted.close()
        history = self.config.history
        if history is not None:
            history.stop_tallies(self)
            await asyncio.get_running_loop().run_in_executor(None, history.close)

    # ------------------------------------------------------------------ load and leases

    def in_flight(self) -> int:
        return self.pool.in_flight()

    def _replica_load(self) -> Load:
        return Load(self.pool.load())

    def _load(self, request_class: str = "interactive") -> Load:
        off_peak = None
        if request_class == "deferrable" and self.config.off_peak is not None:
            off_peak = self.config.off_peak(self.clock())
        return Load(
            self.pool.load(),
            queued=len(self.queues.interactive),
            batch_queued=len(self.queues.batch),
            completions_per_second=self._drain_rate(),
            seconds_to_off_peak=off_peak,
        )

    def _drain_rate(self) -> float | None:
        """Completions per second the queue can count on (drain.py): measured, or the free slots' rate if higher."""
        if self._drain is None:
            return None
        cap = cap_of(self.current, self.config.planned_cap)
        slots = sum(cap if cap is not None else max(1, r.in_flight) for r in self.pool.replicas if r.healthy)
        return self._drain.drain_rate(self._now(), slots)

    def _lease(self, name: str) -> Replica:
        return self.pool.lease(name)

    def _end_lease(self, replica: Replica, reached: bool, began: float | None = None) -> None:
        self.pool.end_lease(replica)
        if reached and self._drain is not None:  # the meter is made at start, before any lease
            now = self._now()
            self._drain.completed(now, None if began is None else now - began)
        self._pump()
        if self.stopping and self.in_flight() == 0:
            self._idle.set()

    def _pump(self) -> None:
        """Hand free slots to the head of the queue, then (with the queue empty) to held deferrable work."""
        if not self.queues:
            return
        policy = self.policy()
        self.queues.pump(policy, cap_of(policy, self.config.planned_cap))

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

    def set_replicas(self, urls: list[str], checked: dict[str, Replica] | None = None) -> tuple[list[str], list[str]]:
        """Make `urls` the fleet (replicas.py: in one synchronous step); waiting requests go to newcomers."""
        joined, left = self.pool.set_replicas(urls, checked)
        if joined:
            self._pump()
        return joined, left

    async def _discover(self) -> None:
        """One round: ask Prometheus, check the newcomers' health, then swap the set in one step."""
        discovery = self.discovery
        if discovery is None:
            return
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
        await asyncio.gather(*(self.health.check(r, quiet=True) for r in newcomers.values()))
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
        await asyncio.gather(*(self.health.check(r) for r in self.pool.replicas))
        self.pool.refresh_models()

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

    def _main_app(self, guard: ConnectionGuard) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=[guard.middleware])
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
        return retry_after(len(self.queues.interactive), self._drain_rate(), fallback)

    async def _generate(self, request: web.Request, path: str) -> web.StreamResponse:
        request[CLIENT_TIMES] = ClientTimes(self._now())
        rid = request.headers.get("x-request-id", "")
        if not rid or len(rid) > MAX_REQUEST_ID or not rid.isprintable():
            rid = uuid.uuid4().hex
        said = request.headers.get(CLASS_HEADER, "interactive").strip().lower() or "interactive"
        kind: RequestClass
        if said == "interactive":
            kind = "interactive"
        elif said == "deferrable":
            kind = "deferrable"
        else:
            return self._invalid(
                400,
                f"header {CLASS_HEADER}: got {said[:40]!r}; expected interactive or deferrable",
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

    async def _serve(
        self, request: web.Request, path: str, raw: bytes, payload: dict, kind: RequestClass, rid: str
    ) -> web.StreamResponse:
        loop = self._started_loop()
        cap = self.config.planned_cap
        policy = self.policy()
        decision: Decision | Granted = admit(policy, self._load(kind), kind, loop.time(), cap)
        if type(decision) is Forward:
            decision = Granted(self._lease(decision.replica))
        elif type(decision) is Refuse and not self.replicas and self.discovery is not None:
            decision = Refuse(
                503,
                "no_replica_available",
                f"no replicas yet: waiting for {self.discovery.state.source} to name them",
                max(1, math.ceil(self.config.discover_every)),
            )
        refused_connections = 0
        while True:
            if type(decision) is Granted:
                answer = await self.replica_client.forward(request, decision.replica, path, raw, rid, kind)
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
                    decision = Granted(self._lease(decision.replica))
            elif type(decision) is Wait:
                decision = await self.queues.wait(decision, policy, self._pump)
            elif type(decision) is Hosted:
                answer = await self.hosted.serve(request, path, payload, rid, kind)
                if answer is not None:
                    return answer
                # The hosted endpoint failed before answering: the bounded queue, for this request.
                policy = replace(policy, mode="bounded_queue")
                decision = admit(policy, self._load(kind), kind, loop.time(), cap)
                if type(decision) is Forward:
                    decision = Granted(self._lease(decision.replica))
            elif type(decision) is Refuse:
                return self._refused(decision, kind, rid)
            else:  # pragma: no cover - admit returns one of the four
                raise TypeError(f"unexpected decision {decision!r}")

    # ------------------------------------------------------------------ the other routes

    async def _models(self, request: web.Request) -> web.Response:
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        return await self.replica_client.model_list(self.pool.replicas, rid)

    async def _health(self, request: web.Request) -> web.Response:
        if self.stopping:
            refusal = shutting_down(self._load())
            return answers.error(503, refusal.message, refusal.code, retry_after=refusal.retry_after, close=True)
        if any(r.healthy for r in self.replicas):
            return web.Response(status=200)
        return answers.error(503, "no replica of the fleet is answering", "no_replica_available", retry_after=10)

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.metrics_from is not None:
            # One of several workers on this port: a scrape lands on any of them, so each answers the merged page.
            return await self.replica_client.merged_page(self.metrics_from)
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
        rate = self._drain.rate(self._now()) if self._drain is not None else None
        return {
            "policy": as_json(policy),
            "queue": {
                "interactive": len(self.queues.interactive),
                "batch": len(self.queues.batch),
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
            "hosted_usage": dict(self.hosted.usage),
            "switches": self.switches,
            "stopping": self.stopping,
            "retiring": [{"name": r.name, "in_flight": r.in_flight} for r in self.retiring],
            "discovery": self.discovery.state.as_json() if self.discovery is not None else None,
        }


def _url_of(address: Sequence[object]) -> str:
    """A listener's URL from its socket address, (host, port) or IPv6's (host, port, flow, scope)."""
    shown = str(address[0])
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{address[1]}"
