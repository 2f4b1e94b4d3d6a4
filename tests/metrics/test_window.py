"""Window math: rates, restarts, Prometheus histogram_quantile, fleet merging, unknown vs 0."""

from __future__ import annotations

import math

import pytest

from console.metrics.exposition import parse
from console.metrics.figures import Figures
from console.metrics.vllm import sample_from_page
from console.metrics.window import fleet_figures, histogram_quantile, replica_figures

from .pages import V032_IDLE, V032_SMALL_KV, advance, data_parallel, relabel, sample_text

INF = math.inf

# Cumulative buckets (le 0.1, 0.5, 1, +Inf) holding 2, 4, 3, 1 observations.
BOUNDS = (0.1, 0.5, 1.0, INF)
COUNTS = (2.0, 6.0, 9.0, 10.0)


@pytest.mark.parametrize(
    "q,expected",
    [
        (0.1, 0.05),  # rank 1 in the first bucket, which starts at 0
        (0.5, 0.4),  # rank 5: 0.1 + 0.4 * (5 - 2) / 4
        (0.9, 1.0),  # rank 9: the top of the third bucket
        (0.95, 1.0),  # rank 9.5 falls in +Inf: the last finite bound
        (0.0, 0.0),
        (1.0, 1.0),
    ],
)
def test_histogram_quantile_hand_computed(q, expected):
    assert histogram_quantile(q, BOUNDS, COUNTS) == pytest.approx(expected)


@pytest.mark.parametrize(
    "bounds,counts",
    [
        (BOUNDS, (0.0, 0.0, 0.0, 0.0)),  # no observations
        ((0.1, 0.5), (1.0, 2.0)),  # no +Inf bucket
        ((INF,), (5.0,)),  # only +Inf
    ],
)
def test_histogram_quantile_unknown_where_prometheus_gives_nan(bounds, counts):
    assert histogram_quantile(0.95, bounds, counts) is None


def test_histogram_quantile_corners():
    assert histogram_quantile(0.25, (-1.0, 0.0, INF), (1.0, 2.0, 2.0)) == -1.0  # first bound <= 0
    assert histogram_quantile(-0.1, BOUNDS, COUNTS) == -INF
    assert histogram_quantile(1.5, BOUNDS, COUNTS) == INF
    # Non-monotonic buckets (scrape skew) are made monotonic first, as Prometheus does.
    assert histogram_quantile(0.5, BOUNDS, (2.0, 6.0, 5.0, 10.0)) == histogram_quantile(
        0.5, BOUNDS, (2.0, 6.0, 6.0, 10.0)
    )


def base_text() -> str:
    return sample_text(V032_SMALL_KV)


def sample_at(text: str, at: float):
    return sample_from_page(parse(text), at)


