"""Per-replica and fleet figures over a window: what the metrics engine hands on.

`None` means unknown (first scrape, no requests in the window, metric absent),
never 0. Units are SI; KV usage is a 0-1 fraction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Literal

ReplicaState = Literal["up", "down", "timeout", "bad_payload", "restarted", "stale", "unknown"]


@dataclass(frozen=True)
class Figures:
    name: str
    url: str
    state: ReplicaState
    requests_per_second: float | None = None
    requests_per_second_by_reason: dict[str, float] = field(default_factory=dict)
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # max over engines
    kv_usage_by_engine: dict[str, float] = field(default_factory=dict)
    kv_capacity_tokens: float | None = None  # summed over engines
    # Per engine label, from cache_config_info; empty when unknown, and on fleet totals,
    # where the engine labels of different replicas would collide.
    kv_capacity_tokens_by_engine: dict[str, float] = field(default_factory=dict)
    preemptions_per_second: float | None = None
    prefix_hit_share: float | None = None
    ttft_p50_seconds: float | None = None
    ttft_p95_seconds: float | None = None
    ttft_p99_seconds: float | None = None
    itl_p95_seconds: float | None = None
    tpot_p95_seconds: float | None = None
    e2e_p95_seconds: float | None = None
    queue_p95_seconds: float | None = None
    mean_input_tokens: float | None = None
    mean_output_tokens: float | None = None
    rejections_per_second: float | None = None
    data_age_seconds: float | None = None
    error: str = ""  # why the state is not "up", in words

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Figures:
        """The inverse of `to_json`; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class FleetFigures:
    window_seconds: float
    source: str  # "scrape" or "prometheus"
    replicas: tuple[Figures, ...]
    fleet: Figures
    at: float  # unix time of the newer sample
    source_error: str = ""  # e.g. Prometheus unreachable

    def to_json(self) -> dict:
        return {
            "window_seconds": self.window_seconds,
            "source": self.source,
            "at": self.at,
            "source_error": self.source_error or None,
            "replicas": [r.to_json() for r in self.replicas],
            "fleet": self.fleet.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict) -> FleetFigures:
        return cls(
            window_seconds=data["window_seconds"],
            source=data["source"],
            replicas=tuple(Figures.from_json(r) for r in data["replicas"]),
            fleet=Figures.from_json(data["fleet"]),
            at=data["at"],
            source_error=data.get("source_error") or "",
        )
