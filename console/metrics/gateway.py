"""What a capcon gateway did over a window, from two samples of its /metrics: the overflow panel's figures.

The same window math as the replicas' (console.metrics.window): counter deltas over the elapsed time, a
counter that went down means the gateway restarted and gives no rate, and the queue wait p95 is
`histogram_quantile` over the bucket deltas. Several gateways (one per host or zone) add up: rates and
queues are summed, the wait quantile comes from their merged buckets, and their modes are compared, since an
operator must know when one of them did not take a switch.

Anything that cannot be computed is None, shown as unknown: never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from console.metrics.attainment import Buckets
from console.metrics.vllm import Histogram
from console.metrics.window import BucketDelta, delta_buckets, delta_quantile, histogram_delta, merge_deltas

# The gateway's outcomes (console.gateway.telemetry.OUTCOMES): local is admitted to the fleet, rejected a 429
# at once (queue full), timed_out a 503 at the queue's deadline, deferred a 429 until off-peak, upstream_error an
# answer a replica or the hosted endpoint broke off after it had begun (the client saw an error event or a 502).
OUTCOMES = ("local", "hosted", "rejected", "timed_out", "deferred", "error", "invalid", "upstream_error")
MIXED = "mixed"  # the gateways do not all enforce the same mode


@dataclass(frozen=True)
class PolicyInForce:
    mode: str
    actor: str
    from_plan: bool
    set_at: float | None  # unix time; None: not said (an older gateway)
    expires_at: float | None


@dataclass(frozen=True)
class GatewaySample:
    """One read of one gateway's /metrics."""

    at: float
    outcomes: Mapping[str, float]  # requests by outcome, both classes together
    queue: Mapping[str, float]  # waiting now: interactive, batch
    wait: Histogram | None  # time spent in the interactive queue
    hosted_tokens: float
    hosted_cost_dollars: float
    switches: float
    policy: PolicyInForce | None
    started_at: float | None = None  # the gateway process's start: a new one means a restart
    # As the clients saw it (console.gateway.telemetry): accepted to the first byte of the answer, queue wait
    # included, and accepted to the last byte; None from a gateway that does not export them.
    client_ttft: Histogram | None = None
    client_e2e: Histogram | None = None


@dataclass(frozen=True)
class GatewayFigures:
    """One gateway (or several together) over the window. Rates per second; None: unknown."""

    name: str
    at: float
    answering: int  # gateways whose /metrics answered this poll
    gateways: int
    admitted_per_second: float | None = None
    hosted_per_second: float | None = None
    rejected_per_second: float | None = None  # 429 at once: the queue was full
    timed_out_per_second: float | None = None  # 503 at the deadline
    deferred_per_second: float | None = None
    errors_per_second: float | None = None
    queue_length: float | None = None
    batch_queue_length: float | None = None
    queue_wait_p95_seconds: float | None = None
    hosted_tokens_per_second: float | None = None
    hosted_dollars_per_hour: float | None = None
    # What the clients saw over the window: the p95s of the answers they got (queue wait included), and every
    # arrival whatever its end (the shares below are of these).
    client_ttft_p95_seconds: float | None = None
    client_e2e_p95_seconds: float | None = None
    # Their buckets, which the plan's targets are judged on (console.metrics.attainment): finer than vLLM's.
    client_ttft_buckets: Buckets | None = None
    client_e2e_buckets: Buckets | None = None
    arrivals_per_second: float | None = None
    policy: PolicyInForce | None = None  # the mode in force; mode MIXED when the gateways differ
    modes: tuple[str, ...] = ()  # each answering gateway's mode, in order
    error: str = ""  # why a gateway gave no figures, in words
    detail: tuple[GatewayFigures, ...] = field(default=(), compare=False)  # each gateway, when several

    def share(self, per_second: float | None) -> float | None:
        """A rate as a share of the arrivals: unknown when either is, or when nothing arrived."""
        arrivals = self.arrivals_per_second
        if per_second is None or arrivals is None or not arrivals > 0:
            return None
        return per_second / arrivals

    @property
    def refused_per_second(self) -> float | None:
        """Turned away for now: 429 at once (queue full) and 503 at the queue's deadline."""
        if self.rejected_per_second is None or self.timed_out_per_second is None:
            return None
        return self.rejected_per_second + self.timed_out_per_second


@dataclass(frozen=True)
class WindowDeltas:
    """One gateway's histogram deltas over the window, for `combined`'s merged quantiles."""

    wait: BucketDelta | None = None
    client_ttft: BucketDelta | None = None
    client_e2e: BucketDelta | None = None


def _restarted(older: GatewaySample, newer: GatewaySample) -> bool:
    if older.started_at is not None and newer.started_at is not None and older.started_at != newer.started_at:
        return True
    pairs = [(older.outcomes.get(k, 0.0), newer.outcomes.get(k, 0.0)) for k in OUTCOMES]
    pairs += [(older.hosted_tokens, newer.hosted_tokens), (older.switches, newer.switches)]
    return any(new < old for old, new in pairs)


def _rate(older: float, newer: float, elapsed: float) -> float:
    return (newer - older) / elapsed


