"""What the clients saw through the fleet's gateways, in words and JSON: the latency they waited (queue wait
included) beside the replicas' own, and what share of their requests was refused, deferred or sent hosted.

Pure: the gateways' window figures (console.metrics.gateway) and the fleet's figures come in. Without a gateway
there is nothing to say (None): the replicas' figures are then what the clients saw.
"""

from __future__ import annotations

from console.fleet import format as fmt
from console.metrics.figures import Figures
from console.metrics.gateway import GatewayFigures


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def client_json(gateway: GatewayFigures | None) -> dict | None:
    """`client` in `watch --once --json`: null without a gateway; unknown figures are null, never 0."""
    if gateway is None:
        return None
    g = gateway
    return {
        "gateways": g.gateways,
        "answering": g.answering,
        "ttft_p95_seconds": _rounded(g.client_ttft_p95_seconds, 4),
        "e2e_p95_seconds": _rounded(g.client_e2e_p95_seconds, 4),
        "arrivals_per_second": _rounded(g.arrivals_per_second, 3),
        "refused_share": _rounded(g.share(g.refused_per_second), 4),
        "deferred_share": _rounded(g.share(g.deferred_per_second), 4),
        "hosted_share": _rounded(g.share(g.hosted_per_second), 4),
        "queue_wait_p95_seconds": _rounded(g.queue_wait_p95_seconds, 4),
    }


def client_line(gateway: GatewayFigures | None, fleet: Figures) -> str | None:
    """ "clients (1 gateway): TTFT p95 4.69s (replicas 393ms) · e2e p95 9.1s · refused 12% · deferred 0% ·
    hosted 3%"; None without a gateway."""
    if gateway is None:
        return None
    g = gateway
    through = f"{g.gateways} gateway{'s' if g.gateways != 1 else ''}"
    if g.answering < g.gateways:
        through += f", {g.gateways - g.answering} not answering"
    return (
        f"clients ({through}): TTFT p95 {fmt.seconds(g.client_ttft_p95_seconds)}"
        f" (replicas {fmt.seconds(fleet.ttft_p95_seconds)})"
        f" · e2e p95 {fmt.seconds(g.client_e2e_p95_seconds)}"
        f" · refused {fmt.share(g.share(g.refused_per_second))}"
        f" · deferred {fmt.share(g.share(g.deferred_per_second))}"
        f" · hosted {fmt.share(g.share(g.hosted_per_second))}"
    )


def panel_client_line(gateway: GatewayFigures) -> str:
    """The overflow panel's line, at most 40 characters: "clients TTFT p95 4.69s · 12% refused"; with no streamed
    answer in the window (whole answers have no first token of their own), their end-to-end p95 instead."""
    g = gateway
    refused = f"{fmt.share(g.share(g.refused_per_second))} refused"
    if g.client_ttft_p95_seconds is None and g.client_e2e_p95_seconds is not None:
        return f"clients e2e p95 {fmt.seconds(g.client_e2e_p95_seconds)} · {refused}"
    return f"clients TTFT p95 {fmt.seconds(g.client_ttft_p95_seconds)} · {refused}"
