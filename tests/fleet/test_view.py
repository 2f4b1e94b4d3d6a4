"""FleetView: plan beside actual, trends carried between polls, sort and filter on any column."""

from __future__ import annotations

import dataclasses

import pytest

from console.fleet.columns import CONSOLE_COLUMNS as COLUMNS
from console.fleet.flags import Thresholds
from console.fleet.gpus import ReplicaGpu
from console.fleet.trends import TrendPoint, Trends
from console.fleet.view import (
    FilterError,
    Row,
    advance,
    cost_per_million_tokens,
    parse_filter,
    sort_rows,
)
from console.metrics.exposition import parse
from console.metrics.figures import Figures
from console.metrics.vllm import sample_from_page
from console.metrics.window import replica_figures
from tests.fleet.builders import PLAN_NOW, fleet, plan_now, replica
from tests.metrics.pages import V032_SMALL_KV, data_parallel, relabel, sample_text
from tests.metrics.pages import advance as advance_page


def comparisons(view) -> dict:
    return {c.label: c for c in view.comparisons}


def test_plan_beside_actual_at_this_hour():
    figures = fleet(
        replica("r1", kv_usage=0.5, kv_capacity_tokens=100_000.0),
        replica("r2", kv_usage=0.8, kv_capacity_tokens=100_000.0),
        replica("r3", state="down"),
        requests_per_second=12.0,
        generation_tokens_per_second=2000.0,
        ttft_p95_seconds=1.3,
        mean_input_tokens=2100.0,
        at=1000.0,
    )
    view = advance(None, "assistant", figures, plan_now(), now=1003.0)
    rows = comparisons(view)
    assert rows["load/sched cap"].planned == 20.0 and rows["load/sched cap"].actual == 12.0
    assert rows["headroom"].actual == pytest.approx(0.4)
    assert rows["replicas up"].actual == 2 and rows["replicas up"].status == "warning"  # 2 serving of 4
    assert (
        rows["load/up-1 cap"].planned == 5.0 and rows["load/up-1 cap"].status == "warning"
    )  # one lost leaves 1 x 5 req/s
    # fullest replica: 0.8 x 100k tokens x 320 KiB per token
    assert rows["KV fullest"].actual == pytest.approx(0.8 * 100_000 * 327680.0)
    assert rows["TTFT p95"].status == "warning"  # 1.3 s is over 80 % of 1.5 s
    assert rows["TPOT p95"].status == "unknown"  # no figure: unknown, never 0
    assert view.data_age_seconds == 3.0
    assert view.replicas_serving == 2


def test_cost_per_million_tokens_now():
    # 3 replicas x 2 GPUs x $2.50 = $15/h; 2000 tok/s = 7.2 M tokens/h
    figures = fleet(replica("a"), replica("b"), replica("c"), generation_tokens_per_second=2000.0)
    assert cost_per_million_tokens(figures, plan_now()) == pytest.approx(15 / 7.2)
    assert cost_per_million_tokens(fleet(replica("a")), plan_now()) is None  # nothing generated: unknown


def test_without_a_plan_there_is_nothing_to_compare():
    view = advance(None, "bare", fleet(replica("r1"), requests_per_second=1.0), None, now=1000.0)
    assert view.comparisons == () and view.headroom is None


def test_trends_and_flags_carry_over_between_polls():
    view = None
    for i in range(4):
        figures = fleet(replica("r1", waiting=4.0), at=1000.0 + 15 * i, requests_per_second=float(i), waiting=4.0)
        view = advance(view, "f", figures, plan_now(), now=1000.0 + 15 * i)
    assert view.trends.series("load_rps") == (0.0, 1.0, 2.0, 3.0)
    assert view.trends.series("capacity_rps") == (20.0,) * 4
    assert "saturation:r1" in {f.id for f in view.flags}  # held 45 s >= 30 s
    assert view.row("r1").severity == "warning"


def test_drift_rule_looks_back_through_the_trends():
    thresholds = Thresholds(min_duration_seconds=0.0, drift_lookback_seconds=60.0)
    view = None
    for i, tpot in enumerate([0.020, 0.022, 0.026, 0.034]):
        figures = fleet(replica("r1"), at=1000.0 + 30 * i, tpot_p95_seconds=tpot, generation_tokens_per_second=1000.0)
        view = advance(view, "f", figures, plan_now(), now=1000.0 + 30 * i, thresholds=thresholds)
    # 34 ms now against 22 ms 60 s ago, generation flat, 85 % of the 40 ms target
    assert "latency_drift:fleet" in {f.id for f in view.flags}


