"""PromQL for the `prometheus` source and the rule files: the same per-replica figures as the scrape path.

Pure string building, no I/O. Each refresh sends a fixed set of queries whatever
the fleet size (`refresh_queries`: six; past `DETAIL_ALL_REPLICAS`, eight in two
rounds); each query packs several figures, told apart by a `capcon_figure` label
added with `label_replace`.

Names come from the one table in `console.metrics.vllm`. Every wire name is
tried in both spellings, `vllm:x` and `vllm_x` (an OpenMetrics scrape may have
rewritten the colon), newest name first, joined with `or` at the series level:
`or` keeps a series of the right-hand side only when no series with the same
labels is on the left, so a server exposing an old and a new name for the same
figure is counted once, and a fleet mixing versions gets every replica. A regex
`__name__` selector would not do: two spellings inside one `rate()` collide once
the name is dropped ("vector cannot contain metrics with the same labelset").

Replicas are Prometheus' `instance` label; data-parallel engines are summed by
instance, KV usage is kept per (instance, engine).

A fleet larger than `DETAIL_ALL_REPLICAS` gets the top-k view (`overview_queries`, then
`detail_queries`): every replica's state and gauges, the fleet's rates, sizes and
percentiles as aggregates over all of them (exact), and the per-replica rates and
percentiles only for the replicas the console shows first: the top and bottom
`DETAIL_PER_FIGURE` by each figure, picked by Prometheus (`topk`/`bottomk`), and a few
chosen by the source (the first names, the most loaded).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from console.errors import UserError
from console.metrics.vllm import CACHE_CONFIG, COUNTERS, GAUGES, HISTOGRAMS
from console.metrics.window import QUANTILE_FIGURES

FIGURE_LABEL = "capcon_figure"
# Up to this many replicas every replica's figures come each refresh (`refresh_queries`); more: the top-k view.
DETAIL_ALL_REPLICAS = 500
DETAIL_PER_FIGURE = 10  # replicas picked at each end of each figure (topk and bottomk)
PICK = "pick"  # the capcon_figure of the picks' answer

# Histogram families whose _sum / _count rates give the mean request sizes.
MEAN_FIGURES = (("mean_input_tokens", "prompt_length"), ("mean_output_tokens", "output_length"))

_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def selector_matchers(selector: str | None, named: str = "--selector") -> str:
    """`job="vllm", env=~"prod|canary"` (braces optional) -> the text inside the braces.

    Raises UserError for anything that is not a comma-separated list of label matchers (`named`: the
    option it came from, as the message names it).
    """
    text = (selector or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text:
        return ""
    position = 0
    matchers = []
    while True:
        found = _MATCHER.match(text, position)
        if not found:
            raise UserError(
                f"{named} {selector!r}: not a Prometheus label selector at character {position + 1}; "
                'expected matchers like job="vllm", namespace=~"prod-.*"'
            )
        matchers.append(found.group(0).strip())
        position = found.end()
        if position == len(text):
            return ", ".join(matchers)
        if text[position] != ",":
            raise UserError(
                f"{named} {selector!r}: expected a comma at character {position + 1}; "
                'matchers look like job="vllm", namespace=~"prod-.*"'
            )
        position += 1
        if position == len(text):  # a trailing comma is valid PromQL
            return ", ".join(matchers)


def duration(seconds: float) -> str:
    """A PromQL range: whole seconds as `10s`, else milliseconds (`1500ms`)."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise UserError(f"window {seconds!r}: expected a positive number of seconds")
    milliseconds = round(seconds * 1000)
    if milliseconds % 1000 == 0:
        return f"{milliseconds // 1000}s"
    return f"{max(milliseconds, 1)}ms"


def spellings(names: Iterable[str]) -> list[str]:
    """Each wire name as vLLM writes it and as an OpenMetrics scrape may rewrite it, newest first."""
    out: list[str] = []
    for name in names:
        out.append(name)
        if name.startswith("vllm:"):
            out.append("vllm_" + name[len("vllm:") :])
    return out


