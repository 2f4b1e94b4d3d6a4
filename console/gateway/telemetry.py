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
    capcon_gateway_client_ttft_seconds              time to first token as the client sees it (histogram): from
                                                    the request accepted (its headers read) to the first event
                                                    with output of a streamed answer written to the client (a
                                                    chat's role-only chunk is none: console/token_chunks.py),
                                                    queue wait included; outcomes local and hosted only (a
                                                    refusal is no first token; a whole answer's first byte is
                                                    its last)
    capcon_gateway_client_e2e_seconds               accepted to the answer's last byte written (histogram), streamed
                                                    or whole; a client that left mid-stream has a first token but
                                                    no last byte, so it counts in the first only
    capcon_gateway_connections_open                 client connections open now (read at scrape time)
    capcon_gateway_connections_closed_total{reason} closed by the gateway: header_timeout (a head not whole in
                                                    time), idle_timeout (kept alive with no request), evicted (at
                                                    the cap, the one waiting longest for a head gave way),
                                                    refused (at the cap with none waiting: closed at once)

The client histograms' bounds are finer than vLLM's (the E24 series from 0.1 s: no step wider than 10 %), so a
p95 read from them is within 10 % of the clients' own: with a gateway in front, the client's
figure is the users' (queue wait + the replica's TTFT), and the console judges the plan's targets on it.

One registry per gateway (tests run several in one process). Children are made once, so
a request costs a few integer increments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from console.gateway import bounded_json
from console.gateway.connections import CLOSE_REASONS
from console.overflow.policy import MODES, Policy
from console.token_chunks import events_carry_token

OUTCOMES = ("local", "hosted", "rejected", "timed_out", "deferred", "error", "invalid", "upstream_error")
CLASSES = ("interactive", "deferrable")
QUEUES = ("interactive", "batch")
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)
RETRY_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 300, 900, 3600, 6 * 3600)
# What the clients waited is the figure the plan's targets are judged on (console.fleet.flags), so its bounds
# follow the E24 series from 0.1 s up (no step wider than 10 %): histogram_quantile then reads a p95 within 10 %
# of the clients' own, where vLLM's 2.5-5-7.5 steps read 4.6 s for a 3.6 s p95 (tests/live/
# test_client_latency_live.py). About 70 bounds, one histogram per gateway: a few kB on its page.
E24 = (1.0, 1.1, 1.2, 1.3, 1.5, 1.6, 1.8, 2.0, 2.2, 2.4, 2.7, 3.0, 3.3, 3.6, 3.9, 4.3, 4.7, 5.1, 5.6, 6.2, 6.8, 7.5, 8.2, 9.1)  # fmt: skip


def _e24(first: float, last: float) -> tuple[float, ...]:
    """E24 bounds from `first` to `last` (powers of ten), rounded to what the page prints."""
    found, decade = [], first
    while decade < last:
        found += [round(step * decade, 6) for step in E24]
        decade *= 10
    return tuple(found)


CLIENT_TTFT_BUCKETS = (
    (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08) + _e24(0.1, 10.0)
    + (10.0, 11.0, 12.0, 13.0, 15.0, 16.0, 18.0, 20.0, 30.0, 40.0, 60.0, 80.0, 160.0, 640.0, 2560.0)
)  # fmt: skip
CLIENT_E2E_BUCKETS = tuple(b for b in _e24(0.1, 100.0) if b <= 60.0) + (
    60.0, 90.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
CLIENT_OUTCOMES = ("local", "hosted")  # answers from a replica or the hosted endpoint
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
            length.labels(q).set_function(partial(queue_length, q))
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
        self._client_ttft = Histogram(
            "capcon_gateway_client_ttft_seconds",
            "Accepted to the first token of the answer written to the client, queue wait included.",
            buckets=CLIENT_TTFT_BUCKETS,
            registry=registry,
        )
        self._client_e2e = Histogram(
            "capcon_gateway_client_e2e_seconds",
            "Accepted to the last byte of the answer written to the client.",
            buckets=CLIENT_E2E_BUCKETS,
            registry=registry,
        )

    def watch_connections(self, open_now: Callable[[], int]) -> None:
        """Client connections: the open count read at scrape time, and a counter of those the gateway closed."""
        Gauge("capcon_gateway_connections_open", "Client connections open now.", registry=self.registry).set_function(
            open_now
        )
        closed = Counter(
            "capcon_gateway_connections_closed",
            "Client connections closed by the gateway, by reason.",
            ("reason",),
            registry=self.registry,
        )
        self._closed = {r: closed.labels(r) for r in CLOSE_REASONS}

    def connection_closed(self, reason: str) -> None:
        self._closed[reason].inc()

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

    def client_first_token(self, outcome: str, times: ClientTimes) -> None:
        """Once per streamed answer from a replica or the hosted endpoint whose first token was written: its TTFT (a
        whole answer has none of its own: relay_io.written counts it in end-to-end only)."""
        if outcome in CLIENT_OUTCOMES and times.first_token is not None:
            self._client_ttft.observe(max(0.0, times.first_token - times.accepted))

    def client_last_byte(self, outcome: str, times: ClientTimes) -> None:
        """Once per such answer written whole: its end-to-end time."""
        if outcome in CLIENT_OUTCOMES and times.last_byte is not None:
            self._client_e2e.observe(max(0.0, times.last_byte - times.accepted))

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


class ClientTimes:
    """One request's moments on the event loop's clock: accepted, its answer's first token and last byte written."""

    __slots__ = ("accepted", "first_token", "last_byte")

    def __init__(self, accepted: float) -> None:
        self.accepted = accepted
        self.first_token: float | None = None
        self.last_byte: float | None = None

    def wrote(self, now: float, events: bytes) -> None:
        """Whole events of a streamed answer written: the first token's time, once they carry one. An upstream that
        sends a chat's role chunk before its prefill would otherwise read the time to accept as its TTFT."""
        if self.first_token is None and events_carry_token(events, bounded_json.loads):
            self.first_token = now

    def ended(self, now: float) -> None:
        self.last_byte = now
