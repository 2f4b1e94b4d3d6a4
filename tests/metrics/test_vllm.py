"""vLLM names across versions and engines: a parsed page becomes one ReplicaSample."""

from __future__ import annotations

import pytest

from console.metrics.exposition import ParseError, parse
from console.metrics.vllm import CANONICAL, FAMILIES, HISTOGRAMS, IncompletePage, restarted, sample_from_page

from .pages import (
    V010,
    V032_IDLE,
    V032_SMALL_KV,
    V08_CACHE_CONFIG,
    V08_MODEL_NAME_ONLY,
    advance,
    data_parallel,
    relabel,
    sample_text,
    whole_window,
)


def sample_of(text: str, at: float = 100.0):
    return sample_from_page(parse(text), at)


# Real pages: what each one says, figure by figure.
REAL_CASES = [
    (
        V032_SMALL_KV,
        {
            "counters": {
                "requests": 33.0,
                "prompt_tokens": 5285.0,
                "generation_tokens": 3936.0,
                "preemptions": 0.0,
                "prefix_cache_queries": 5285.0,
                "prefix_cache_hits": 0.0,
                "admission_rejections": 0.0,
            },
            "requests_by_reason": {"stop": 0.0, "length": 33.0, "abort": 0.0, "error": 0.0, "repetition": 0.0},
            "running": 0.0,
            "waiting": 0.0,
            "kv_usage_by_engine": {"0": 0.0},
            "kv_capacity_tokens": 2048.0,  # kv_cache_size_tokens, = 16 blocks x 128
            "start_time": 1795997183.25,
        },
    ),
    (
        V032_IDLE,
        {"kv_capacity_tokens": 1048576.0, "start_time": 1795997027.36, "running": 0.0},
    ),
    (
        V010,
        {
            # New name for queries; only the deprecated name for hits is in this excerpt.
            "counters": {"prefix_cache_queries": 32.0, "prefix_cache_hits": 0.0},
            "kv_usage_by_engine": {"0": 9.75010481363281e-06},
            "running": None,
            "kv_capacity_tokens": None,
            "start_time": None,
        },
    ),
    (
        V08_MODEL_NAME_ONLY,
        {
            # No engine label (V1 <= 0.8.1) and the old KV name.
            "kv_usage_by_engine": {"0": 0.0},
            "running": 0.0,
            "waiting": 0.0,
            "start_time": 1742624005.57,
        },
    ),
]


@pytest.mark.parametrize("name,expected", REAL_CASES, ids=[c[0] for c in REAL_CASES])
def test_real_pages(name, expected):
    sample = sample_of(whole_window(name))
    for attribute, value in expected.items():
        got = getattr(sample, attribute)
        assert (dict(got) if isinstance(value, dict) else got) == value, attribute


def test_wire_names_record_which_spelling_was_read():
    assert dict(sample_of(whole_window(V010)).wire_names) == {
        "prefix_cache_queries": "vllm:prefix_cache_queries_total",
        "prefix_cache_hits": "vllm:gpu_prefix_cache_hits_total",
        "kv_usage": "vllm:kv_cache_usage_perc",
    }
    assert sample_of(sample_text(V08_MODEL_NAME_ONLY)).wire_names["kv_usage"] == "vllm:gpu_cache_usage_perc"


def test_histograms_of_the_032_page():
    sample = sample_of(sample_text(V032_SMALL_KV))
    ttft = sample.histograms["ttft"]
    assert ttft.count == 33.0 and ttft.counts[-1] == 33.0
    assert ttft.bounds[-1] == float("inf") and list(ttft.bounds) == sorted(ttft.bounds)
    assert set(sample.histograms) == set(HISTOGRAMS)
    assert sample.wire_names["itl"] == "vllm:inter_token_latency_seconds"


def test_an_excerpt_that_starts_inside_a_histogram_is_an_incomplete_page():
    # The 0.10 excerpt's second window has buckets of request_generation_tokens but no +Inf, _count or _sum.
    with pytest.raises(IncompletePage, match="vllm:request_generation_tokens"):
        sample_of(sample_text(V010))


def test_page_without_engine_metrics_is_a_parse_error():
    with pytest.raises(ParseError):
        sample_of(sample_text(V08_CACHE_CONFIG))
    with pytest.raises(ParseError):
        sample_of("# only http\nhttp_requests_total 3\n")


TWO_ENGINES = """\
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 50.0
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.9
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 0.2
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="100"} 1.0
"""