def test_trend_ring_is_bounded_by_span_and_count():
    trends = Trends(span_seconds=100.0, limit=3)
    for at in (0.0, 50.0, 60.0, 70.0, 80.0):
        trends = trends.add(TrendPoint(at=at, load_rps=at))
    assert trends.series("load_rps") == (60.0, 70.0, 80.0)
    trends = Trends(span_seconds=100.0, limit=100)
    for at in (0.0, 50.0, 150.0):
        trends = trends.add(TrendPoint(at=at, load_rps=at))
    assert trends.series("load_rps") == (50.0, 150.0)
    assert trends.add(TrendPoint(at=150.0, load_rps=9.0)) is trends  # the same scrape twice
    assert trends.value_at("load_rps", 149.0) == 50.0
    assert trends.value_at("load_rps", 10.0) is None


ROWS = tuple(
    Row(r.name, r, None)
    for r in (
        replica("b", kv_usage=0.95, waiting=3.0),
        replica("a", kv_usage=0.40, waiting=0.0),
        replica("c", state="down"),
        replica("d", kv_usage=0.91, waiting=1.0),
    )
)


@pytest.mark.parametrize("column", [c.key for c in COLUMNS])
def test_every_column_sorts_with_unknown_last(column):
    for descending in (False, True):
        keys = [r.key for r in sort_rows(ROWS, column, descending)]
        known = [r for r in ROWS if r.value(column) is not None]
        assert sorted(keys) == ["a", "b", "c", "d"]
        assert all(ROWS[[x.key for x in ROWS].index(k)].value(column) is None for k in keys[len(known) :])


def test_sort_on_kv_both_ways():
    assert [r.key for r in sort_rows(ROWS, "kv")] == ["a", "d", "b", "c"]
    assert [r.key for r in sort_rows(ROWS, "kv", descending=True)] == ["b", "d", "a", "c"]


@pytest.mark.parametrize(
    "text,keys",
    [
        ("", ["b", "a", "c", "d"]),
        ("kv>0.9", ["b", "d"]),
        ("kv>=91%", ["b", "d"]),
        ("kv<0.5", ["a"]),  # the down replica's unknown KV is not 0
        ("wait>=1", ["b", "d"]),
        ("state=down", ["c"]),
        ("state!=up", ["c"]),
        ("name~b", ["b"]),
        ("down", ["c"]),  # plain text matches name, state or URL
        ("KV>0.9", ["b", "d"]),  # each column by its title as the header shows it, in any case
        ("Kv >= 91%", ["b", "d"]),
        ("WAIT>=1", ["b", "d"]),
        ("replica~b", ["b"]),
        ("STATE=down", ["c"]),
        ("http://127.0.0.1:8001/?a=b", []),  # a URL holding an operator is text to find, not a column
    ],
)
def test_filter_on_any_column(text, keys):
    chosen = parse_filter(text)
    assert [r.key for r in ROWS if chosen.matches(r)] == keys


@pytest.mark.parametrize(
    "text,message",
    [("speed>3", "unknown column 'speed'"), ("kv>lots", "expected a number"), ("state>up", "holds text")],
)
def test_bad_filters_say_what_was_expected(text, message):
    with pytest.raises(FilterError, match=message):
        parse_filter(text)


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: c.key)
def test_every_title_the_header_shows_is_a_filter_column_as_is_its_key(column):
    figures = replica(
        "r",
        requests_per_second=2.0,
        prompt_tokens_per_second=900.0,
        generation_tokens_per_second=150.0,
        running=3.0,
        waiting=1.0,
        kv_usage=0.5,
        preemptions_per_second=0.1,
        prefix_hit_share=0.3,
        ttft_p50_seconds=0.1,
        ttft_p95_seconds=0.4,
        tpot_p95_seconds=0.03,
        e2e_p95_seconds=9.0,
        queue_p95_seconds=0.2,
    )
    gpu = ReplicaGpu(sm_active=0.8, tensor_active=0.4, dram_active=0.6, fb_used_bytes=7e10, gpus=1)
    row = Row("r", figures, None, gpu=gpu)
    shown = column.show(figures, gpu)
    for name in (column.console.title, column.console.title.upper(), column.console.title.lower(), column.key):
        op, value = ("=", shown) if column.is_text else (">=", repr(column.read(figures, gpu)))
        assert parse_filter(f"{name}{op}{value}").matches(row), name
        assert parse_filter(f"{name} {op} {value}").matches(row), name