def series(name: str, matchers: str) -> str:
    return f"{name}{{{matchers}}}" if matchers else name


def first_present(expressions: Iterable[str]) -> str:
    """`a or b or c`: per label set, the first expression that has it."""
    return "(" + " or ".join(expressions) + ")"


def rate_of(names: Iterable[str], matchers: str, window: str, suffix: str = "", function: str = "rate") -> str:
    return first_present(f"{function}({series(name + suffix, matchers)}[{window}])" for name in spellings(names))


def instant_of(names: Iterable[str], matchers: str) -> str:
    return first_present(series(name, matchers) for name in spellings(names))


def tagged(expression: str, figure: str) -> str:
    """Label every series of `expression` with capcon_figure=`figure`."""
    return f'label_replace({expression}, "{FIGURE_LABEL}", "{figure}", "", "")'


def union(expressions: Iterable[str]) -> str:
    """Tagged expressions side by side in one answer (their tags keep them apart)."""
    return " or ".join(expressions)


def up_query(matchers: str) -> str:
    """Prometheus' own view of each target: `up` (1 or 0) and when it last scraped it, by instance only
    (a Kubernetes target carries a dozen labels more: at 10,000 replicas they were most of the answer)."""
    return union(
        [
            tagged(f"max by (instance) ({series('up', matchers)})", "up"),
            tagged(f"max by (instance) (timestamp({series('up', matchers)}))", "scraped_at"),
        ]
    )


def rates_query(matchers: str, window: str) -> str:
    """Per-instance rates of every counter (engines summed), by finished reason, and the
    rates of the request-size histograms' _sum and _count (for mean sizes)."""
    parts = [
        tagged(f"sum by (instance) ({rate_of(names, matchers, window)})", canonical)
        for canonical, names in COUNTERS.items()
    ]
    parts.append(
        tagged(
            f"sum by (instance, finished_reason) ({rate_of(COUNTERS['requests'], matchers, window)})",
            "requests_by_reason",
        )
    )
    for _field, canonical in MEAN_FIGURES:
        for suffix in ("_sum", "_count"):
            expression = rate_of(HISTOGRAMS[canonical], matchers, window, suffix)
            parts.append(tagged(f"sum by (instance) ({expression})", canonical + suffix))
    # A counter that went down inside the window: the replica restarted.
    resets = rate_of(COUNTERS["prompt_tokens"], matchers, window, function="resets")
    parts.append(tagged(f"sum by (instance) ({resets})", "resets"))
    return union(parts)


def gauges_query(matchers: str) -> str:
    """Running and waiting summed over engines; KV usage per (instance, engine)."""
    return union(
        [
            tagged(f"sum by (instance) ({instant_of(GAUGES['running'], matchers)})", "running"),
            tagged(f"sum by (instance) ({instant_of(GAUGES['waiting'], matchers)})", "waiting"),
            tagged(f"max by (instance, engine) ({instant_of(GAUGES['kv_usage'], matchers)})", "kv_usage"),
        ]
    )


# The labels of `cache_config_info` KV capacity is read from (console.metrics.vllm): the info
# series carries some forty more, ~1.3 KB per engine, that only swell the answer.
CACHE_CONFIG_LABELS = ("instance", "engine", "kv_cache_size_tokens", "num_gpu_blocks", "block_size")


def cache_config_query(matchers: str) -> str:
    """`cache_config_info`'s capacity labels by instance and engine: KV capacity comes from them, outside PromQL."""
    return f"max by ({', '.join(CACHE_CONFIG_LABELS)}) ({instant_of((CACHE_CONFIG,), matchers)})"


