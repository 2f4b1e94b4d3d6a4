"""Figures over a window from two samples of each replica: rates, quantiles, means.

Counter rates are deltas over elapsed time; a counter that went down (or another
process behind the URL: start time, model, engines, KV cache size) means the replica
restarted, and then no rate is given rather than a negative or a since-start one. A
family summed over a different number of series in the two samples gives no delta
either (a series that appeared would add its whole count since start). Every figure
handed on is held to the impossible-value rule (`figures.vetted_figures`). Quantiles use Prometheus'
`histogram_quantile` on bucket deltas; the fleet's quantiles come from the
merged bucket deltas of all replicas, never from averaging per-replica quantiles.
Anything that cannot be computed is None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from console.metrics.attainment import Buckets, buckets
from console.metrics.figures import ANSWERING, FLEET_TOTAL, Figures, ReplicaState, vetted_figures
from console.metrics.vllm import Histogram, ReplicaSample, doubt_note, restart_reason, restarted

QUANTILE_FIGURES = (
    ("ttft_p50_seconds", "ttft", 0.50),
    ("ttft_p95_seconds", "ttft", 0.95),
    ("ttft_p99_seconds", "ttft", 0.99),
    ("itl_p95_seconds", "itl", 0.95),
    ("tpot_p95_seconds", "tpot", 0.95),
    ("e2e_p95_seconds", "e2e", 0.95),
    ("queue_p95_seconds", "queue", 0.95),
)
# The histograms kept whole on the figures, for judging percentile targets on their buckets.
LATENCY_HISTOGRAMS = ("ttft", "itl", "tpot", "e2e", "queue")
RATE_FIGURES = (
    ("requests_per_second", "requests"),
    ("prompt_tokens_per_second", "prompt_tokens"),
    ("generation_tokens_per_second", "generation_tokens"),
    ("preemptions_per_second", "preemptions"),
    ("rejections_per_second", "admission_rejections"),
)


def histogram_quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets; None where Prometheus gives NaN.

    Linear interpolation inside the bucket holding the rank; the first bucket starts
    at 0 (or is returned as is when its bound is <= 0); a rank in the +Inf bucket
    returns the upper bound of the last finite bucket.
    """
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return None
    cumulative = _monotonic(counts)
    observations = cumulative[-1]
    if not observations > 0:
        return None
    rank = q * observations
    b = len(bounds) - 1
    for i in range(len(bounds) - 1):
        if cumulative[i] >= rank:
            b = i
            break
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start = 0.0 if b == 0 else bounds[b - 1]
    below = 0.0 if b == 0 else cumulative[b - 1]
    in_bucket = cumulative[b] - below
    if in_bucket <= 0:
        return bounds[b]
    return start + (bounds[b] - start) * ((rank - below) / in_bucket)


def _monotonic(counts: Sequence[float]) -> list[float]:
    """Prometheus forces cumulative counts to be non-decreasing (precision noise, scrape skew)."""
    out: list[float] = []
    top = 0.0
    for count in counts:
        top = max(top, count) if not math.isnan(count) else top
        out.append(top)
    return out


@dataclass(frozen=True)
class BucketDelta:
    """Observations that landed in each bucket during the window (cumulative, per `le`)."""

    by_bound: Mapping[float, float]
    sum: float | None
    count: float | None


def histogram_delta(older: Histogram | None, newer: Histogram | None) -> BucketDelta | None:
    if older is None or newer is None or older.bounds != newer.bounds:
        return None
    by_bound = {bound: new - old for bound, new, old in zip(newer.bounds, newer.counts, older.counts)}
    if any(not delta >= 0 for delta in by_bound.values()):
        return None
    total_sum = newer.sum - older.sum if newer.sum is not None and older.sum is not None else None
    total_count = newer.count - older.count if newer.count is not None and older.count is not None else None
    return BucketDelta(by_bound, total_sum, total_count)


def merge_deltas(deltas: Iterable[BucketDelta | None]) -> BucketDelta | None:
    """Sum bucket deltas by `le`, as PromQL `sum by (le)` does."""
    merged: dict[float, float] = {}
    total_sum: float | None = 0.0
    total_count: float | None = 0.0
    seen = False
    for delta in deltas:
        if delta is None:
            continue
        seen = True
        for bound, value in delta.by_bound.items():
            merged[bound] = merged.get(bound, 0.0) + value
        total_sum = total_sum + delta.sum if total_sum is not None and delta.sum is not None else None
        total_count = total_count + delta.count if total_count is not None and delta.count is not None else None
    return BucketDelta(merged, total_sum, total_count) if seen else None


