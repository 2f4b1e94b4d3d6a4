"""PromQL for the `prometheus` source: the same per-replica figures as the scrape path.

Pure string building, no I/O. Each refresh sends the same six queries whatever
the fleet size (`refresh_queries`); each query packs several figures, told apart
by a `capcon_figure` label added with `label_replace`.

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from console.errors import UserError
from console.metrics.vllm import CACHE_CONFIG, COUNTERS, GAUGES, HISTOGRAMS
from console.metrics.window import QUANTILE_FIGURES

FIGURE_LABEL = "capcon_figure"

# Histogram families whose _sum / _count rates give the mean request sizes.
MEAN_FIGURES = (("mean_input_tokens", "prompt_length"), ("mean_output_tokens", "output_length"))

_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*')


def selector_matchers(selector: str | None) -> str:
    """`job="vllm", env=~"prod|canary"` (braces optional) -> the text inside the braces.

    Raises UserError for anything that is not a comma-separated list of label matchers.
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
                f"--selector {selector!r}: not a Prometheus label selector at character {position + 1}; "
                'expected matchers like job="vllm", namespace=~"prod-.*"'
            )
        matchers.append(found.group(0).strip())
        position = found.end()
        if position == len(text):
            return ", ".join(matchers)
        if text[position] != ",":
            raise UserError(
                f"--selector {selector!r}: expected a comma at character {position + 1}; "
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
    """Prometheus' own view of each target: `up` (1 or 0) and when it last scraped it."""
    return union(
        [
            tagged(series("up", matchers), "up"),
            tagged(f"timestamp({series('up', matchers)})", "scraped_at"),
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