def quantiles_query(matchers: str, window: str, by: str = "instance") -> str:
    """`histogram_quantile` of every latency figure over bucket rates summed `by (instance, le)`,
    or `by (le)` for the fleet (`by=""`): fleet quantiles merge buckets, never average quantiles."""
    grouping = f"{by}, le" if by else "le"
    parts = []
    for field_name, canonical, q in QUANTILE_FIGURES:
        buckets = rate_of(HISTOGRAMS[canonical], matchers, window, "_bucket")
        parts.append(tagged(f"histogram_quantile({q:g}, sum by ({grouping}) ({buckets}))", field_name))
    return union(parts)


def refresh_queries(matchers: str, window_seconds: float) -> dict[str, str]:
    """The fixed set of queries one refresh sends, by purpose."""
    window = duration(window_seconds)
    return {
        "up": up_query(matchers),
        "rates": rates_query(matchers, window),
        "gauges": gauges_query(matchers),
        "cache_config": cache_config_query(matchers),
        "quantiles": quantiles_query(matchers, window),
        "fleet_quantiles": quantiles_query(matchers, window, by=""),
    }


# --- the top-k view of a large fleet ---------------------------------------------------------


def per_instance_figures(matchers: str, window: str) -> dict[str, str]:
    """Each per-replica figure the console sorts on, as an expression by instance (the picks rank them)."""
    figures = {
        field_name: f"sum by (instance) ({rate_of(COUNTERS[canonical], matchers, window)})"
        for field_name, canonical in (
            ("requests_per_second", "requests"),
            ("prompt_tokens_per_second", "prompt_tokens"),
            ("generation_tokens_per_second", "generation_tokens"),
            ("preemptions_per_second", "preemptions"),
            ("rejections_per_second", "admission_rejections"),
        )
    }
    hits = f"sum by (instance) ({rate_of(COUNTERS['prefix_cache_hits'], matchers, window)})"
    queries = f"sum by (instance) ({rate_of(COUNTERS['prefix_cache_queries'], matchers, window)})"
    figures["prefix_hit_share"] = f"({hits} / {queries})"
    for field_name, canonical in MEAN_FIGURES:
        total = f"sum by (instance) ({rate_of(HISTOGRAMS[canonical], matchers, window, '_sum')})"
        count = f"sum by (instance) ({rate_of(HISTOGRAMS[canonical], matchers, window, '_count')})"
        figures[field_name] = f"({total} / {count})"
    for field_name, canonical, q in QUANTILE_FIGURES:
        buckets = rate_of(HISTOGRAMS[canonical], matchers, window, "_bucket")
        figures[field_name] = f"histogram_quantile({q:g}, sum by (instance, le) ({buckets}))"
    return figures


def picks_query(matchers: str, window: str, k: int = DETAIL_PER_FIGURE) -> str:
    """The instances at each end of each figure, once each: `or` keeps one series per label set."""
    parts = []
    for expression in per_instance_figures(matchers, window).values():
        parts.append(tagged(f"topk({k}, {expression})", PICK))
        parts.append(tagged(f"bottomk({k}, {expression})", PICK))
    return union(parts)


def fleet_query(matchers: str, window: str) -> str:
    """The fleet's rates (by finished reason too) and request-size sums, summed over every replica by Prometheus."""
    parts = [tagged(f"sum({rate_of(names, matchers, window)})", canonical) for canonical, names in COUNTERS.items()]
    parts.append(
        tagged(
            f"sum by (finished_reason) ({rate_of(COUNTERS['requests'], matchers, window)})",
            "requests_by_reason",
        )
    )
    for _field, canonical in MEAN_FIGURES:
        for suffix in ("_sum", "_count"):
            parts.append(tagged(f"sum({rate_of(HISTOGRAMS[canonical], matchers, window, suffix)})", canonical + suffix))
    return union(parts)