def test_data_parallel_engines_are_summed_and_kv_is_kept_per_engine():
    sample = sample_of(TWO_ENGINES)
    assert sample.counters["prompt_tokens"] == 150.0
    assert sample.running == 7.0 and sample.waiting == 1.0
    assert dict(sample.kv_usage_by_engine) == {"0": 0.25, "1": 0.75}
    ttft = sample.histograms["ttft"]
    assert ttft.bounds == (0.1, float("inf")) and ttft.counts == (7.0, 8.0)
    assert ttft.count == 8.0 and ttft.sum == pytest.approx(1.1)
    assert sample.kv_capacity_tokens == 3200.0


def test_multiprocess_order_reads_the_same():
    lines = TWO_ENGINES.splitlines()
    # All _sum and _count lines first, buckets last, engines interleaved.
    reordered = sorted(lines, key=lambda line: ("_bucket" in line, line.split("{")[1]))
    assert sample_of("\n".join(reordered) + "\n") == sample_of(TWO_ENGINES)


def test_old_and_new_names_together_are_not_counted_twice():
    text = """\
vllm:gpu_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:gpu_prefix_cache_hits_total{engine="0"} 40.0
vllm:prefix_cache_hits_total{engine="0"} 40.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf"} 9.0
vllm:time_per_output_token_seconds_count{engine="0"} 9.0
vllm:time_per_output_token_seconds_sum{engine="0"} 1.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf"} 9.0
vllm:inter_token_latency_seconds_count{engine="0"} 9.0
vllm:inter_token_latency_seconds_sum{engine="0"} 1.0
"""
    sample = sample_of(text)
    assert sample.counters["prefix_cache_hits"] == 40.0
    assert dict(sample.kv_usage_by_engine) == {"0": 0.5}
    assert sample.histograms["itl"].counts == (9.0,)
    assert sample.wire_names["itl"] == "vllm:inter_token_latency_seconds"


def test_a_deprecated_name_that_reads_zero_does_not_hide_the_live_one():
    # The newest spelling wins even when it comes after the old one.
    text = 'vllm:gpu_cache_usage_perc{engine="0"} 0.0\nvllm:kv_cache_usage_perc{engine="0"} 0.9\n'
    assert dict(sample_of(text).kv_usage_by_engine) == {"0": 0.9}


def test_old_itl_name_alone_still_gives_itl():
    sample = sample_of(
        'vllm:time_per_output_token_seconds_bucket{le="0.1"} 2.0\nvllm:time_per_output_token_seconds_bucket{le="+Inf"} 4.0\n'
        "vllm:time_per_output_token_seconds_count 4.0\nvllm:time_per_output_token_seconds_sum 0.3\n"
    )
    assert sample.histograms["itl"].counts == (2.0, 4.0)


def test_duplicate_series_keep_the_first_and_are_counted():
    text = 'vllm:prompt_tokens_total{engine="0"} 10.0\nvllm:prompt_tokens_total{engine="0"} 99.0\n'
    sample = sample_of(text)
    assert sample.counters["prompt_tokens"] == 10.0 and sample.duplicates == 1


def test_nan_gauges_are_unknown_not_zero():
    text = (
        'vllm:num_requests_running{engine="0"} NaN\nvllm:num_requests_running{engine="1"} 2\n'
        'vllm:kv_cache_usage_perc{engine="0"} NaN\nvllm:kv_cache_usage_perc{engine="1"} 0.4\n'
    )
    sample = sample_of(text)
    assert sample.running is None  # not engine 1's 2: a sum with an engine unknown is unknown
    # One engine's KV unknown: the replica's KV (the max over engines) is unknown, not engine 1's 0.4.
    assert dict(sample.kv_usage_by_engine) == {}
    assert set(sample.doubtful) == {"running", "kv_usage"} and "NaN" in sample.doubtful["kv_usage"]


def test_multiprocess_pid_label_on_kv_keeps_the_max_per_engine():
    text = 'vllm:kv_cache_usage_perc{engine="0",pid="11"} 0.2\nvllm:kv_cache_usage_perc{engine="0",pid="12"} 0.6\n'
    assert dict(sample_of(text).kv_usage_by_engine) == {"0": 0.6}


