"""vLLM's metric names across versions, and one parsed page turned into a ReplicaSample.

The one table of names: each canonical figure maps to the wire family names that
have carried it, newest first (vLLM renamed several). When a server exposes both
spellings (0.9 to 0.11 emit old and new names with the same values), only the
newest present is read, so nothing is counted twice and a deprecated name that
reads 0 never hides the live one.

Data-parallel servers report one series per `engine`: counters and histograms are
summed across engines, running and waiting are summed, KV usage and capacity are kept per engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from console.metrics.exposition import PROCESS_START, Page, ParseError, Sample

CACHE_CONFIG = "vllm:cache_config_info"

# canonical -> wire family names, newest first. Counter names are the exposed `_total` samples.
COUNTERS: dict[str, tuple[str, ...]] = {
    "requests": ("vllm:request_success_total",),  # every finished request, by finished_reason
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "admission_rejections": ("vllm:admission_rejections_total",),
}
GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
# Histogram families: samples are <name>_bucket, <name>_sum, <name>_count.
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    # The same inter-token observations under the old name (removed in 0.15).
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot": ("vllm:request_time_per_output_token_seconds",),  # per request, 0.11+
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "prompt_length": ("vllm:request_prompt_tokens",),
    "output_length": ("vllm:request_generation_tokens",),
}
CANONICAL: dict[str, tuple[str, ...]] = {**COUNTERS, **GAUGES, **HISTOGRAMS}
# `_created` series of the counters: their timestamps change when the process restarts.
CREATED_MARKERS = tuple(name[: -len("_total")] + "_created" for name in COUNTERS["prompt_tokens"])
# Family names as `# HELP` lines spell them (counters with and without `_total`): what a
# scraper must read; the parser can skip every other family unread.
FAMILIES = frozenset(
    [name for names in CANONICAL.values() for name in names]
    + [name[: -len("_total")] for names in COUNTERS.values() for name in names]
    + [CACHE_CONFIG, PROCESS_START, *CREATED_MARKERS]
)

_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def _wire_index() -> dict[str, tuple[str, tuple[str, int], str]]:
    """sample name -> (kind, (canonical, rank among its spellings), histogram part)."""
    index: dict[str, tuple[str, tuple[str, int], str]] = {}
    for kind, table in (("counter", COUNTERS), ("gauge", GAUGES)):
        for canonical, names in table.items():
            for rank, name in enumerate(names):
                index[name] = (kind, (canonical, rank), "")
    for canonical, names in HISTOGRAMS.items():
        for rank, name in enumerate(names):
            for part in _HISTOGRAM_PARTS:
                index[name + part] = ("histogram", (canonical, rank), part)
    return index


_WIRE = _wire_index()


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets summed over engines: counts[i] observations <= bounds[i]."""

    bounds: tuple[float, ...]  # ascending; the last is +Inf on a complete histogram
    counts: tuple[float, ...]
    sum: float | None
    count: float | None


@dataclass(frozen=True)
class ReplicaSample:
    """One scrape of one replica, in canonical names. Absent figures are missing keys / None."""

    at: float  # unix time the page was fetched
    counters: Mapping[str, float] = field(default_factory=dict)
    requests_by_reason: Mapping[str, float] = field(default_factory=dict)
    running: float | None = None
    waiting: float | None = None
    kv_usage_by_engine: Mapping[str, float] = field(default_factory=dict)
    kv_capacity_tokens: float | None = None  # summed over engines
    kv_capacity_tokens_by_engine: Mapping[str, float] = field(default_factory=dict)
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    start_time: float | None = None  # process start, or counter creation time: changes on restart
    wire_names: Mapping[str, str] = field(default_factory=dict)  # canonical -> name the server used
    duplicates: int = 0  # repeated series the parser left out (the first one counts, as in Prometheus)


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _config_tokens(labels: Mapping[str, str]) -> float | None:
    """KV tokens of one engine from its `cache_config_info` labels, None when it lacks them."""
    tokens = _number(labels.get("kv_cache_size_tokens"))  # 0.33+, right for hybrid models
    if tokens is None:
        blocks, size = _number(labels.get("num_gpu_blocks")), _number(labels.get("block_size"))
        tokens = blocks * size if blocks is not None and size is not None else None
    return tokens


def _config_by_engine(config_labels: Iterable[Mapping[str, str]]) -> dict[str, float | None]:
    # One label set per engine: the first counts (multiprocess mode may repeat it per writer).
    by_engine: dict[str, float | None] = {}
    for labels in config_labels:
        engine = labels.get("engine") or "0"
        if engine not in by_engine:
            by_engine[engine] = _config_tokens(labels)
    return by_engine


def kv_capacity_tokens_by_engine(config_labels: Iterable[Mapping[str, str]]) -> dict[str, float]:
    """KV tokens per `engine` label from `cache_config_info` labels; engines lacking it are left out."""
    return {engine: tokens for engine, tokens in _config_by_engine(config_labels).items() if tokens is not None}