def delta_quantile(q: float, delta: BucketDelta | None) -> float | None:
    if delta is None:
        return None
    bounds = sorted(delta.by_bound)
    return histogram_quantile(q, bounds, [delta.by_bound[b] for b in bounds])


def delta_buckets(delta: BucketDelta | None) -> Buckets | None:
    """A window's bucket deltas as the cumulative counts a percentile target is judged on; None without an
    +Inf bucket (no total) or with no observation. Counts are made non-decreasing as `histogram_quantile` does."""
    if delta is None or math.inf not in delta.by_bound:
        return None
    ordered = sorted(delta.by_bound)
    cumulative = _monotonic([delta.by_bound[b] for b in ordered])
    if not cumulative[-1] > 0:
        return None
    return buckets(tuple(ordered[:-1]), tuple(cumulative[:-1]), cumulative[-1])


def _mean(delta: BucketDelta | None) -> float | None:
    if delta is None or delta.sum is None or delta.count is None or not delta.count > 0:
        return None
    return delta.sum / delta.count


def _counter_delta(older: ReplicaSample, newer: ReplicaSample, canonical: str) -> float | None:
    old, new = older.counters.get(canonical), newer.counters.get(canonical)
    if old is None or new is None or new < old or not _same_series(older, newer, canonical):
        return None
    return new - old


def _same_series(older: ReplicaSample, newer: ReplicaSample, canonical: str) -> bool:
    """False when the two pages summed a different number of series into `canonical` (known only
    when both say): a series that appeared in between would add its whole count since start to the
    window, as one missing from the older page (cut at a line end) would. No delta then."""
    if not older.shape or not newer.shape:
        return True
    return older.shape.get(canonical) == newer.shape.get(canonical)