def gateway_figures(
    name: str, older: GatewaySample | None, newer: GatewaySample | None, error: str = ""
) -> GatewayFigures:
    """Figures of one gateway between two samples (the oldest inside the window and the newest)."""
    if newer is None:
        return GatewayFigures(name, older.at if older else 0.0, 0, 1, error=error or "no answer")
    now_known = GatewayFigures(
        name,
        newer.at,
        1,
        1,
        queue_length=newer.queue.get("interactive"),
        batch_queue_length=newer.queue.get("batch"),
        policy=newer.policy,
        modes=(newer.policy.mode,) if newer.policy else (),
        error=error,
    )
    elapsed = newer.at - older.at if older is not None else 0.0
    if older is None or not elapsed > 0 or _restarted(older, newer):
        return now_known
    outcome = {k: _rate(older.outcomes.get(k, 0.0), newer.outcomes.get(k, 0.0), elapsed) for k in OUTCOMES}
    deltas = window_deltas(older, newer)
    return replace(
        now_known,
        admitted_per_second=outcome["local"],
        hosted_per_second=outcome["hosted"],
        rejected_per_second=outcome["rejected"],
        timed_out_per_second=outcome["timed_out"],
        deferred_per_second=outcome["deferred"],
        errors_per_second=outcome["error"] + outcome["upstream_error"],
        queue_wait_p95_seconds=_observed_quantile(0.95, deltas.wait),
        hosted_tokens_per_second=_rate(older.hosted_tokens, newer.hosted_tokens, elapsed),
        hosted_dollars_per_hour=_rate(older.hosted_cost_dollars, newer.hosted_cost_dollars, elapsed) * 3600.0,
        client_ttft_p95_seconds=_observed_quantile(0.95, deltas.client_ttft),
        client_e2e_p95_seconds=_observed_quantile(0.95, deltas.client_e2e),
        client_ttft_buckets=delta_buckets(deltas.client_ttft),
        client_e2e_buckets=delta_buckets(deltas.client_e2e),
        arrivals_per_second=sum(outcome.values()),
    )


def _observed_quantile(q: float, delta: BucketDelta | None) -> float | None:
    """A quantile of the waits observed in the window; None when nothing waited (no wait is not a 0 s wait)."""
    if delta is None or not (delta.count or 0) > 0:
        return None
    value = delta_quantile(q, delta)
    return value if value is not None and math.isfinite(value) else None


def _sum(values: Sequence[float | None]) -> float | None:
    """A fleet total is known only when every gateway's part is: a missing part would read as a smaller total."""
    if not values or any(v is None for v in values):
        return None
    return float(sum(v for v in values if v is not None))


def _merged_quantile(q: float, deltas: Sequence[BucketDelta | None]) -> float | None:
    """The quantile over the merged deltas of the gateways that gave one (a quantile of what was observed)."""
    return _observed_quantile(q, merge_deltas(deltas))


def combined(name: str, parts: Sequence[GatewayFigures], deltas: Sequence[WindowDeltas] = ()) -> GatewayFigures:
    """Several gateways as one: sums, quantiles over their merged bucket deltas (`deltas`, in the order of
    `parts`), the mode they agree on."""
    if len(parts) == 1:
        return parts[0]
    answering = [p for p in parts if p.answering]
    modes = tuple(p.policy.mode for p in answering if p.policy is not None)
    policy: PolicyInForce | None = None
    if modes and len(set(modes)) == 1 and len(modes) == len(parts):
        # The same mode everywhere: the most recent switch says who and since when.
        policy = max((p.policy for p in answering if p.policy), key=lambda p: p.set_at or 0.0)
    elif modes:
        policy = PolicyInForce(MIXED, "", False, None, None)

    def total(attribute: str) -> float | None:
        return _sum([getattr(p, attribute) for p in parts])

    errors = [f"{p.name}: {p.error}" for p in parts if p.error]
    return GatewayFigures(
        name,
        max((p.at for p in parts), default=0.0),
        len(answering),
        len(parts),
        admitted_per_second=total("admitted_per_second"),
        hosted_per_second=total("hosted_per_second"),
        rejected_per_second=total("rejected_per_second"),
        timed_out_per_second=total("timed_out_per_second"),
        deferred_per_second=total("deferred_per_second"),
        errors_per_second=total("errors_per_second"),
        queue_length=total("queue_length"),
        batch_queue_length=total("batch_queue_length"),
        queue_wait_p95_seconds=_merged_quantile(0.95, [d.wait for d in deltas]),
        hosted_tokens_per_second=total("hosted_tokens_per_second"),
        hosted_dollars_per_hour=total("hosted_dollars_per_hour"),
        client_ttft_p95_seconds=_merged_quantile(0.95, [d.client_ttft for d in deltas]),
        client_e2e_p95_seconds=_merged_quantile(0.95, [d.client_e2e for d in deltas]),
        client_ttft_buckets=delta_buckets(merge_deltas(d.client_ttft for d in deltas)),
        client_e2e_buckets=delta_buckets(merge_deltas(d.client_e2e for d in deltas)),
        arrivals_per_second=total("arrivals_per_second"),
        policy=policy,
        modes=modes,
        error="; ".join(errors),
        detail=tuple(parts),
    )


def window_deltas(older: GatewaySample | None, newer: GatewaySample | None) -> WindowDeltas:
    """The histograms' bucket deltas between two samples (for `combined`); None where not computable."""
    if older is None or newer is None or _restarted(older, newer):
        return WindowDeltas()
    return WindowDeltas(
        histogram_delta(older.wait, newer.wait),
        histogram_delta(older.client_ttft, newer.client_ttft),
        histogram_delta(older.client_e2e, newer.client_e2e),
    )
