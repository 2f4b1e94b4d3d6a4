"""What a gateway is started with: addresses, the plan's policy, limits, the hosted endpoint.

`policy_from_plan` (console.overflow.policy's) turns a plan's `overflow` section into the policy the
gateway returns to when a switch expires; `base_url` and `host_port` check addresses by
the same rule as `--target` elsewhere in capcon.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from console.gateway.bounded_json import DEFAULT_MAX_RESPONSE_BYTES
from console.gateway.connections import DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT
from console.overflow.policy import Policy, policy_from_plan  # the one policy_from_plan, named here too
from console.targets import TARGET_EXPECTED, base_url, masked_target

if TYPE_CHECKING:
    from console.gateway.history import SwitchHistory
    from console.plan.model import Plan

DEFAULT_LISTEN = ("127.0.0.1", 8080)
DEFAULT_ADMIN = ("127.0.0.1", 8081)
DEFAULT_MAX_BODY = 4 * 1024 * 1024
MAX_TARGETS = 1024


@dataclass(frozen=True)
class GatewayConfig:
    # Replica base URLs, http://host:port; one may hold user:password, so neither they nor the hosted URL are in repr.
    targets: tuple[str, ...] = field(repr=False)
    plan_policy: Policy
    planned_cap: int | None = None  # in flight per replica in the queueing modes (the planner's concurrency)
    # A request's expected time on a replica (the plan's), for Retry-After before any has been measured (drain.py).
    expected_service_seconds: float | None = None
    listen: tuple[str, int] = DEFAULT_LISTEN
    admin: tuple[str, int] | None = None  # None: no admin listener
    admin_token: str | None = field(default=None, repr=False)
    hosted_url: str | None = field(default=None, repr=False)
    hosted_models: Mapping[str, str] = field(default_factory=dict)  # local model -> hosted model ("*": any)
    hosted_key: str | None = field(default=None, repr=False)
    hosted_price_per_million: float | None = None
    # SHA-256 digests of the client API keys whose requests are deferrable (console/overflow/clients.py).
    deferrable_keys: frozenset[bytes] = field(default_factory=frozenset, repr=False)
    off_peak: Callable[[float], float | None] | None = None  # now (epoch s) -> seconds to the next off-peak
    batch_release_share: float = 0.5  # held deferrable work goes to replicas under this share of the cap
    health_interval: float = 5.0
    health_timeout: float = 2.0
    drain_timeout: float = 30.0
    max_body_bytes: int = DEFAULT_MAX_BODY
    connect_timeout: float = 3.0
    upstream_timeout: float = 600.0  # longest silence from a replica inside one answer
    # Largest answer read whole (a non-stream answer, a hosted one, a model list, one hosted stream event).
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # Client connections (console/gateway/connections.py): 0 turns a timeout off; max_connections None: from the
    # open-files limit, 0: no cap of the gateway's own.
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_connections: int | None = None
    fleet_name: str = "gateway"
    # Replicas named by Prometheus instead of `targets` (console/gateway/discovery.py); the URL may hold a password.
    prometheus_url: str | None = field(default=None, repr=False)
    selector: str = ""  # PromQL label matchers, as the plan's fleet.selector
    discover_every: float = 15.0
    discovery_timeout: float = 5.0
    history: SwitchHistory | None = None


def planned_cap_from_plan(plan: Plan, instances: int = 1) -> int:
    """The planner's concurrency per replica at the peak (at the plan's efficiencies), shared between gateways."""
    from console.plan.sizing import size  # noqa: PLC0415 - the plan machinery only for a gateway given a plan

    sizing = size(plan)
    concurrency = sizing.expected_concurrency
    if not math.isfinite(concurrency) or concurrency <= 0:
        concurrency = sizing.concurrency
    return max(1, math.ceil(min(concurrency, plan.replica.max_num_seqs) / instances))


def service_seconds_from_plan(plan: Plan) -> float | None:
    """The plan's expected time in the system for one request (queue, prefill, the whole answer); None if unknown."""
    from console.plan.sizing import size  # noqa: PLC0415 - as above

    seconds = size(plan).expected_time_in_system_seconds
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def off_peak_from_plan(plan: Plan) -> Callable[[float], float | None]:
    from console.gateway.offpeak import seconds_to_idle_window  # noqa: PLC0415 - as above
    from console.plan.schedule import schedule  # noqa: PLC0415 - as above

    windows = tuple((w.weekday, w.hour, w.hours) for w in schedule(plan).idle_windows)
    zone = plan.timezone
    return lambda now: seconds_to_idle_window(windows, now, zone)


def shown(text: str) -> str:
    return masked_target(text)


def host_port(text: str, option: str) -> tuple[str, int]:
    """'127.0.0.1:8080', ':8080' (all interfaces), '[::1]:8080' -> (host, port); port 0: a free port."""
    value = text.strip()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"{option} {value!r}: expected [IPv6]:PORT")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{option} {value!r}: {host!r} is not an IPv6 address") from None
    else:
        host, colon, port_text = value.rpartition(":")
        if not colon:
            raise ValueError(f"{option} {value!r}: expected HOST:PORT, such as 127.0.0.1:8080")
        host = host or "0.0.0.0"
        try:
            base_url(f"{host}:1")
        except ValueError as problem:
            raise ValueError(f"{option} {value!r}: {problem}") from None
    if not port_text.isdigit() or len(port_text) > 5 or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{option} {value!r}: port {port_text!r} is not a number from 0 to 65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = [
    "TARGET_EXPECTED",
    "GatewayConfig",
    "base_url",
    "host_port",
    "is_loopback",
    "off_peak_from_plan",
    "planned_cap_from_plan",
    "policy_from_plan",
    "service_seconds_from_plan",
]
