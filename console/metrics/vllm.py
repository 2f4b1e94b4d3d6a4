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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from console.metrics.exposition import PROCESS_START, Page, ParseError, Sample
from console.text import listed

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

# vLLM's default buckets (vllm/v1/metrics/loggers.py, 0.32): the simulated fleet exposes them, and the rule file
# judges a latency target on the bound at or above it (console.engines.rules).
# fmt: off
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0
)
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0
)
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0
)
# fmt: on
# The bounds of each latency histogram a plan's target is judged on: per-request TPOT has the inter-token buckets.
BUCKET_BOUNDS: dict[str, tuple[float, ...]] = {
    "ttft": TTFT_BUCKETS,
    "itl": ITL_BUCKETS,
    "tpot": ITL_BUCKETS,
    "e2e": LATENCY_BUCKETS,
    "queue": LATENCY_BUCKETS,
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
    # Who answers: the `model_name` labels of its gauges and the `engine` labels on the page (empty
    # when unknown). A change of either between two samples is another process behind the URL.
    model_names: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    # canonical -> series read of it (or "cache_config"): the same process serves the same series,
    # so fewer of them on a later page means that page was cut short (see `cut_short`).
    shape: Mapping[str, int] = field(default_factory=dict)
    # canonical -> why it is unknown although the page had it: an impossible value (see `impossible`).
    doubtful: Mapping[str, str] = field(default_factory=dict)
    # Set on samples already held to the rule (`vet_sample` then has nothing to do); not data.
    checked: bool = field(default=False, compare=False, repr=False)


# --- Impossible values ---------------------------------------------------------------------
#
# Decided here, once, for every reading a replica reports: a counter, a gauge, a histogram's
# bucket, _count or _sum, and the process start time are finite numbers >= 0, and a KV share is
# at most 1 (KV_SLACK over it is float rounding, read as 1). Anything else (NaN, +Inf, -Inf, a
# negative, KV 57 meaning 5,700 %) is not a smaller or larger number but no reading at all: that
# figure is unknown for the replica (a family with one impossible series is unknown as a whole,
# never a partial sum), the reason is kept in `ReplicaSample.doubtful`, and it never reaches a
# rate, a percentile, a flag, the history file or JSON. Figures computed elsewhere (Prometheus'
# answers) are held to the same rule by `console.metrics.figures.vetted_figures`.


KV_SLACK = 1e-6
_INF = math.inf
# Requests one replica can hold, running or waiting: vLLM's max_num_seqs is in the hundreds to a few thousand and
# its waiting queue lives in the server's memory. A count past this is a broken exporter, never a load.
MAX_REQUESTS_PER_REPLICA = 1e7
REQUEST_GAUGES = ("running", "waiting")


def impossible(value: float, share: bool = False, most: float = _INF, holder: str = "a replica") -> str:
    """Why `value` cannot be a vLLM reading, in words; "" when it can. `share`: a 0-1 fraction; `most`: the
    largest count of requests it can be, for `holder` (a replica: MAX_REQUESTS_PER_REPLICA)."""
    if value != value:
        return "NaN"
    if value == _INF or value == -_INF:
        return "+Inf" if value > 0 else "-Inf"
    if value < 0:
        return f"{value:g} is negative"
    if share and value > 1 + KV_SLACK:
        return f"{value:g} is over 1 (a share, 0-1)"
    if value > most:
        return f"{value:g} is more requests than {holder} can hold (at most {most:g})"
    return ""


def doubt_note(doubtful: Mapping[str, str]) -> str:
    """The words a replica's error carries for its impossible values ("" without any)."""
    if not doubtful:
        return ""
    return "impossible values shown as unknown: " + "; ".join(doubtful[k] for k in sorted(doubtful))


class IncompletePage(ParseError):
    """A page that is not whole: a histogram without its +Inf bucket, _count or _sum, buckets
    that fall, or an engine missing from a family the other engines have (cut short)."""


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
    """Normalise a parsed page. Raises ParseError when it has no vLLM engine metrics, and
    IncompletePage (a ParseError) when it is not whole."""
    if page.cut:
        raise IncompletePage("page cut short: its last line has no line end")
    return replace(sample_from_samples(page.samples, at), duplicates=page.duplicates)


def sample_from_samples(samples: Iterable[Sample], at: float) -> ReplicaSample:
    # One pass, accumulating per (canonical, rank of the spelling); the newest spelling
    # present is chosen at the end, so a family's position on the page does not matter.
    wire = _WIRE
    bounds_of = _bounds
    counters: dict[tuple[str, int], float] = {}
    by_reason: dict[tuple[str, int], dict[str, float]] = {}
    gauges: dict[tuple[str, int], dict[str, float]] = {}  # -> engine -> value
    # -> engine -> le -> count; and per engine the lines seen: [buckets, +Inf buckets, _count, _sum]
    buckets: dict[tuple[str, int], dict[str, dict[float, float]]] = {}
    parts: dict[tuple[str, int], dict[str, list[int]]] = {}
    sums: dict[tuple[str, int], float] = {}
    counts: dict[tuple[str, int], float] = {}
    shape: dict[tuple[str, int], int] = {}
    engines: dict[tuple[str, int], set[str]] = {}  # explicit `engine` labels per family
    doubts: dict[tuple[str, int], str] = {}
    models: set[str] = set()
    config_labels: list[Mapping[str, str]] = []
    created: list[float] = []
    process_start: float | None = None
    start_doubt = ""
    # Lines of one family come in runs (a histogram's buckets, then its _count...): what depends
    # only on the sample name, or on the name and the engine, is looked up once per run.
    run_name: str | None = None
    run_engine: str | None = None
    # Set on the first line of each run, before any use (a histogram's seen_parts and per on its first engine).
    known: tuple[str, tuple[str, int], str] | None
    key: tuple[str, int] = ("", 0)  # read only once a run of a known family has set it
    family_engines: set[str]
    tally: dict[str, list[int]]
    family: dict[str, dict[float, float]]
    seen_parts: list[int]
    per: dict[float, float]
    kind = part = ""
    run_count = 0  # lines of the current run, added to `shape` when the run ends
    for name, labels, value in samples:
        if name != run_name:
            if run_count:
                shape[key] = shape.get(key, 0) + run_count
                run_count = 0
            run_name, run_engine = name, None
            known = wire.get(name)
            if known is not None:
                kind, key, part = known
                if key not in engines:
                    engines[key] = set()
                family_engines = engines[key]
                if kind == "histogram":
                    if key not in parts:
                        parts[key] = {}
                    tally = parts[key]
                    if key not in buckets:
                        buckets[key] = {}
                    family = buckets[key]
        if known is None:
            if name == CACHE_CONFIG:
                config_labels.append(labels)
            elif name == PROCESS_START:
                if 0.0 <= value < _INF:
                    process_start = value
                else:
                    start_doubt = f"{name} {impossible(value)}"
            elif name in CREATED_MARKERS and 0.0 <= value < _INF:
                created.append(value)
            continue
        run_count += 1
        engine = labels.get("engine")
        if engine:
            family_engines.add(engine)
        else:
            engine = "0"
        if kind == "gauge":
            model = labels.get("model_name")
            if model is not None:
                models.add(model)
            if (
                not 0.0 <= value < _INF
                or (key[0] == "kv_usage" and value > 1.0)
                or (value > MAX_REQUESTS_PER_REPLICA and key[0] in REQUEST_GAUGES)
            ):
                most = MAX_REQUESTS_PER_REPLICA if key[0] in REQUEST_GAUGES else _INF
                reason = impossible(value, share=key[0] == "kv_usage", most=most)
                if reason:
                    doubts.setdefault(key, f"{name} {reason}")
                    continue
                value = 1.0  # over 1 by rounding only
            per_engine = gauges.get(key)
            if per_engine is None:
                per_engine = gauges[key] = {}
            # Multiprocess "all" mode adds a `pid` label: one engine, several writers; keep the max.
            previous = per_engine.get(engine)
            per_engine[engine] = value if previous is None or value > previous else previous
            continue
        if not 0.0 <= value < _INF:
            doubts.setdefault(key, f"{name} {impossible(value)}")
            value = 0.0  # the family is unknown as a whole; its lines are still counted below
        if kind == "histogram":
            if engine != run_engine:
                run_engine = engine
                if engine not in tally:
                    tally[engine] = [0, 0, 0, 0]
                seen_parts = tally[engine]
                if engine not in family:
                    family[engine] = {}
                per = family[engine]
            if part == "_bucket":
                le = labels.get("le")
                bound = bounds_of[le] if le in bounds_of else _bound(le)
                if bound is not None:
                    seen_parts[0] += 1
                    if bound == _INF:
                        seen_parts[1] += 1
                    per[bound] = per.get(bound, 0.0) + value
            elif part == "_sum":
                seen_parts[3] += 1
                sums[key] = sums.get(key, 0.0) + value
            else:
                seen_parts[2] += 1
                counts[key] = counts.get(key, 0.0) + value
        else:
            counters[key] = counters.get(key, 0.0) + value
            if key[0] == "requests":
                reasons = by_reason.get(key)
                if reasons is None:
                    reasons = by_reason[key] = {}
                reason = labels.get("finished_reason", "unknown")
                reasons[reason] = reasons.get(reason, 0.0) + value
    if run_count:
        shape[key] = shape.get(key, 0) + run_count

    chosen: dict[str, int] = {}
    for canonical, rank in shape:
        if rank < chosen.get(canonical, len(CANONICAL)):
            chosen[canonical] = rank
    if not chosen:
        raise ParseError("no vLLM engine metrics on the page (is --disable-log-stats set?)")

    def newest(table: dict) -> dict:
        return {canonical: value for (canonical, rank), value in table.items() if chosen[canonical] == rank}

    def wire_name(canonical: str) -> str:
        return CANONICAL[canonical][chosen[canonical]]

    doubtful = newest(doubts)
    engines_by_family = {canonical: seen for canonical, seen in newest(engines).items() if seen}
    _check_whole(newest(parts), newest(buckets), engines_by_family, doubtful, wire_name)
    gauge_values = {k: v for k, v in newest(gauges).items() if k not in doubtful}
    histogram_sums, histogram_counts = newest(sums), newest(counts)
    histograms = {}
    for canonical, family in newest(buckets).items():
        if canonical in doubtful or not family:
            continue
        if len(family) == 1:
            [summed] = family.values()
            bounds = tuple(sorted(summed))
            cumulative = tuple(summed[b] for b in bounds)
            falls = _falls(bounds, cumulative)
        else:
            summed = {}
            falls = None
            for engine, engine_counts in family.items():
                engine_bounds = sorted(engine_counts)
                falls = falls or _falls(engine_bounds, [engine_counts[b] for b in engine_bounds], engine)
                for edge, value in engine_counts.items():
                    summed[edge] = summed.get(edge, 0.0) + value
            bounds = tuple(sorted(summed))
            cumulative = tuple(summed[b] for b in bounds)
        if falls:
            raise IncompletePage(f"{wire_name(canonical)}: buckets fall at {falls}: page corrupt or cut short")
        if not bounds:
            continue
        histograms[canonical] = Histogram(
            bounds, cumulative, histogram_sums.get(canonical), histogram_counts.get(canonical)
        )

    def total(canonical: str) -> float | None:
        values = gauge_values.get(canonical)
        return sum(values.values()) if values else None

    family_shape = newest(shape)
    if config_labels:
        family_shape["cache_config"] = len(config_labels)
    if start_doubt:
        doubtful["start_time"] = start_doubt
    all_engines = set().union(*engines_by_family.values())
    return ReplicaSample(
        at=at,
        counters={k: v for k, v in newest(counters).items() if k not in doubtful},
        requests_by_reason={} if "requests" in doubtful else newest(by_reason).get("requests", {}),
        running=total("running"),
        waiting=total("waiting"),
        kv_usage_by_engine=dict(gauge_values.get("kv_usage", {})),
        kv_capacity_tokens=kv_capacity_tokens(config_labels),
        kv_capacity_tokens_by_engine=kv_capacity_tokens_by_engine(config_labels),
        histograms=histograms,
        start_time=process_start if process_start is not None else (min(created) if created else None),
        wire_names={canonical: wire_name(canonical) for canonical in chosen},
        model_names=tuple(sorted(models)),
        engines=tuple(sorted(all_engines)),
        shape=family_shape,
        doubtful=doubtful,
        checked=True,
    )


def _falls(bounds: Sequence[float], cumulative: Sequence[float], engine: str = "0") -> str:
    """Where cumulative bucket counts fall ("" when they never do): `le=0.5 (engine 0)`."""
    top = 0.0
    for bound, count in zip(bounds, cumulative):
        if count < top:
            return f"le={bound:g} (engine {engine})"
        top = count
    return ""


def _check_whole(
    parts: Mapping[str, Mapping[str, list[int]]],
    buckets: Mapping[str, Mapping[str, Mapping[float, float]]],
    engines: Mapping[str, set[str]],
    doubtful: Mapping[str, str],
    wire_name: Callable[[str], str],
) -> None:
    """Raise IncompletePage unless every histogram series is whole and every engine is in every family.

    A page cut at a line end keeps whole lines: what gives it away is a histogram series without
    its +Inf bucket, _count or _sum, or with fewer buckets than its +Inf ones call for, or a family
    that lacks an engine the page's other families have. (Buckets that fall, a count cut short or
    corrupt, are found where the histogram is built.)
    """
    for canonical, tally in parts.items():
        for engine, (lines, infinite, count_lines, sum_lines) in tally.items():
            if lines == 0 and infinite == 0:
                continue  # _count and _sum alone: not a histogram capcon reads (no buckets)
            per = buckets.get(canonical, {}).get(engine, {})
            if not infinite or not infinite == count_lines == sum_lines or lines != infinite * len(per):
                missing = (
                    "+Inf bucket"
                    if not infinite
                    else "_count"
                    if count_lines < infinite
                    else "_sum"
                    if sum_lines < infinite
                    else "buckets"
                )
                raise IncompletePage(
                    f"{wire_name(canonical)}: a series without its {missing} (engine {engine}): page cut short"
                )
    every = set().union(*engines.values()) if engines else set()
    for canonical, seen in engines.items():
        if seen != every:
            missing = listed(sorted(every - seen))
            raise IncompletePage(
                f"{wire_name(canonical)}: no series for engine {missing}, which the page's other families have: page cut short"
            )


_bounds: dict[str | None, float | None] = {}


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


def process_change(older: ReplicaSample, newer: ReplicaSample) -> str:
    """Why the process behind a replica is another one between two samples, in words; "" when nothing says so.

    Another process start time, another `model_name` (a 7B replaced by a 70B behind the same URL,
    whose counters may well be larger), another set of engines, or another KV cache size of an
    engine (cache_config_info is set once per process). Each is known only when both samples have it.
    """
    if older.start_time is not None and newer.start_time is not None and newer.start_time != older.start_time:
        return "new process start time"
    if older.model_names and newer.model_names and older.model_names != newer.model_names:
        return f"model {listed(older.model_names)} -> {listed(newer.model_names)}"
    if older.engines and newer.engines and older.engines != newer.engines:
        return f"engines {listed(older.engines)} -> {listed(newer.engines)}"
    for engine, tokens in older.kv_capacity_tokens_by_engine.items():
        later = newer.kv_capacity_tokens_by_engine.get(engine)
        if later is not None and later != tokens:
            return f"KV cache of engine {engine} {tokens:g} -> {later:g} tokens"
    return ""


def restart_reason(older: ReplicaSample, newer: ReplicaSample) -> str:
    """Why the process behind a replica changed between two samples, in words; "" when it did not."""
    changed = process_change(older, newer)
    if changed:
        return changed
    for canonical, value in older.counters.items():
        later = newer.counters.get(canonical)
        if later is not None and later < value:
            return f"{canonical} counter went down"
    for canonical, histogram in older.histograms.items():
        newer_histogram = newer.histograms.get(canonical)
        if (
            newer_histogram is not None
            and newer_histogram.count is not None
            and histogram.count is not None
            and newer_histogram.count < histogram.count
        ):
            return f"{canonical} count went down"
    return ""


def restarted(older: ReplicaSample, newer: ReplicaSample) -> bool:
    """True when the process behind a replica changed between two samples."""
    return bool(restart_reason(older, newer))


def cut_short(previous: ReplicaSample | None, sample: ReplicaSample) -> str:
    """Why `sample`'s page looks cut at a line end, in words; "" when it does not.

    The same process serves the same series on every page (vLLM creates them all at start), so a
    later page of it with fewer series of a family lost its end, however whole its lines look.
    Nothing is said across a change of process (see `process_change`): a new one may serve fewer.
    """
    if previous is None or not previous.shape or not sample.shape or process_change(previous, sample):
        return ""
    for canonical, count in previous.shape.items():
        now = sample.shape.get(canonical, 0)
        if now < count:
            name = CACHE_CONFIG if canonical == "cache_config" else previous.wire_names.get(canonical, canonical)
            return f"{name}: {now} of the {count} series this replica served before: page cut short"
    return ""


def vet_sample(sample: ReplicaSample) -> ReplicaSample:
    """`sample` held to the impossible-value rule (for samples from elsewhere: a recording).

    Samples read from a page by `sample_from_samples` are held to it already and come back as they are.
    """
    if sample.checked:
        return sample
    doubts: dict[str, str] = {}
    counters = {}
    for canonical, value in sample.counters.items():
        reason = impossible(value)
        if reason:
            doubts[canonical] = f"{canonical} {reason}"
        else:
            counters[canonical] = value
    by_reason = dict(sample.requests_by_reason)
    bad_reason = next((r for r, v in by_reason.items() if impossible(v)), None)
    if bad_reason is not None:
        doubts.setdefault("requests", f"requests ({bad_reason}) {impossible(by_reason[bad_reason])}")
        counters.pop("requests", None)
        by_reason = {}
    gauges = {}
    for canonical in ("running", "waiting"):
        value = getattr(sample, canonical)
        reason = impossible(value) if value is not None else ""
        if reason:
            doubts[canonical] = f"{canonical} {reason}"
        gauges[canonical] = None if reason else value
    kv = dict(sample.kv_usage_by_engine)
    for engine, value in sorted(kv.items()):
        reason = impossible(value, share=True)
        if reason:
            doubts["kv_usage"] = f"kv_usage (engine {engine}) {reason}"
            kv = {}
            break
        kv[engine] = min(value, 1.0)
    capacity = dict(sample.kv_capacity_tokens_by_engine)
    total = sample.kv_capacity_tokens
    bad_capacity = next((impossible(v) for v in [*capacity.values(), total] if v is not None and impossible(v)), "")
    if bad_capacity:
        doubts["kv_capacity"] = f"kv_capacity_tokens {bad_capacity}"
        capacity, total = {}, None
    histograms = {}
    for canonical, histogram in sample.histograms.items():
        reason = _histogram_doubt(histogram)
        if reason:
            doubts[canonical] = f"{canonical} {reason}"
        else:
            histograms[canonical] = histogram
    start = sample.start_time
    if start is not None and impossible(start):
        doubts["start_time"] = f"start_time {impossible(start)}"
        start = None
    if not doubts:
        return replace(sample, checked=True)
    return replace(
        sample,
        counters=counters,
        requests_by_reason=by_reason,
        kv_usage_by_engine=kv,
        kv_capacity_tokens=total,
        kv_capacity_tokens_by_engine=capacity,
        histograms=histograms,
        start_time=start,
        doubtful={**sample.doubtful, **doubts},
        checked=True,
        running=gauges["running"],
        waiting=gauges["waiting"],
    )


def _histogram_doubt(histogram: Histogram) -> str:
    if len(histogram.bounds) != len(histogram.counts) or any(b != b for b in histogram.bounds):
        return "has unreadable buckets"
    top = 0.0
    for count in histogram.counts:
        reason = impossible(count)
        if reason:
            return f"bucket {reason}"
        if count < top:
            return "buckets fall"
        top = count
    for part, value in (("_sum", histogram.sum), ("_count", histogram.count)):
        if value is not None and impossible(value):
            return f"{part} {impossible(value)}"
    return ""