LOAD = dict(
    counters={
        "vllm:request_success_total": 20.0,
        "vllm:prompt_tokens_total": 1000.0,
        "vllm:generation_tokens_total": 400.0,
        "vllm:num_preemptions_total": 5.0,
        "vllm:prefix_cache_queries_total": 1000.0,
        "vllm:prefix_cache_hits_total": 300.0,
    },
    observations={
        "vllm:time_to_first_token_seconds": [0.03] * 10 + [0.3] * 10,
        "vllm:request_prompt_tokens": [50.0] * 20,
        "vllm:request_generation_tokens": [20.0] * 20,
        "vllm:e2e_request_latency_seconds": [0.9] * 20,
    },
    gauges={"vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 2.0, "vllm:kv_cache_usage_perc": 0.5},
)


def loaded_pair(where: str = 'finished_reason="length"'):
    text = base_text()
    # Request counts live on the "length" series; other series change only where named.
    later = advance(text, counters={"vllm:request_success_total": 20.0}, where=where)
    rest = {k: v for k, v in LOAD["counters"].items() if k != "vllm:request_success_total"}
    later = advance(later, counters=rest, observations=LOAD["observations"], gauges=LOAD["gauges"])
    return sample_at(text, 1000.0), sample_at(later, 1010.0)


def test_replica_rates_quantiles_and_means():
    older, newer = loaded_pair()
    f = replica_figures(older, newer, "r1", "http://r1/metrics", now=1012.0)
    assert f.state == "up"
    assert f.requests_per_second == pytest.approx(2.0)
    assert f.requests_per_second_by_reason["length"] == pytest.approx(2.0)
    assert f.requests_per_second_by_reason["stop"] == 0.0
    assert f.prompt_tokens_per_second == pytest.approx(100.0)
    assert f.generation_tokens_per_second == pytest.approx(40.0)
    assert f.preemptions_per_second == pytest.approx(0.5)
    assert f.rejections_per_second == 0.0  # the counter exists and did not move: a known 0
    assert f.prefix_hit_share == pytest.approx(0.3)
    # TTFT buckets ... 0.02, 0.04, ..., 0.25, 0.5: ten in (0.02, 0.04], ten in (0.25, 0.5].
    assert f.ttft_p50_seconds == pytest.approx(0.04)
    assert f.ttft_p95_seconds == pytest.approx(0.25 + 0.25 * 9 / 10)
    assert f.ttft_p99_seconds == pytest.approx(0.25 + 0.25 * 9.8 / 10)
    assert f.e2e_p95_seconds == pytest.approx(0.8 + 0.2 * 19 / 20)  # latency buckets 0.8, 1.0
    assert f.mean_input_tokens == pytest.approx(50.0) and f.mean_output_tokens == pytest.approx(20.0)
    assert (f.running, f.waiting, f.kv_usage) == (3.0, 2.0, 0.5)
    assert f.kv_capacity_tokens == 2048.0
    assert f.data_age_seconds == pytest.approx(2.0)


def test_no_requests_in_the_window_is_unknown_not_zero():
    text = base_text()
    f = replica_figures(sample_at(text, 0.0), sample_at(text, 10.0), "r", "u")
    assert f.requests_per_second == 0.0  # a rate of nothing is a known 0
    for unknown in ("ttft_p95_seconds", "itl_p95_seconds", "tpot_p95_seconds", "mean_input_tokens", "prefix_hit_share"):
        assert getattr(f, unknown) is None, unknown


def test_first_sample_has_gauges_but_no_rates():
    f = replica_figures(None, sample_at(base_text(), 10.0), "r", "u")
    assert f.running == 0.0 and f.kv_usage == 0.0
    assert f.requests_per_second is None and f.ttft_p95_seconds is None


def test_restart_gives_no_rate_and_says_so():
    older = sample_at(base_text(), 0.0)
    newer = sample_at(sample_text(V032_IDLE), 10.0)  # another process: start time changed
    f = replica_figures(older, newer, "r", "u")
    assert f.state == "restarted" and "restart" in f.error
    assert f.requests_per_second is None and f.prompt_tokens_per_second is None and f.ttft_p95_seconds is None


def test_counter_reset_without_start_time_never_gives_a_negative_rate():
    bare = 'vllm:prompt_tokens_total{engine="0"} %s\nvllm:num_requests_running{engine="0"} 1\n'
    f = replica_figures(sample_at(bare % "500", 0.0), sample_at(bare % "20", 10.0), "r", "u")
    assert f.state == "restarted" and f.prompt_tokens_per_second is None


def test_a_missing_figure_stays_unknown():
    # A server without admission control metrics (before 0.32) has no rejection rate.
    bare = 'vllm:prompt_tokens_total{engine="0"} %s\n'
    f = replica_figures(sample_at(bare % "0", 0.0), sample_at(bare % "50", 10.0), "r", "u")
    assert f.prompt_tokens_per_second == 5.0
    assert f.rejections_per_second is None and f.running is None and f.kv_usage is None


def two_replicas():
    text = base_text()
    fast = advance(text, observations={"vllm:time_to_first_token_seconds": [0.03] * 10})
    slow = advance(
        text,
        observations={"vllm:time_to_first_token_seconds": [0.3] * 10},
        gauges={"vllm:kv_cache_usage_perc": 0.9, "vllm:num_requests_running": 4.0},
    )
    fast = advance(
        fast,
        counters={"vllm:prompt_tokens_total": 100.0},
        gauges={"vllm:kv_cache_usage_perc": 0.2, "vllm:num_requests_running": 1.0},
    )
    pairs = [(sample_at(text, 0.0), sample_at(fast, 10.0)), (sample_at(text, 0.0), sample_at(slow, 10.0))]
    figures = [replica_figures(o, n, name, "u") for (o, n), name in zip(pairs, ("fast", "slow"))]
    return pairs, figures


def test_fleet_quantiles_come_from_merged_buckets_not_averages():
    pairs, replicas = two_replicas()
    fleet = fleet_figures(pairs, replicas)
    assert fleet.ttft_p50_seconds == pytest.approx(0.04)  # rank 10 of 20 merged observations
    assert fleet.ttft_p95_seconds == pytest.approx(0.25 + 0.25 * 9 / 10)
    averaged = (replicas[0].ttft_p95_seconds + replicas[1].ttft_p95_seconds) / 2
    assert fleet.ttft_p95_seconds != pytest.approx(averaged)


def test_fleet_sums_rates_and_gauges_and_takes_the_kv_max():
    pairs, replicas = two_replicas()
    fleet = fleet_figures(pairs, replicas)
    assert fleet.prompt_tokens_per_second == pytest.approx(10.0)
    assert fleet.running == 5.0 and fleet.kv_usage == 0.9 and fleet.kv_capacity_tokens == 4096.0
    assert fleet.state == "up" and fleet.error == ""


def test_fleet_leaves_out_replicas_that_did_not_answer_and_says_so():
    pairs, replicas = two_replicas()
    down = Figures(name="gone", url="u3", state="down", error="cannot connect")
    fleet = fleet_figures(pairs, [*replicas, down])
    assert fleet.running == 5.0 and "1 of 3 replicas not answering" in fleet.error


def test_fleet_of_nothing_answering_is_down_and_unknown():
    fleet = fleet_figures([], [Figures(name="a", url="u", state="timeout")])
    assert fleet.state == "down" and fleet.running is None and fleet.requests_per_second is None


def two_engine_text(usage0: float, usage1: float, blocks0: str = "14000", blocks1: str = "14000") -> str:
    """The real page as a two-engine data-parallel server: blocks of 16 tokens per engine, KV usage set per engine."""
    text = data_parallel(base_text(), 2)
    for engine, usage, blocks in (("0", usage0, blocks0), ("1", usage1, blocks1)):
        where = f'engine="{engine}"'
        text = relabel(
            text, "vllm:cache_config_info", where, kv_cache_size_tokens="None", num_gpu_blocks=blocks, block_size="16"
        )
        text = advance(text, gauges={"vllm:kv_cache_usage_perc": usage}, where=where)
    return text


@pytest.mark.parametrize(
    "usages,blocks,by_engine,total",
    [
        pytest.param((0.6, 0.1), ("14000", "14000"), {"0": 224_000.0, "1": 224_000.0}, 448_000.0, id="equal engines"),
        pytest.param((0.1, 0.6), ("2000", "14000"), {"0": 32_000.0, "1": 224_000.0}, 256_000.0, id="unequal engines"),
        pytest.param((0.1, 0.6), ("14000", "None"), {"0": 224_000.0}, None, id="one engine unknown"),
    ],
)
def test_replica_figures_keep_kv_per_engine(usages, blocks, by_engine, total):
    f = replica_figures(None, sample_at(two_engine_text(*usages, *blocks), 10.0), "r", "u")
    assert f.kv_usage_by_engine == {"0": usages[0], "1": usages[1]} and f.kv_usage == max(usages)
    assert f.kv_capacity_tokens_by_engine == by_engine
    assert f.kv_capacity_tokens == total


def test_fleet_sums_kv_capacity_but_keeps_no_engine_breakdown():
    # Engine "0" of one replica is not engine "0" of another: the fleet keeps only the total.
    texts = [two_engine_text(0.6, 0.1), two_engine_text(0.2, 0.3, "2000", "2000")]
    pairs = [(None, sample_at(text, 10.0)) for text in texts]
    replicas = [replica_figures(o, n, name, "u") for (o, n), name in zip(pairs, ("a", "b"))]
    fleet = fleet_figures(pairs, replicas)
    assert fleet.kv_capacity_tokens == 448_000.0 + 64_000.0 and fleet.kv_usage == 0.6
    assert fleet.kv_capacity_tokens_by_engine == {}
