"""Source `gateway`: a capcon gateway's own /metrics, read like a replica's (same connections, bounds, errors).

The scrape source's network side is reused as is (timeouts, size bound, gzip, redacted errors); only the
page is read differently: the gateway's families (`capcon_gateway_*`, console.gateway.telemetry) through
prometheus_client's own parser, the one the gateway writes them with. A page without them (a vLLM replica
given as a gateway, say) is a bad payload that says so.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

from prometheus_client.parser import text_string_to_metric_families

from console.metrics.figures import ReplicaState
from console.metrics.gateway import GatewaySample, PolicyInForce
from console.metrics.vllm import Histogram
from console.sources.scrape import ScrapeSource
from console.targets import Target, TargetResult


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# The histograms read off the page: the interactive queue's wait, and what the clients saw (no labels).
_HISTOGRAMS = {
    "capcon_gateway_queue_wait_seconds": ("wait", {"queue": "interactive"}),
    "capcon_gateway_client_ttft_seconds": ("client_ttft", {}),
    "capcon_gateway_client_e2e_seconds": ("client_e2e", {}),
}


class _HistogramParts:
    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.sum: float | None = None
        self.count: float | None = None

    def add(self, suffix: str, labels: dict[str, str], value: float) -> None:
        if suffix == "_bucket":
            bound = _number_or_inf(labels.get("le", "nan"))
            if bound is not None and math.isfinite(value):
                self.buckets[bound] = value
        elif suffix == "_sum" and math.isfinite(value):
            self.sum = value
        elif suffix == "_count" and math.isfinite(value):
            self.count = value

    def histogram(self) -> Histogram | None:
        bounds = tuple(sorted(self.buckets))
        return Histogram(bounds, tuple(self.buckets[b] for b in bounds), self.sum, self.count) if bounds else None


def _number_or_inf(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _histogram_part(name: str, labels: dict[str, str]) -> tuple[str, str] | None:
    """(field, suffix) when `name` is a bucket, sum or count of a histogram read here."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            wanted = _HISTOGRAMS.get(name[: -len(suffix)])
            if wanted is not None and all(labels.get(k) == v for k, v in wanted[1].items()):
                return wanted[0], suffix
    return None


def read_gateway_page(text: str, at: float) -> GatewaySample:
    """The gateway's figures on one page; ValueError saying what is wrong when it is not a gateway's page."""
    outcomes: dict[str, float] = {}
    queue: dict[str, float] = {}
    histograms = {field: _HistogramParts() for field, _ in _HISTOGRAMS.values()}
    hosted_tokens = hosted_cost = switches = 0.0
    policy = None
    started = None
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if not name.startswith("capcon_gateway_") and name != "process_start_time_seconds":
                continue
            seen = seen or name.startswith("capcon_gateway_")
            part = _histogram_part(name, labels)
            if part is not None:
                histograms[part[0]].add(part[1], labels, value)
                continue
            if not math.isfinite(value):
                continue
            if name == "capcon_gateway_requests_total":
                outcome = labels.get("outcome", "")
                outcomes[outcome] = outcomes.get(outcome, 0.0) + value
            elif name == "capcon_gateway_queue_length":
                queue[labels.get("queue", "")] = value
            elif name == "capcon_gateway_hosted_tokens_total":
                hosted_tokens += value
            elif name == "capcon_gateway_hosted_cost_dollars_total":
                hosted_cost = value
            elif name == "capcon_gateway_policy_switches_total":
                switches = value
            elif name == "capcon_gateway_policy_info":
                policy = PolicyInForce(
                    mode=labels.get("mode", "?")[:40],
                    actor=labels.get("actor", "")[:100],
                    from_plan=labels.get("from_plan") == "true",
                    set_at=_number(labels.get("set_at", "")),
                    expires_at=_number(labels.get("expires_at", "")),
                )
            elif name == "process_start_time_seconds":
                started = value
    if not seen:
        raise ValueError("no capcon_gateway_ metrics on the page: is this a capcon gateway's address?")
    return GatewaySample(
        at,
        outcomes,
        queue,
        histograms["wait"].histogram(),
        hosted_tokens,
        hosted_cost,
        switches,
        policy,
        started,
        client_ttft=histograms["client_ttft"].histogram(),
        client_e2e=histograms["client_e2e"].histogram(),
    )


class GatewaySource(ScrapeSource):
    """Each gateway's /metrics, one TargetResult per gateway, its `sample` a GatewaySample."""

    name = "gateway"

    def read_page(self, target: Target, route: Hashable, body: bytes, now: float) -> TargetResult:
        text = body.decode("utf-8", errors="replace")
        try:
            sample = read_gateway_page(text, now)
        except Exception as error:  # noqa: BLE001 - a page from the network must never bring the console down
            words = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
            return TargetResult(target.name, target.url, ReplicaState.BAD_PAYLOAD, None, f"page not read: {words}", now)
        # The gateway's sample rides in the replica's result type: the network side is the same.
        return TargetResult(target.name, target.url, ReplicaState.UP, sample, "", now)  # type: ignore[arg-type]