@pytest.mark.parametrize(
    "labels,expected",
    [
        ('block_size="16",num_gpu_blocks="1000"', 16000.0),
        ('block_size="16",num_gpu_blocks="1000",kv_cache_size_tokens="12345"', 12345.0),  # 0.33: hybrid models
        ('block_size="16",num_gpu_blocks="None"', None),  # the 0.8.x bug
        ('block_size="16"', None),
    ],
)
def test_kv_capacity_from_cache_config_info(labels, expected):
    text = f"vllm:num_requests_running 0\nvllm:cache_config_info{{{labels}}} 1.0\n"
    assert sample_of(text).kv_capacity_tokens == expected


CONFIG = "vllm:cache_config_info"
BEFORE_033 = {"kv_cache_size_tokens": "None", "num_gpu_blocks": "14000", "block_size": "16"}  # blocks x block size


def two_engine_page(engine0: dict[str, str], engine1: dict[str, str]) -> str:
    """The real 0.32 page as a two-engine data-parallel server, each engine's cache config relabelled."""
    text = data_parallel(sample_text(V032_SMALL_KV), 2)
    text = relabel(text, CONFIG, 'engine="0"', **engine0)
    return relabel(text, CONFIG, 'engine="1"', **engine1)


@pytest.mark.parametrize(
    "engine0,engine1,by_engine,total",
    [
        pytest.param(BEFORE_033, BEFORE_033, {"0": 224_000.0, "1": 224_000.0}, 448_000.0, id="equal engines"),
        pytest.param(
            {}, {"kv_cache_size_tokens": "4096"}, {"0": 2048.0, "1": 4096.0}, 6144.0, id="kept apart per engine label"
        ),
        pytest.param(
            BEFORE_033,
            {**BEFORE_033, "num_gpu_blocks": "None"},
            {"0": 224_000.0},
            None,
            id="one engine without a figure",
        ),
    ],
)
def test_kv_capacity_is_kept_per_engine(engine0, engine1, by_engine, total):
    sample = sample_of(two_engine_page(engine0, engine1))
    assert dict(sample.kv_capacity_tokens_by_engine) == by_engine
    assert sample.kv_capacity_tokens == total


def test_kv_capacity_of_a_single_engine_page_is_keyed_by_its_engine():
    assert dict(sample_of(sample_text(V032_SMALL_KV)).kv_capacity_tokens_by_engine) == {"0": 2048.0}
    # No engine label (before 0.9): the one engine is "0", as for KV usage.
    text = 'vllm:num_requests_running 0\nvllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1.0\n'
    assert dict(sample_of(text).kv_capacity_tokens_by_engine) == {"0": 16000.0}


def test_cache_config_repeated_for_one_engine_counts_once():
    # Multiprocess mode may write one series per process (a `pid` label) for the same engine.
    line = next(row for row in sample_text(V032_SMALL_KV).splitlines() if row.startswith(CONFIG + "{"))
    text = "\n".join(
        [
            line.replace("{", '{pid="11",', 1),
            line.replace("{", '{pid="12",', 1),
            'vllm:num_requests_running{engine="0"} 0',
            "",
        ]
    )
    sample = sample_of(text)
    assert dict(sample.kv_capacity_tokens_by_engine) == {"0": 2048.0}
    assert sample.kv_capacity_tokens == 2048.0


def test_restart_detection():
    text = sample_text(V032_SMALL_KV)
    older = sample_of(text, at=100.0)
    later = sample_of(advance(text, counters={"vllm:prompt_tokens_total": 10.0}), at=110.0)
    assert not restarted(older, later)
    other_process = sample_of(sample_text(V032_IDLE), at=110.0)
    assert restarted(older, other_process)
    # No start time at all: a counter going down is the sign.
    bare = 'vllm:prompt_tokens_total{engine="0"} %s\n'
    assert restarted(sample_of(bare % "100"), sample_of(bare % "5"))
    assert not restarted(sample_of(bare % "100"), sample_of(bare % "100"))


def test_canonical_table_lists_newest_spelling_first():
    assert CANONICAL["kv_usage"][0] == "vllm:kv_cache_usage_perc"
    assert CANONICAL["itl"] == ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    assert CANONICAL["prefix_cache_hits"][-1] == "vllm:gpu_prefix_cache_hits_total"


@pytest.mark.parametrize("name", [V032_SMALL_KV, V032_IDLE, V010, V08_MODEL_NAME_ONLY])
def test_skipping_unread_families_changes_nothing(name):
    text = whole_window(name)
    assert sample_from_page(parse(text, FAMILIES), 5.0) == sample_from_page(parse(text), 5.0)
    assert parse(text, FAMILIES).errors == 0
    assert len(parse(text, FAMILIES).samples) <= len(parse(text).samples)