def kv_capacity_tokens(config_labels: Iterable[Mapping[str, str]]) -> float | None:
    """Total KV tokens over engines from `cache_config_info` labels; None when any engine lacks it."""
    by_engine = _config_by_engine(config_labels)
    if not by_engine or any(tokens is None for tokens in by_engine.values()):
        return None
    return sum(tokens for tokens in by_engine.values() if tokens is not None)


def sample_from_page(page: Page, at: float) -> ReplicaSample:
    """Normalise a parsed page. Raises ParseError when it has no vLLM engine metrics."""
    return replace(sample_from_samples(page.samples, at), duplicates=page.duplicates)


def sample_from_samples(samples: Iterable[Sample], at: float) -> ReplicaSample:
    # One pass, accumulating per (canonical, rank of the spelling); the newest spelling
    # present is chosen at the end, so a family's position on the page does not matter.
    wire = _WIRE
    bounds_of = _bounds
    counters: dict[tuple[str, int], float] = {}
    by_reason: dict[tuple[str, int], dict[str, float]] = {}
    gauges: dict[tuple[str, int], dict[str, float]] = {}  # -> engine -> value
    buckets: dict[tuple[str, int], dict[float, float]] = {}
    sums: dict[tuple[str, int], float] = {}
    counts: dict[tuple[str, int], float] = {}
    config_labels: list[Mapping[str, str]] = []
    created: list[float] = []
    process_start: float | None = None
    for name, labels, value in samples:
        known = wire.get(name)
        if known is None:
            if name == CACHE_CONFIG:
                config_labels.append(labels)
            elif name == PROCESS_START:
                process_start = value
            elif name in CREATED_MARKERS and math.isfinite(value):
                created.append(value)
            continue
        kind, key, part = known
        if kind == "histogram":
            if part == "_bucket":
                le = labels.get("le")
                bound = bounds_of[le] if le in bounds_of else _bound(le)
                if bound is not None:
                    family = buckets.get(key)
                    if family is None:
                        family = buckets[key] = {}
                    family[bound] = family.get(bound, 0.0) + value
            elif part == "_sum":
                sums[key] = sums.get(key, 0.0) + value
            else:
                counts[key] = counts.get(key, 0.0) + value
        elif kind == "counter":
            counters[key] = counters.get(key, 0.0) + value
            if key[0] == "requests":
                reasons = by_reason.setdefault(key, {})
                reason = labels.get("finished_reason", "unknown")
                reasons[reason] = reasons.get(reason, 0.0) + value
        elif value == value:  # a NaN gauge is unknown, not a number
            per_engine = gauges.setdefault(key, {})
            engine = labels.get("engine") or "0"
            # Multiprocess "all" mode adds a `pid` label: one engine, several writers; keep the max.
            per_engine[engine] = max(value, per_engine.get(engine, value))

    chosen: dict[str, int] = {}
    for table in (counters, gauges, buckets, sums, counts):
        for canonical, rank in table:
            if rank < chosen.get(canonical, len(CANONICAL)):
                chosen[canonical] = rank
    if not chosen:
        raise ParseError("no vLLM engine metrics on the page (is --disable-log-stats set?)")

    def newest(table: dict) -> dict:
        return {canonical: value for (canonical, rank), value in table.items() if chosen[canonical] == rank}

    gauge_values = newest(gauges)
    histogram_sums, histogram_counts = newest(sums), newest(counts)
    histograms = {}
    for canonical, family in newest(buckets).items():
        bounds = tuple(sorted(family))
        histograms[canonical] = Histogram(bounds, tuple(family[b] for b in bounds), histogram_sums.get(canonical), histogram_counts.get(canonical))

    def summed(canonical: str) -> float | None:
        values = gauge_values.get(canonical)
        return sum(values.values()) if values else None

    return ReplicaSample(
        at=at,
        counters={k: v for k, v in newest(counters).items() if v == v},
        requests_by_reason=newest(by_reason).get("requests", {}),
        running=summed("running"),
        waiting=summed("waiting"),
        kv_usage_by_engine=dict(gauge_values.get("kv_usage", {})),
        kv_capacity_tokens=kv_capacity_tokens(config_labels),
        kv_capacity_tokens_by_engine=kv_capacity_tokens_by_engine(config_labels),
        histograms=histograms,
        start_time=process_start if process_start is not None else (min(created) if created else None),
        wire_names={canonical: CANONICAL[canonical][rank] for canonical, rank in chosen.items()},
    )


_bounds: dict[str, float | None] = {}


def _bound(text: str | None) -> float | None:
    """An `le` label as a number (cached: the same few dozen strings every scrape)."""
    if text in _bounds:
        return _bounds[text]
    bound = _number_bound(text)
    if len(_bounds) < 10_000:
        _bounds[text] = bound
    return bound


def _number_bound(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        bound = float(text)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def restarted(older: ReplicaSample, newer: ReplicaSample) -> bool:
    """True when the process behind a replica changed between two samples."""
    if older.start_time is not None and newer.start_time is not None and newer.start_time != older.start_time:
        return True
    for canonical, value in older.counters.items():
        later = newer.counters.get(canonical)
        if later is not None and later < value:
            return True
    for canonical, histogram in older.histograms.items():
        later = newer.histograms.get(canonical)
        if later is not None and later.count is not None and histogram.count is not None and later.count < histogram.count:
            return True
    return False
