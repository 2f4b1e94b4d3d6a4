"""The replicas of a Prometheus-sourced fleet: the instances `up{selector}` names, as replica base URLs.

An `instance` label is the host:port of a replica's /metrics, which vLLM serves on the port of its
OpenAI API, so the replica's base URL follows from it by the one address rule (`config.base_url`).
A failed or senseless answer is never a fleet of nothing: the gateway keeps the list it has, so a
Prometheus restart or a relabelling mistake does not take every replica out of the rotation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from console.gateway.config import MAX_TARGETS, base_url
from console.metrics import promql
from console.redact import redact
from console.sources.prometheus import PrometheusSource, QueryError
from console.text import printable


class DiscoveryError(Exception):
    """No usable list from Prometheus this round (the words are redacted and printable)."""


@dataclass
class DiscoveryState:
    """What /admin/state shows of discovery."""

    source: str  # the Prometheus URL as shown (no password) and the query
    last_success: float | None = None
    last_error: str = ""
    replicas: int = 0

    def as_json(self) -> dict:
        return {
            "source": self.source,
            "last_success": self.last_success,
            "last_error": self.last_error,
            "replicas": self.replicas,
        }


class Discovery:
    def __init__(self, url: str, selector: str = "", timeout: float = 5.0) -> None:
        matchers = promql.selector_matchers(selector)
        self.query = f"up{{{matchers}}}" if matchers else "up"
        self.source = PrometheusSource(url, selector, timeout=timeout)
        self.state = DiscoveryState(f"Prometheus at {self.source.url}, {self.query}")

    async def replica_urls(self, now: float | None = None) -> list[str]:
        """The replicas' base URLs, sorted; DiscoveryError when this answer gives none."""
        at = time.time() if now is None else now
        try:
            rows = await self.source.instant_vector(self.query, at, purpose="discovery")
        except QueryError as problem:
            raise DiscoveryError(printable(str(problem))) from None
        urls: set[str] = set()
        unusable = 0
        for labels, _value in rows:
            try:
                urls.add(base_url(labels.get("instance", "")))
            except ValueError:
                unusable += 1
        if not urls:
            why = f"{unusable} series without a host:port instance label" if unusable else "no series"
            raise DiscoveryError(f"Prometheus at {self.source.url}: {self.query} answered {why}; expected the replicas")
        if len(urls) > MAX_TARGETS:
            raise DiscoveryError(
                f"Prometheus at {self.source.url}: {self.query} names {len(urls)} instances; "
                f"expected at most {MAX_TARGETS} replicas behind one gateway"
            )
        return sorted(urls)

    def succeeded(self, count: int, at: float) -> None:
        self.state.last_success = at
        self.state.last_error = ""
        self.state.replicas = count

    def failed(self, problem: str) -> None:
        self.state.last_error = printable(redact(problem))[:500]

    async def aclose(self) -> None:
        await self.source.aclose()
