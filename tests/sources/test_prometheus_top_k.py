"""The top-k view of a large fleet through Prometheus: every replica's state and gauges, fleet aggregates,
per-replica rates and percentiles of the picked replicas only; and the reading of answers at scale."""

from __future__ import annotations

import gc
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.sources import prometheus as source_module
from console.sources import promql
from console.sources.prometheus import AnswerError, PrometheusSource, _checked_item, _collector_paused, _rows, picked
from tests.sources.test_prometheus_source import NOW, answers_for, row

SELECTOR = 'job="vllm"'


def instances(count: int) -> list[str]:
    return [f"10.0.{i // 250}.{i % 250}:8000" for i in range(count)]


def decoded(literal: str) -> str:
    """A PromQL double-quoted string's content as Prometheus reads it (Go's escapes)."""
    return re.sub(
        r'\\(x[0-9a-f]{2}|["\\])',
        lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1).startswith("x") else m.group(1),
        literal,
    )


def kept_by(query: str) -> re.Pattern[str]:
    """What a detail query's instance matcher matches, read back from its text."""
    found = re.search(r'instance=~"((?:[^"\\]|\\.)*)"\}\)$', query)
    assert found is not None, query[-200:]
    return re.compile(decoded(found.group(1)))


class TopKClient:
    """A Prometheus of `count` replicas answering the six queries, the overview and the restricted detail.

    Replica i has i requests waiting and serves (i + 1) req/s; the picks answer is what topk/bottomk
    of req/s would pick, at most `per_end` at each end.
    """

    def __init__(self, count: int, per_end: int = 2) -> None:
        self.names = instances(count)
        self.full = answers_for(self.names)
        for index, name in enumerate(self.names):  # a different load on each replica
            self.full["rates"] = [
                row("requests", float(index + 1), instance=name)
                if r["metric"] == {"capcon_figure": "requests", "instance": name}
                else r
                for r in self.full["rates"]
            ]
            self.full["gauges"] = [
                row("waiting", float(index), instance=name)
                if r["metric"] == {"capcon_figure": "waiting", "instance": name}
                else r
                for r in self.full["gauges"]
            ]
        total = sum(range(1, count + 1))
        self.full["fleet"] = [row("requests", float(total)), row("prompt_tokens", 200.0 * count)]
        self.full["fleet"].append(row("requests_by_reason", 0.75 * total, finished_reason="length"))
        self.full["fleet"] += [row("prompt_length_sum", 200.0 * count), row("prompt_length_count", 2.0 * count)]
        ends = self.names[:per_end] + self.names[-per_end:]
        self.full["picks"] = [row(promql.PICK, 1, instance=name) for name in ends]
        self.by_query: dict[str, str] = {}
        for purpose, query in promql.refresh_queries(SELECTOR, 30).items():
            self.by_query[query] = purpose
        for purpose, query in promql.overview_queries(SELECTOR, 30).items():
            self.by_query.setdefault(query, purpose)
        self.sent: list[str] = []

    def custom_query(self, query, params=None, timeout=None):
        self.sent.append(query)
        if query in self.by_query:
            return self.full[self.by_query[query]]
        for purpose in ("rates", "quantiles"):
            base = promql.refresh_queries(SELECTOR, 30)[purpose]
            if query.startswith(f"({base}) and on (instance)"):
                keep = kept_by(query)
                return [r for r in self.full[purpose] if keep.fullmatch(r["metric"]["instance"])]
        raise AssertionError(f"a query the fake does not know: {query[:200]}")


async def test_a_fleet_past_the_limit_gets_every_state_the_aggregates_and_the_picked_replicas_detail(monkeypatch):
    monkeypatch.setattr(source_module, "DETAIL_FIRST", 1)
    monkeypatch.setattr(promql, "DETAIL_PER_FIGURE", 1)
    client = TopKClient(8)
    source = PrometheusSource("http://prometheus.invalid", SELECTOR, window_seconds=30, client=client, detail_all=4)
    first = await source.collect(NOW)  # every figure of every replica: it finds 8 replicas, past the limit
    assert len(client.sent) == 6 and source.top_k_view
    assert all(r.requests_per_second is not None for r in first.replicas)

    client.sent.clear()
    figures = await source.collect(NOW)
    assert len(client.sent) == 8 == source.last_queries  # the overview (6), then the detail (2)
    assert [r.name for r in figures.replicas] == client.names  # every replica, with its state and gauges
    assert all(r.state == "up" and r.waiting is not None and r.kv_usage is not None for r in figures.replicas)
    with_detail = {r.name for r in figures.replicas if r.requests_per_second is not None}
    # Prometheus' picks (2 at each end), the first name, the most waiting (the last one, already picked).
    assert with_detail == {client.names[0], client.names[1], client.names[-2], client.names[-1]}
    assert figures.replicas[-1].requests_per_second == 8.0 and figures.replicas[3].requests_per_second is None
    # The fleet's rates come from Prometheus' sums over every replica, not the picked ones.
    assert figures.fleet.requests_per_second == float(sum(range(1, 9)))
    assert figures.fleet.requests_per_second_by_reason == {"length": 0.75 * 36}
    assert figures.fleet.mean_input_tokens == 100.0
    assert figures.fleet.waiting == float(sum(range(8)))  # gauges: every replica's, summed here
    assert figures.fleet.ttft_p95_seconds == 0.4  # merged buckets, as before


