"""Per-replica and fleet figures over a window: what the metrics engine hands on.

`None` means unknown (first scrape, no requests in the window, metric absent, or
an impossible value the replica reported, said in `error`), never 0. Units are SI;
KV usage is a 0-1 fraction. Every number is finite (`vetted_figures`).
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field, fields, replace
from operator import attrgetter

from console.metrics.attainment import Buckets
from console.metrics.vllm import MAX_REQUESTS_PER_REPLICA, REQUEST_GAUGES, impossible

# The name of the fleet's total figures: the total row's key and the subject of fleet-wide flags.
FLEET_TOTAL = "fleet"


class ReplicaState(enum.StrEnum):
    """How a replica answered. A str: stored, printed and compared as its value ("up", "bad_payload")."""

    UP = "up"
    DOWN = "down"
    TIMEOUT = "timeout"
    BAD_PAYLOAD = "bad_payload"
    RESTARTED = "restarted"
    STALE = "stale"
    UNKNOWN = "unknown"


# Groups of states. A state as plain text (a source's) is in them too; tuples, not sets, so a damaged
# recording's unhashable value is just not in them.
ANSWERING = (ReplicaState.UP, ReplicaState.RESTARTED, ReplicaState.STALE)  # gave figures, maybe old ones
SERVING = (ReplicaState.UP, ReplicaState.RESTARTED)  # counted as capacity
FAILED = (ReplicaState.DOWN, ReplicaState.TIMEOUT, ReplicaState.BAD_PAYLOAD)  # no figures: capacity lost


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
    # The window's latency histograms by name (ttft, itl, tpot, e2e, queue): what a percentile target is judged
    # on (console.metrics.attainment), since the quantiles above are interpolated inside a bucket.
    latency_buckets: dict[str, Buckets] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Figures:
        """The inverse of `to_json`; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "latency_buckets" in values:
            values["latency_buckets"] = _buckets_from_json(values["latency_buckets"])
        # Held to the impossible-value rule: a recording may hold what an older capcon let through.
        return vetted_figures(cls(**values))


def _buckets_from_json(data: object) -> dict[str, Buckets]:
    """A recording's histograms; one that is not well formed is left out (unknown, never judged on)."""
    if not isinstance(data, dict):
        return {}
    read = {str(name): Buckets.from_json(value) for name, value in data.items()}
    return {name: b for name, b in read.items() if b is not None}


# What each figure may hold (the rule itself is console.metrics.vllm.impossible): every one is a
# finite number >= 0, and a share at most 1. The data age alone may be negative (clocks apart).
_SHARES = ("kv_usage", "prefix_hit_share")
_NUMBERS = (
    "requests_per_second",
    "prompt_tokens_per_second",
    "generation_tokens_per_second",
    "running",
    "waiting",
    "kv_usage",
    "kv_capacity_tokens",
    "preemptions_per_second",
    "prefix_hit_share",
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "ttft_p99_seconds",
    "itl_p95_seconds",
    "tpot_p95_seconds",
    "e2e_p95_seconds",
    "queue_p95_seconds",
    "mean_input_tokens",
    "mean_output_tokens",
    "rejections_per_second",
)
_MAPS = (
    ("requests_per_second_by_reason", False),
    ("kv_usage_by_engine", True),
    ("kv_capacity_tokens_by_engine", False),
)


def _why_not(value: object, share: bool = False, most: float = math.inf, holder: str = "a replica") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "is not a number"
    return impossible(float(value), share, most, holder)


_numbers_of = attrgetter(*_NUMBERS)
_shares_of = attrgetter(*_SHARES)
_maps_of = attrgetter(*(name for name, _share in _MAPS))


def _all_possible(figures: Figures) -> bool:
    """True when every value is a float within its range (or unknown): the common case, checked in one sweep.

    Anything else (an int, a bool, a string, a value out of range) is left to `vetted_figures`' full rule.
    """
    for value in _numbers_of(figures):
        if value is not None and not (type(value) is float and 0.0 <= value < math.inf):
            return False
    for value in _shares_of(figures):
        if value is not None and value > 1.0:
            return False
    for (_name, share), values in zip(_MAPS, _maps_of(figures)):
        for value in values.values():
            if not (type(value) is float and 0.0 <= value < math.inf) or (share and value > 1.0):
                return False
    age = figures.data_age_seconds
    return age is None or (type(age) is float and math.isfinite(age))


def vetted_figures(figures: Figures, replicas: int = 1) -> Figures:
    """`figures` with every impossible value made unknown (None), the reasons added to `error`.

    The rule of `console.metrics.vllm.impossible` for figures made elsewhere (a Prometheus source's
    answers, a recording's JSON), and a last guard on capcon's own (a rate over a tiny interval can
    still overflow). A share over 1 by rounding only is read as 1. Figures that hold only possible
    values come back as they are. `replicas`: how many replicas the figures sum (a fleet's running and
    waiting may hold that many replicas' worth of requests).
    """
    most = MAX_REQUESTS_PER_REPLICA * max(replicas, 1)
    if _all_possible(figures) and not any(
        value is not None and value > most for value in (figures.running, figures.waiting)
    ):
        return figures
    changes: dict = {}
    reasons: list[str] = []
    for name in _NUMBERS:
        value = getattr(figures, name)
        if value is None:
            continue
        share = name in _SHARES
        limit = most if name in REQUEST_GAUGES else math.inf
        if isinstance(value, float) and 0.0 <= value <= limit and value < math.inf and (not share or value <= 1.0):
            continue
        reason = _why_not(value, share, limit, "a replica" if replicas <= 1 else f"{replicas} replicas")
        if reason:
            changes[name] = None
            reasons.append(f"{name} {reason}")
        elif share and value > 1.0:
            changes[name] = 1.0
        elif not isinstance(value, float):
            changes[name] = float(value)
    for name, share in _MAPS:
        values = getattr(figures, name)
        bad = sorted(str(key) for key, value in values.items() if _why_not(value, share))
        if bad:
            changes[name] = {}
            reasons.append(
                f"{name} ({', '.join(bad)}) {_why_not(values[next(k for k in values if str(k) == bad[0])], share)}"
            )
            if name == "kv_usage_by_engine":
                changes["kv_usage"] = None
        elif share and any(value > 1.0 for value in values.values()):
            changes[name] = {key: min(value, 1.0) for key, value in values.items()}
    age: object = figures.data_age_seconds  # a recording's JSON may hold anything here, a bool or a string
    if age is not None and (isinstance(age, bool) or not isinstance(age, (int, float)) or not math.isfinite(age)):
        changes["data_age_seconds"] = None
    if not changes:
        return figures
    if reasons:
        note = "impossible values shown as unknown: " + "; ".join(reasons)
        if note not in figures.error:
            changes["error"] = f"{figures.error}; {note}" if figures.error else note
    return replace(figures, **changes)


def vetted_fleet_figures(figures: FleetFigures) -> FleetFigures:
    """Every replica's figures and the fleet's held to the impossible-value rule (`vetted_figures`)."""
    replicas = tuple(vetted_figures(r) for r in figures.replicas)
    fleet = vetted_figures(figures.fleet, replicas=len(figures.replicas))
    if fleet is figures.fleet and all(a is b for a, b in zip(replicas, figures.replicas)):
        return figures
    return replace(figures, replicas=replicas, fleet=fleet)


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