def test_an_unknown_column_is_refused_with_every_name_a_filter_takes():
    with pytest.raises(FilterError) as refused:
        parse_filter("ttft97>0.3")
    message = str(refused.value)
    for column in COLUMNS:
        assert column.console.title in message and column.key in message.lower()


# --- KV fullest on data-parallel servers -----------------------------------

KV_BYTES_PER_TOKEN = PLAN_NOW.kv_bytes_per_token  # 320 KiB
ENGINE_TOKENS = 14_000 * 16.0  # 14,000 blocks of 16 tokens per engine


def data_parallel_replica(name: str, usages: tuple[float, ...], blocks: str = "14000") -> Figures:
    """A replica read from the real vLLM page as a data-parallel server with one engine per usage."""
    text = data_parallel(sample_text(V032_SMALL_KV), len(usages))
    text = relabel(text, "vllm:cache_config_info", kv_cache_size_tokens="None", num_gpu_blocks=blocks, block_size="16")
    for engine, usage in enumerate(usages):
        text = advance_page(text, gauges={"vllm:kv_cache_usage_perc": usage}, where=f'engine="{engine}"')
    return replica_figures(None, sample_from_page(parse(text), 1000.0), name, f"http://127.0.0.1:8000/{name}")


def without_engine_capacity(figures: Figures) -> Figures:
    """As a source that knows the replica's total KV capacity but not each engine's."""
    return dataclasses.replace(figures, kv_capacity_tokens_by_engine={})


# Built inside the test, so that reading the capture happens when the case runs, not at collection.
KV_FULLEST_CASES = [
    # The reported page: engines at 0.6 and 0.1 of 224k tokens each; 88.1 GB summed over engines, 44.0 GB really.
    pytest.param(
        lambda: [data_parallel_replica("dp", (0.6, 0.1))],
        0.6 * ENGINE_TOKENS,
        "ok",
        id="fullest engine, not the server",
    ),
    pytest.param(
        lambda: [data_parallel_replica("dp", (0.1, 0.95))], 0.95 * ENGINE_TOKENS, "warning", id="second engine fullest"
    ),
    pytest.param(
        lambda: [without_engine_capacity(data_parallel_replica("dp", (0.6, 0.1)))],
        0.6 * ENGINE_TOKENS,
        "ok",
        id="no per-engine capacity: total shared over engines",
    ),
    pytest.param(
        lambda: [data_parallel_replica("a", (0.2, 0.1)), data_parallel_replica("b", (0.3, 1.0), blocks="16000")],
        1.0 * 16_000 * 16,
        "critical",
        id="fullest engine of any replica",
    ),
    pytest.param(
        lambda: [replica("single", kv_usage=0.5, kv_capacity_tokens=ENGINE_TOKENS)],
        0.5 * ENGINE_TOKENS,
        "ok",
        id="one engine, usage without engine breakdown",
    ),
    pytest.param(
        lambda: [
            replica(
                "partial",
                kv_usage=0.6,
                kv_usage_by_engine={"0": 0.1, "1": 0.6},
                kv_capacity_tokens_by_engine={"0": ENGINE_TOKENS},
            )
        ],
        0.6 * ENGINE_TOKENS,
        "ok",
        id="engine without capacity takes its sibling's",
    ),
    pytest.param(lambda: [replica("blind", kv_usage=0.6)], None, "unknown", id="no capacity at all"),
]


@pytest.mark.parametrize("replicas,used_tokens,status", KV_FULLEST_CASES)
def test_kv_fullest_compares_one_engine_with_the_plans_replica_budget(replicas, used_tokens, status):
    view = advance(None, "dp", fleet(*replicas()), plan_now(), now=1003.0)
    row = comparisons(view)["KV fullest"]
    expected = None if used_tokens is None else pytest.approx(used_tokens * KV_BYTES_PER_TOKEN)
    assert row.planned == 74e9
    assert row.actual == expected
    assert row.status == status