async def test_a_fleet_inside_the_limit_keeps_one_round_of_every_figure():
    client = TopKClient(3)
    source = PrometheusSource("http://prometheus.invalid", SELECTOR, window_seconds=30, client=client, detail_all=4)
    for _ in range(2):
        figures = await source.collect(NOW)
    assert len(client.sent) == 12 and not source.top_k_view
    assert all(r.requests_per_second is not None for r in figures.replicas)


async def test_the_view_goes_back_to_every_figure_when_the_fleet_shrinks_well_inside_the_limit():
    big, small = TopKClient(8), TopKClient(2)
    source = PrometheusSource("http://prometheus.invalid", SELECTOR, window_seconds=30, client=big, detail_all=4)
    await source.collect(NOW)
    assert source.top_k_view
    source._client = small  # the same Prometheus, after the fleet shrank to 2 (half the limit or less)
    figures = await source.collect(NOW)
    assert not source.top_k_view
    assert all(r.requests_per_second is not None for r in figures.replicas)  # unrestricted detail


class SlowClient:
    def custom_query(self, query, params=None, timeout=None):
        threading.Event().wait(0.5)
        return []


async def test_a_refresh_of_every_figure_that_misses_the_deadline_moves_to_the_top_k_view():
    source = PrometheusSource("http://prometheus.invalid", SELECTOR, timeout=0.05, client=SlowClient())
    figures = await source.collect(NOW)
    assert "no answer within" in figures.source_error
    assert source.top_k_view


def test_picks_are_none_for_a_small_fleet_and_bounded_for_a_large_one():
    names = instances(600)
    overview = {
        "up": [({"instance": n, promql.FIGURE_LABEL: "up"}, 1.0) for n in names],
        "gauges": [({"instance": n, promql.FIGURE_LABEL: "waiting"}, float(i)) for i, n in enumerate(names)],
        "picks": [({"instance": names[300], promql.FIGURE_LABEL: promql.PICK}, 1.0)],
    }
    assert picked(overview, 600) is None
    chosen = picked(overview, 500)
    assert chosen is not None and names[300] in chosen
    assert set(sorted(names)[: source_module.DETAIL_FIRST]) <= set(chosen)
    assert set(names[-promql.DETAIL_PER_FIGURE :]) <= set(chosen)  # the most waiting
    assert len(chosen) == source_module.DETAIL_FIRST + promql.DETAIL_PER_FIGURE + 1


# --- the queries ------------------------------------------------------------------------


def test_the_overview_asks_every_replica_only_for_state_gauges_and_flag_figures():
    queries = promql.overview_queries(SELECTOR, 60)
    assert list(queries) == ["up", "gauges", "cache_config", "fleet_quantiles", "fleet", "picks"]
    assert "sum by (instance)" not in queries["fleet"] and "sum by (finished_reason)" in queries["fleet"]
    assert queries["picks"].count("topk(") == queries["picks"].count("bottomk(") == 15
    # Preemptions and restarts (resets) of every replica, but only where they are not zero.
    assert queries["gauges"].count(") > 0") == 2


