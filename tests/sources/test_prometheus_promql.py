"""PromQL building for the `prometheus` source: selectors, ranges, both spellings, a fixed query set."""

from __future__ import annotations

import re

import pytest

from console.errors import UserError
from console.metrics.vllm import CACHE_CONFIG, COUNTERS, GAUGES, HISTOGRAMS
from console.metrics.window import QUANTILE_FIGURES
from console.sources import promql


@pytest.mark.parametrize(
    "selector, expected",
    [
        ("", ""),
        (None, ""),
        ('job="vllm"', 'job="vllm"'),
        ('{job="vllm"}', 'job="vllm"'),
        ('  { job = "vllm" , env=~"prod|canary" }  ', 'job = "vllm", env=~"prod|canary"'),
        ('job!="x",instance!~"10\\\\..*"', 'job!="x", instance!~"10\\\\..*"'),
        ('model_name="say \\"hi\\""', 'model_name="say \\"hi\\""'),
        ('job="vllm",', 'job="vllm"'),
    ],
)
def test_selector_matchers_accepts_label_matchers(selector, expected):
    assert promql.selector_matchers(selector) == expected


@pytest.mark.parametrize(
    "selector, where",
    [
        ("job=vllm", "character 1"),
        ('job="vllm" env="x"', "expected a comma at character 12"),
        ('job="vllm"}', "character"),
        ('1job="x"', "character 1"),
        ('job="vllm",,env="x"', "character 12"),
        ('job=="x"', "character 1"),
    ],
)
def test_selector_matchers_rejects_anything_else_with_one_line(selector, where):
    with pytest.raises(UserError) as caught:
        promql.selector_matchers(selector)
    message = str(caught.value)
    assert repr(selector) in message and where in message and "expected" in message
    assert "\n" not in message


@pytest.mark.parametrize("seconds, text", [(10, "10s"), (60.0, "60s"), (1.5, "1500ms"), (0.25, "250ms"), (300, "300s")])
def test_duration(seconds, text):
    assert promql.duration(seconds) == text


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf")])
def test_duration_rejects_non_positive(seconds):
    with pytest.raises(UserError, match="expected a positive number of seconds"):
        promql.duration(seconds)


def test_spellings_keep_newest_first_and_add_the_escaped_form():
    assert promql.spellings(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")) == [
        "vllm:kv_cache_usage_perc",
        "vllm_kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm_gpu_cache_usage_perc",
    ]


def _balanced(text: str) -> bool:
    depth = 0
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', text):
        depth += {"(": 1, ")": -1, "{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def test_refresh_sends_the_same_six_queries_whatever_the_fleet():
    queries = promql.refresh_queries('job="vllm"', 60)
    assert list(queries) == ["up", "rates", "gauges", "cache_config", "quantiles", "fleet_quantiles"]
    for query in queries.values():
        assert _balanced(query), query
        assert "instance=" not in query  # nothing names a replica: one query covers the fleet


def test_every_series_selector_carries_the_fleet_selector():
    queries = promql.refresh_queries('job="vllm", env="prod"', 10)
    for query in queries.values():
        selectors = re.findall(r'(?<![\w:"])((?:vllm[:_]|up\b)[\w:]*)(\{[^}]*\})?', query)
        assert selectors, query
        for name, matchers in selectors:
            assert matchers == '{job="vllm", env="prod"}', (name, query)


def test_every_name_in_the_table_is_queried_in_both_spellings_newest_first():
    queries = promql.refresh_queries("", 10)
    where = {
        "rates": list(COUNTERS.values()) + [HISTOGRAMS["prompt_length"], HISTOGRAMS["output_length"]],
        "gauges": list(GAUGES.values()),
        "cache_config": [(CACHE_CONFIG,)],
        "quantiles": [HISTOGRAMS[canonical] for _f, canonical, _q in QUANTILE_FIGURES],
        "fleet_quantiles": [HISTOGRAMS[canonical] for _f, canonical, _q in QUANTILE_FIGURES],
    }
    for purpose, families in where.items():
        query = queries[purpose]
        for names in families:
            positions = [query.find(name) for name in promql.spellings(names)]
            assert all(p >= 0 for p in positions), (purpose, names)
            assert positions == sorted(positions), (purpose, names)


def test_old_names_are_fallbacks_joined_with_or_so_nothing_counts_twice():
    gauges = promql.gauges_query("")
    assert (
        "max by (instance, engine) ((vllm:kv_cache_usage_perc or vllm_kv_cache_usage_perc "
        "or vllm:gpu_cache_usage_perc or vllm_gpu_cache_usage_perc))"
    ) in gauges
    rates = promql.rates_query("", "1m")
    assert "rate(vllm:inter_token_latency_seconds_bucket" not in rates
    assert (
        "(rate(vllm:prefix_cache_hits_total[1m]) or rate(vllm_prefix_cache_hits_total[1m]) or rate(vllm:gpu_prefix_cache_hits_total[1m])"
        in rates
    )


def test_quantiles_merge_buckets_by_instance_or_for_the_whole_fleet():
    per_instance = promql.quantiles_query("", "30s")
    fleet = promql.quantiles_query("", "30s", by="")
    assert per_instance.count("histogram_quantile(") == len(QUANTILE_FIGURES)
    assert (
        "histogram_quantile(0.95, sum by (instance, le) ((rate(vllm:time_to_first_token_seconds_bucket[30s])"
        in per_instance
    )
    assert "histogram_quantile(0.95, sum by (le) ((rate(vllm:time_to_first_token_seconds_bucket[30s])" in fleet
    assert "time_per_output_token_seconds_bucket[30s]" in fleet  # ITL before 0.10.2
    for field_name, _canonical, _q in QUANTILE_FIGURES:
        assert f'"{promql.FIGURE_LABEL}", "{field_name}"' in per_instance


def test_created_series_are_never_selected():
    for query in promql.refresh_queries("", 10).values():
        assert "_created" not in query
        assert "__name__" not in query  # exact names only: no regex that could catch _created


def test_cache_config_asks_only_for_the_labels_kv_capacity_is_read_from():
    """cache_config_info carries some forty labels (1.3 KB per engine): at 10,000 replicas that
    answer alone was 13.5 MB against 1.5 MB for the labels capcon reads."""
    query = promql.cache_config_query('job="vllm"')
    assert query == (
        "max by (instance, engine, kv_cache_size_tokens, num_gpu_blocks, block_size) "
        '((vllm:cache_config_info{job="vllm"} or vllm_cache_config_info{job="vllm"}))'
    )
    from console.metrics.vllm import kv_capacity_tokens

    labels = dict.fromkeys(promql.CACHE_CONFIG_LABELS, "16")
    assert kv_capacity_tokens([labels]) == 16.0  # what the answer keeps is enough