def _share(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole is not None and whole > 0 else None


@dataclass(frozen=True)
class ReplicaWindow:
    """The deltas of one replica over the window, kept so the fleet can merge them."""

    elapsed: float
    counters: Mapping[str, float]  # canonical -> increase over the window
    requests_by_reason: Mapping[str, float]
    histograms: Mapping[str, BucketDelta]


def replica_window(older: ReplicaSample | None, newer: ReplicaSample | None) -> ReplicaWindow | None:
    """Deltas between two samples; None without two samples, on a restart or no elapsed time."""
    if older is None or newer is None or not newer.at > older.at or restarted(older, newer):
        return None
    counters = {}
    for canonical in newer.counters:
        delta = _counter_delta(older, newer, canonical)
        if delta is not None:
            counters[canonical] = delta
    by_reason = {}
    for reason, value in newer.requests_by_reason.items():
        old = older.requests_by_reason.get(reason)
        if old is not None and value >= old:
            by_reason[reason] = value - old
    histograms = {}
    for canonical, histogram in newer.histograms.items():
        bucket_delta = (
            histogram_delta(older.histograms.get(canonical), histogram)
            if _same_series(older, newer, canonical)
            else None
        )
        if bucket_delta is not None:
            histograms[canonical] = bucket_delta
    return ReplicaWindow(newer.at - older.at, counters, by_reason, histograms)


def _window_figures(window: ReplicaWindow | None) -> dict:
    """The rate, quantile and mean fields of Figures from one (possibly merged) window."""
    if window is None:
        return {}
    values: dict = {}
    for field_name, canonical in RATE_FIGURES:
        delta = window.counters.get(canonical)
        values[field_name] = delta / window.elapsed if delta is not None else None
    values["requests_per_second_by_reason"] = {r: d / window.elapsed for r, d in window.requests_by_reason.items()}
    for field_name, canonical, q in QUANTILE_FIGURES:
        values[field_name] = delta_quantile(q, window.histograms.get(canonical))
    judged = ((name, delta_buckets(window.histograms.get(name))) for name in LATENCY_HISTOGRAMS)
    values["latency_buckets"] = {name: b for name, b in judged if b is not None}
    values["mean_input_tokens"] = _mean(window.histograms.get("prompt_length"))
    values["mean_output_tokens"] = _mean(window.histograms.get("output_length"))
    values["prefix_hit_share"] = _share(
        window.counters.get("prefix_cache_hits"), window.counters.get("prefix_cache_queries")
    )
    return values


def _gauge_figures(sample: ReplicaSample | None) -> dict:
    if sample is None:
        return {}
    kv = dict(sample.kv_usage_by_engine)
    return {
        "running": sample.running,
        "waiting": sample.waiting,
        "kv_usage": max(kv.values()) if kv else None,
        "kv_usage_by_engine": kv,
        "kv_capacity_tokens": sample.kv_capacity_tokens,
        "kv_capacity_tokens_by_engine": dict(sample.kv_capacity_tokens_by_engine),
    }


def replica_figures(
    older: ReplicaSample | None,
    newer: ReplicaSample | None,
    name: str,
    url: str,
    state: ReplicaState = ReplicaState.UP,
    error: str = "",
    now: float | None = None,
    window: ReplicaWindow | Literal[False] | None = False,
) -> Figures:
    """One replica's figures: gauges from the newer sample, rates and quantiles from the pair.

    `window`: `replica_window(older, newer)` when the caller has it already (the fleet totals need it too);
    False, the default, when it has not.
    """
    if newer is None:
        return Figures(name=name, url=url, state=state, error=error)
    reason = restart_reason(older, newer) if older is not None else ""
    if reason:
        state = ReplicaState.RESTARTED
        error = error or f"the replica restarted during the window ({reason}): rates resume next refresh"
    note = doubt_note(newer.doubtful)
    if note and note not in error:
        error = f"{error}; {note}" if error else note
    if window is False:
        window = replica_window(older, newer)
    values = {**_gauge_figures(newer), **_window_figures(window)}
    age = now - newer.at if now is not None else None
    return vetted_figures(Figures(name=name, url=url, state=state, error=error, data_age_seconds=age, **values))


def fleet_figures(
    windows: Sequence[tuple[ReplicaSample | None, ReplicaSample | None]],
    replicas: Sequence[Figures],
    name: str = FLEET_TOTAL,
    url: str = "",
    now: float | None = None,
    computed: Sequence[ReplicaWindow | None] | None = None,
) -> Figures:
    """Fleet totals: rates and gauges summed, KV max, quantiles from merged bucket deltas.

    `windows` are the (older, newer) samples of the replicas whose data is current;
    `replicas` are every replica's figures (for the state and for gauges); `computed`, when
    given, holds `replica_window` of each pair already (the replicas' figures needed it).
    """
    counted = list(computed) if computed is not None else [replica_window(older, newer) for older, newer in windows]
    live = [w for w in counted if w is not None]
    merged = _merge_windows(live)
    values = _window_figures(merged)
    current = [f for f in replicas if f.state in ANSWERING]
    values.update(
        running=_sum(f.running for f in current),
        waiting=_sum(f.waiting for f in current),
        kv_usage=_max(f.kv_usage for f in current),
        kv_capacity_tokens=_sum(f.kv_capacity_tokens for f in current),
    )
    answering = sum(1 for f in replicas if f.state in ANSWERING)
    state = ReplicaState.UP if answering else (ReplicaState.DOWN if replicas else ReplicaState.UNKNOWN)
    notes = []
    if answering < len(replicas):
        notes.append(f"{len(replicas) - answering} of {len(replicas)} replicas not answering")
    if len(live) < answering:
        notes.append(f"{answering - len(live)} replicas without a full window (rates leave them out)")
    ages = [f.data_age_seconds for f in current if f.data_age_seconds is not None]
    return vetted_figures(
        Figures(
            name=name,
            url=url,
            state=state,
            error="; ".join(notes),
            data_age_seconds=max(ages) if ages else None,
            **values,
        ),
        replicas=len(replicas),
    )


def _merge_windows(windows: Sequence[ReplicaWindow]) -> ReplicaWindow | None:
    """Sum the deltas of several replicas; each replica's rate uses its own elapsed time."""
    if not windows:
        return None
    # Rates add per replica (each over its own elapsed time); express them as deltas over 1 s.
    counters: dict[str, float] = {}
    by_reason: dict[str, float] = {}
    for window in windows:
        for canonical, delta in window.counters.items():
            counters[canonical] = counters.get(canonical, 0.0) + delta / window.elapsed
        for reason, delta in window.requests_by_reason.items():
            by_reason[reason] = by_reason.get(reason, 0.0) + delta / window.elapsed
    histograms = {}
    for canonical in {c for w in windows for c in w.histograms}:
        merged = merge_deltas(w.histograms.get(canonical) for w in windows)
        if merged is not None:
            histograms[canonical] = merged
    return ReplicaWindow(1.0, counters, by_reason, histograms)


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _max(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None