def test_a_restricted_query_names_the_instances_once_whatever_its_size():
    names = instances(300)
    query = promql.detail_queries(SELECTOR, 60, names)["rates"]
    assert query.count("instance=~") == 1
    assert query.startswith("(" + promql.refresh_queries(SELECTOR, 60)["rates"] + ") and on (instance)")
    assert promql.detail_queries(SELECTOR, 60, None) == {
        p: q for p, q in promql.refresh_queries(SELECTOR, 60).items() if p in ("rates", "quantiles")
    }


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=6, unique=True), st.text(max_size=30))
def test_the_instance_matcher_matches_exactly_the_names_given_whatever_they_hold(names, other):
    """Hostile instance labels (quotes, backslashes, regex metacharacters, control characters) stay literal."""
    matcher = promql.instance_matcher(names)
    assert matcher.startswith('instance=~"') and matcher.endswith('"')
    body = matcher[len('instance=~"') : -1]
    assert re.search(r'(?<!\\)(?:\\\\)*"', body) is None, "an unescaped quote would end the string"
    assert all(ord(c) >= 0x20 and ord(c) != 0x7F for c in body), "control characters are escaped"
    pattern = re.compile(decoded(body), re.DOTALL)
    assert all(pattern.fullmatch(name) for name in names)
    assert (pattern.fullmatch(other) is not None) == (other in names)


# --- reading answers at scale -----------------------------------------------------------

values = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["1", "0.5", "NaN", "+Inf", "-1e3", "x"]),
    st.integers(),
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
)
items = st.one_of(
    st.fixed_dictionaries(
        {
            "metric": st.one_of(
                st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.integers()), max_size=3),
                st.lists(st.integers(), max_size=2),
            ),
            "value": st.one_of(
                st.tuples(
                    st.one_of(st.floats(allow_nan=False), st.integers(), st.booleans(), st.text(max_size=3)), values
                ).map(list),
                st.lists(values, max_size=3),
            ),
        }
    ),
    st.integers(),
    st.text(max_size=4),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(items, max_size=4))
def test_the_fast_reading_of_rows_agrees_with_checking_each_item_in_turn(result):
    """`_rows` checks each item in one expression; `_checked_item` is the item-by-item reading with the words."""
    try:
        expected = [_checked_item("rates", index, item) for index, item in enumerate(result)]
    except AnswerError as error:
        with pytest.raises(AnswerError) as raised:
            _rows("rates", result)
        assert str(raised.value) == str(error)
        return
    assert _rows("rates", result) == expected


def test_the_collector_is_back_after_reading_and_left_alone_when_someone_else_turned_it_off():
    assert gc.isenabled()
    with _collector_paused():
        assert not gc.isenabled()
        with _collector_paused():  # two fleets' readers at once
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with _collector_paused():
            pass
        assert not gc.isenabled(), "turned off by someone else: not turned on by the reader"
    finally:
        gc.enable()
    with pytest.raises(ValueError), _collector_paused():
        raise ValueError("a refused answer")
    assert gc.isenabled()


def test_a_picks_answer_naming_the_whole_fleet_is_cut_to_the_detail_limit():
    names = instances(2000)
    overview = {
        "up": [({"instance": n, promql.FIGURE_LABEL: "up"}, 1.0) for n in names],
        "picks": [({"instance": n, promql.FIGURE_LABEL: promql.PICK}, 1.0) for n in names + ["not-a-target:1"]],
    }
    chosen = picked(overview, 500)
    assert chosen is not None and 300 < len(chosen) <= source_module.DETAIL_MAX
    assert "not-a-target:1" not in chosen  # only replicas Prometheus lists as targets


@pytest.fixture
async def recording_prometheus():
    """A loopback Prometheus answering an empty vector to GET and POST; records each request."""
    from aiohttp import web

    seen: list[tuple[str, dict, dict]] = []

    async def query(request: web.Request) -> web.Response:
        form = dict(await request.post()) if request.method == "POST" else {}
        seen.append((request.method, dict(request.query), form))
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": []}})

    app = web.Application()
    app.router.add_route("*", "/prom/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/prom", seen
    await runner.cleanup()


async def test_a_long_query_goes_as_a_post_form_and_keeps_the_base_urls_own_query(recording_prometheus):
    url, seen = recording_prometheus
    source = PrometheusSource(url + "/?tenant=team-a", SELECTOR, timeout=5)
    long_query = promql.detail_queries(promql.selector_matchers(SELECTOR), 60, instances(400))["rates"]
    assert len(long_query) > source_module.MAX_GET_QUERY_CHARS
    assert await source.instant_vector("up", NOW) == []
    assert await source.instant_vector(long_query, NOW) == []
    await source.aclose()
    (short_method, short_url, _), (long_method, long_url, form) = seen
    assert short_method == "GET" and short_url["query"] == "up" and short_url["tenant"] == "team-a"
    assert long_method == "POST" and long_url == {"tenant": "team-a"}  # the query itself is in the body
    assert form == {"query": long_query, "time": f"{NOW:.3f}"}