def flag_gauges_query(matchers: str, window: str) -> str:
    """`gauges_query` and, for the replicas where they are not zero, preemptions and counter resets.

    What the flags read of every replica (saturation: waiting, KV and preemptions; a restart),
    sent for all of them while the other rates come for the picked ones only.
    """
    preemptions = f"sum by (instance) ({rate_of(COUNTERS['preemptions'], matchers, window)}) > 0"
    resets = f"sum by (instance) ({rate_of(COUNTERS['prompt_tokens'], matchers, window, function='resets')}) > 0"
    return union([gauges_query(matchers), tagged(preemptions, "preemptions"), tagged(resets, "resets")])


def overview_queries(matchers: str, window_seconds: float) -> dict[str, str]:
    """The first round of a large fleet's refresh: every replica's state and gauges, fleet aggregates, the picks."""
    window = duration(window_seconds)
    return {
        "up": up_query(matchers),
        "gauges": flag_gauges_query(matchers, window),
        "cache_config": cache_config_query(matchers),
        "fleet_quantiles": quantiles_query(matchers, window, by=""),
        "fleet": fleet_query(matchers, window),
        "picks": picks_query(matchers, window),
    }


def instance_matcher(instances: Iterable[str]) -> str:
    """`instance=~"..."` matching exactly these instances (RE2 metacharacters and the string's escapes quoted)."""
    alternatives = "|".join(_regex_literal(name) for name in sorted(set(instances)))
    return f'instance=~"{_string_literal(alternatives)}"'


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _regex_literal(text: str) -> str:
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def _string_literal(text: str) -> str:
    """`text` inside a PromQL double-quoted string: backslash, quote and control characters escaped."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out)


def restricted(query: str, matchers: str, instances: Iterable[str]) -> str:
    """`query`'s series of these instances only: the matcher is written once, whatever the query's size."""
    chosen = ", ".join(m for m in (matchers, instance_matcher(instances)) if m)
    return f"({query}) and on (instance) max by (instance) (up{{{chosen}}})"


def detail_queries(matchers: str, window_seconds: float, instances: Iterable[str] | None) -> dict[str, str]:
    """The second round: per-replica rates and percentiles, of `instances` only (None: of every replica)."""
    queries = refresh_queries(matchers, window_seconds)
    chosen = {"rates": queries["rates"], "quantiles": queries["quantiles"]}
    if instances is None:
        return chosen
    names = tuple(instances)
    return {purpose: restricted(query, matchers, names) for purpose, query in chosen.items()}


# --- the GPUs' own counters: dcgm-exporter's series, read through the same Prometheus --------

# The fields the console shows per replica (console.fleet.gpu_view), and GPU_UTIL beside them.
DCGM_FIELDS = (
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_GPU_UTIL",
)
# The labels a GPU is known and paired by (console.metrics.dcgm); a dcgm-exporter series carries a dozen
# more (driver version, PCI bus, device) that only swell the answer. `exported_*`: the page's own pod labels
# where the scrape's Kubernetes discovery added the exporter's pod under the same names (honor_labels off).
DCGM_LABELS = (
    "__name__",
    "instance",
    "UUID",
    "gpu",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "modelName",
    "Hostname",
    "hostname",
    "pod",
    "namespace",
    "container",
    "exported_pod",
    "exported_namespace",
    "exported_container",
)
# The labels Kubernetes service discovery's relabelling commonly gives a replica's series: its pod and
# namespace (kube-prometheus' names first, the older example configuration's after).
REPLICA_POD_LABELS = ("pod", "namespace", "kubernetes_pod_name", "kubernetes_namespace")


def dcgm_query(matchers: str) -> str:
    """Every GPU's counters the console reads, with the labels that pair them: one instant query."""
    chosen = ", ".join(m for m in (f'__name__=~"{"|".join(DCGM_FIELDS)}"', matchers) if m)
    return f"max by ({', '.join(DCGM_LABELS)}) ({{{chosen}}})"


def replica_pods_query(matchers: str) -> str:
    """Each replica (`instance`) with the pod labels its targets carry, where they carry any."""
    return f"max by (instance, {', '.join(REPLICA_POD_LABELS)}) ({series('up', matchers)})"
