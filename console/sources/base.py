"""What a metrics source hands the watcher.

Two shapes, because the two sources differ in where the window math happens:

* a `SampleSource` (direct scrape) returns one raw `TargetResult` per target per
  call; the watcher keeps the samples and does the window math itself;
* a `FigureSource` (Prometheus) already answers with windowed figures, since the
  rates and quantiles are computed by PromQL.

Neither raises for a target or server that misbehaves: a failure is a state.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from console.errors import UserError
from console.metrics.figures import FleetFigures, ReplicaState
from console.metrics.vllm import ReplicaSample
from console.plan.schema import TARGET_EXPECTED, masked_target, target_metrics_url
from console.redact import redact, redact_url


@dataclass(frozen=True)
class Target:
    name: str
    url: str  # the full /metrics URL, credentials included: the one to connect to, never shown


@dataclass(frozen=True)
class TargetResult:
    name: str  # redacted, as everything downstream shows and records it
    url: str  # redacted (console.redact): no password or token past the source
    state: ReplicaState  # "up" with a sample, else "down", "timeout" or "bad_payload"
    sample: ReplicaSample | None
    error: str  # why the state is not "up", in words; warnings when it is
    fetched_at: float


@runtime_checkable
class SampleSource(Protocol):
    name: str  # "scrape"

    async def fetch(self, now: float) -> list[TargetResult]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class FigureSource(Protocol):
    """E.g. `console.sources.prometheus.PrometheusSource(url, selector, window_seconds, timeout)`."""

    async def collect(self, now: float) -> FleetFigures: ...


def metrics_url(text: str) -> str:
    """`host:8000`, `http://host:8000` or a full URL -> the URL of its /metrics page.

    A target that cannot be an address (another scheme than http(s), a malformed host,
    a port outside 1-65535) is a UserError. The rule is the plan's, so `--target` and
    fleet.targets accept the same forms.
    """
    try:
        return target_metrics_url(text)
    except ValueError as problem:
        raise UserError(f"target {masked_target(text)!r}: {problem}; expected {TARGET_EXPECTED}") from None


def target_name(url: str) -> str:
    """A short name for a target: host:port of its URL (never its user name or password)."""
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2] or redact_url(url)


def targets_from(urls: list[str]) -> list[Target]:
    """Targets from URLs, named by host:port; a URL given twice is scraped once.

    `url` stays the address to connect to (credentials and all); names never hold a secret.
    """
    seen: dict[str, Target] = {}
    for text in urls:
        url = metrics_url(text)
        if url not in seen:
            seen[url] = Target(target_name(url), url)
    names = [t.name for t in seen.values()]
    # Two targets on one host:port with different paths keep their full URL, redacted, as name.
    return [t if names.count(t.name) == 1 else Target(redact_url(t.url), t.url) for t in seen.values()]


def shown_targets(targets: Sequence[Target]) -> list[Target]:
    """The targets as results carry them, to be shown and recorded: names and URLs redacted.

    Two targets told apart only by a secret (`?token=a`, `?token=b`) would read the same once
    redacted; the later ones get `#2`, `#3` (a fragment, never sent) so each keeps its own row.
    """
    out: list[Target] = []
    taken: set[str] = set()
    for target in targets:
        name, url = redact(target.name), redact_url(target.url)
        if url in taken:
            count = 2
            while f"{url}#{count}" in taken:
                count += 1
            url, name = f"{url}#{count}", f"{name}#{count}"
        taken.add(url)
        out.append(Target(name, url))
    return out
