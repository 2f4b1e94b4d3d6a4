"""The gateway's /metrics (Prometheus exposition through prometheus_client): what it decided and why.

    capcon_gateway_requests_total{outcome, class}   local, hosted, rejected, timed_out, deferred, error, invalid,
                                                    upstream_error (a replica or the hosted endpoint broke off an
                                                    answer already begun: reset, closed, silent, too large)
    capcon_gateway_queue_length{queue}              interactive, batch (read at scrape time)
    capcon_gateway_queue_length_max{queue}          the most ever waiting at once since start
    capcon_gateway_queue_wait_seconds{queue}        time spent waiting, whatever the end (histogram)
    capcon_gateway_in_flight{replica}               leases held on each replica (read at scrape time)
    capcon_gateway_replica_healthy{replica}         1 healthy, 0 skipped
    capcon_gateway_retry_after_seconds              Retry-After given (histogram)
    capcon_gateway_policy_info{mode, actor, ...}    the policy in force (mode, actor, from_plan, set_at, expires_at)
    capcon_gateway_mode{mode}                       1 for the mode in force, 0 for the others
    capcon_gateway_hosted_tokens_total{kind}        prompt, completion: usage reported by the hosted endpoint
    capcon_gateway_hosted_cost_dollars_total        those tokens at --hosted-price-per-million
    capcon_gateway_policy_switches_total            switches applied (operator or expiry)

One registry per gateway (tests run several in one process). Children are made once, so
a request costs a few integer increments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from console.overflow.policy import MODES, Policy

OUTCOMES = ("local", "hosted", "rejected", "timed_out", "deferred", "error", "invalid", "upstream_error")
CLASSES = ("interactive", "deferrable")
QUEUES = ("interactive", "batch")
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)
RETRY_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 300, 900, 3600, 6 * 3600)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Telemetry:
    def __init__(
        self,
        replicas: Sequence[str],
        queue_length: Callable[[str], int],
        in_flight: Callable[[str], int],
        healthy: Callable[[str], bool],
    ) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        requests = Counter(
            "capcon_gateway_requests",
            "Requests answered, by outcome and class.",
            ("outcome", "class"),
            registry=registry,
        )
        self._requests = {(o, c): requests.labels(o, c) for o in OUTCOMES for c in CLASSES}
        length = Gauge("capcon_gateway_queue_length", "Requests waiting now.", ("queue",), registry=registry)
        peak = Gauge(
            "capcon_gateway_queue_length_max",
            "The most requests ever waiting at once since start.",
            ("queue",),
            registry=registry,
        )
        wait = Histogram(
            "capcon_gateway_queue_wait_seconds",
            "Time requests spent waiting in a queue.",
            ("queue",),
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self._wait = {q: wait.labels(q) for q in QUEUES}
        self._peak = {q: peak.labels(q) for q in QUEUES}
        self.peaks = dict.fromkeys(QUEUES, 0)
        for q in QUEUES:
            length.labels(q).set_function(lambda q=q: queue_length(q))
        flight = Gauge(
            "capcon_gateway_in_flight",
            "Requests in flight (leases held) on each replica.",
            ("replica",),
            registry=registry,
        )
        up = Gauge(
            "capcon_gateway_replica_healthy",
            "1 while the replica is used, 0 while it is skipped.",
            ("replica",),
            registry=registry,
        )
        self._flight, self._up, self._in_flight, self._healthy = flight, up, in_flight, healthy
        for name in replicas:
            self.replica_added(name)
        self._retry = Histogram(
            "capcon_gateway_retry_after_seconds",
            "Retry-After given to refused requests.",
            buckets=RETRY_BUCKETS,
            registry=registry,
        )
        self._info = Info("capcon_gateway_policy", "The overflow policy in force.", registry=registry)
        mode = Gauge("capcon_gateway_mode", "1 for the overflow mode in force.", ("mode",), registry=registry)
        self._mode = {m: mode.labels(m) for m in MODES}
        tokens = Counter(
            "capcon_gateway_hosted_tokens",
            "Usage tokens reported by the hosted endpoint.",
            ("kind",),
            registry=registry,
        )
        self._tokens = {k: tokens.labels(k) for k in ("prompt", "completion")}
        self._cost = Counter(
            "capcon_gateway_hosted_cost_dollars", "Hosted tokens at the configured price.", registry=registry
        )
        self._switches = Counter("capcon_gateway_policy_switches", "Policy switches applied.", registry=registry)

    def replica_added(self, name: str) -> None:
        in_flight, healthy = self._in_flight, self._healthy
        self._flight.labels(name).set_function(lambda: in_flight(name))
        self._up.labels(name).set_function(lambda: 1.0 if healthy(name) else 0.0)

    def replica_removed(self, name: str) -> None:
        """A replica gone from the fleet (its last lease ended): its series go with it."""
        for gauge in (self._flight, self._up):
            try:
                gauge.remove(name)
            except KeyError:
                pass

    def answered(self, outcome: str, request_class: str) -> None:
        self._requests[(outcome, request_class)].inc()

    def queued(self, queue: str, length: int) -> None:
        if length > self.peaks[queue]:
            self.peaks[queue] = length
            self._peak[queue].set(length)

    def waited(self, queue: str, seconds: float) -> None:
        self._wait[queue].observe(seconds)

    def retry_after(self, seconds: int) -> None:
        self._retry.observe(seconds)

    def hosted_tokens(self, prompt: int, completion: int, price_per_million: float | None) -> None:
        if prompt > 0:
            self._tokens["prompt"].inc(prompt)
        if completion > 0:
            self._tokens["completion"].inc(completion)
        if price_per_million and prompt + completion > 0:
            self._cost.inc((prompt + completion) * price_per_million / 1e6)

    def policy(self, policy: Policy, switched: bool = False) -> None:
        self._info.info(
            {
                "mode": policy.mode,
                "actor": policy.actor,
                "from_plan": str(policy.from_plan).lower(),
                "set_at": f"{policy.set_at:.0f}",  # since when: the console's header says it
                "expires_at": "" if policy.expires_at is None else f"{policy.expires_at:.0f}",
            }
        )
        for name, child in self._mode.items():
            child.set(1.0 if name == policy.mode else 0.0)
        if switched:
            self._switches.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
