"""Pages that lie about being whole: a poll is read whole or it is a bad page, never a smaller number.

A page cut short with an honest Content-Length arrives complete as far as HTTP knows. What gives it
away is on the page: a last line without its line end, a histogram without its +Inf bucket, _count or
_sum, an engine missing from a family, or fewer series than the same process served a poll earlier.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import fields, replace

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metrics.pages import V032_SMALL_KV, advance, data_parallel, sample_text

from console.live.watcher import Watcher
from console.metrics.figures import Figures
from console.sources.scrape import SHORT_PAGES_ACCEPTED, ScrapeSource
from console.targets import Target, TargetResult

from .servers import raw_server, serve

WHOLE = advance(
    sample_text(V032_SMALL_KV),
    gauges={"vllm:num_requests_waiting": 120.0, "vllm:kv_cache_usage_perc": 0.95, "vllm:num_requests_running": 4.0},
)
WHOLE_BYTES = WHOLE.encode()
TARGET = Target("r", "http://127.0.0.1:1/metrics")
LINE_STARTS = [0] + [i + 1 for i, c in enumerate(WHOLE) if c == "\n" and i + 1 < len(WHOLE)]


def _switchable():
    """A handler serving `page["body"]` verbatim, with its true Content-Length (aiohttp sets it)."""
    page = {"body": WHOLE_BYTES}

    async def handler(request):
        return web.Response(body=page["body"], content_type="text/plain")

    return page, handler


async def _poll(source: ScrapeSource) -> TargetResult:
    [result] = await source.fetch(now=1000.0)
    return result


def _cut_inside(text: str, line_start: str, keep: int) -> str:
    """`text` cut `keep` characters into the line that starts with `line_start` (no line end after)."""
    at = text.index(line_start)
    return text[: at + keep]


async def test_a_number_cut_short_under_an_honest_content_length_is_a_bad_page_not_a_smaller_number():
    # waiting 120 served as "12", KV 0.95 as "0.9": each the last line, with an exact Content-Length.
    waiting = 'vllm:num_requests_waiting{engine="0",model_name="tiny"} 120.0'
    kv = 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.95'
    page, handler = _switchable()
    async with serve(handler) as url:
        source = ScrapeSource([Target("r", url + "/metrics")])
        try:
            for cut in (_cut_inside(WHOLE, waiting, len(waiting) - 3), _cut_inside(WHOLE, kv, len(kv) - 1)):
                page["body"] = cut.encode()
                result = await _poll(source)
                assert result.state == "bad_payload" and result.sample is None
                assert "cut short" in result.error
        finally:
            await source.aclose()


async def test_a_page_cut_at_half_its_bytes_is_a_bad_page_every_time():
    body = WHOLE_BYTES[: len(WHOLE_BYTES) // 2]
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    for _ in range(3):
        async with raw_server(head + body) as url:
            source = ScrapeSource([Target("r", url + "/metrics")])
            try:
                result = await _poll(source)
            finally:
                await source.aclose()
        assert result.state == "bad_payload" and result.sample is None


async def test_a_page_cut_at_a_line_end_after_a_whole_one_is_a_bad_page():
    # Half the page, backed up to the line end before it: every line whole, the rest missing.
    half = WHOLE[: WHOLE.rindex("\n", 0, len(WHOLE) // 2) + 1]
    before_config = WHOLE[: WHOLE.index("# HELP vllm:cache_config_info")]  # only the last vLLM family missing
    page, handler = _switchable()
    async with serve(handler) as url:
        source = ScrapeSource([Target("r", url + "/metrics")])
        try:
            assert (await _poll(source)).state == "up"
            for cut in (half, before_config):
                page["body"] = cut.encode()
                result = await _poll(source)
                assert result.state == "bad_payload" and "cut short" in result.error, cut[-80:]
            page["body"] = WHOLE_BYTES
            assert (await _poll(source)).state == "up"
        finally:
            await source.aclose()


async def test_a_histogram_cut_between_its_buckets_and_its_count_is_a_bad_page_on_the_first_poll():
    ttft_count = WHOLE.index("vllm:time_to_first_token_seconds_count")
    source = ScrapeSource([TARGET])
    try:
        result = source.read_page(TARGET, "key", WHOLE[:ttft_count].encode(), 1000.0)
    finally:
        await source.aclose()
    assert result.state == "bad_payload" and "vllm:time_to_first_token_seconds" in result.error


async def test_a_data_parallel_page_cut_between_two_engines_is_a_bad_page_on_the_first_poll():
    text = data_parallel(WHOLE, 2)
    cut = text[: text.index('vllm:num_requests_waiting{engine="1"')]  # engine 0 waiting read, engine 1 not
    source = ScrapeSource([TARGET])
    try:
        result = source.read_page(TARGET, "key", cut.encode(), 1000.0)
    finally:
        await source.aclose()
    assert result.state == "bad_payload" and "engine 1" in result.error


async def test_a_smaller_page_that_persists_is_the_replicas_new_shape():
    smaller = WHOLE[: WHOLE.index("# HELP vllm:cache_config_info")]
    source = ScrapeSource([TARGET])
    try:
        assert source.read_page(TARGET, "key", WHOLE_BYTES, 1000.0).state == "up"
        states = [
            source.read_page(TARGET, "key", smaller.encode(), 1001.0 + i).state for i in range(SHORT_PAGES_ACCEPTED + 1)
        ]
    finally:
        await source.aclose()
    assert states == ["bad_payload"] * (SHORT_PAGES_ACCEPTED - 1) + ["up", "up"]


# --- every kind of cut, against the figures of the whole page ------------------------------


def _figures_of(pages: list[tuple[float, TargetResult]]) -> list[Figures]:
    watcher = Watcher(_NoSource(), window_seconds=60.0, interval_seconds=10.0)
    return [watcher.replay([result], now).replicas[0] for now, result in pages]


class _NoSource:
    name = "scrape"

    async def fetch(self, now):  # pragma: no cover - replay only
        return []

    async def aclose(self):
        pass


NEXT = advance(
    WHOLE,
    counters={"vllm:prompt_tokens_total": 500.0, "vllm:generation_tokens_total": 300.0},
    observations={"vllm:time_to_first_token_seconds": [0.2, 0.4, 1.5], "vllm:request_prompt_tokens": [100, 300, 700]},
)
NEXT = NEXT.replace(
    'finished_reason="length",model_name="tiny"} 33.0', 'finished_reason="length",model_name="tiny"} 36.0'
)


def _read(source: ScrapeSource, text: str, at: float) -> TargetResult:
    return source.read_page(TARGET, "key", text.encode(), at)


def _cut_positions():
    """Positions of every kind: a line end, inside a name, labels or a number, just before a line end."""
    line = st.integers(0, len(LINE_STARTS) - 1)

    def inside(index: int):
        start = LINE_STARTS[index]
        end = WHOLE.index("\n", start)
        return st.integers(start, end)  # start: right after the line end before; end: just before this one's

    return st.one_of(st.sampled_from(LINE_STARTS), line.flatmap(inside), st.integers(0, len(WHOLE)))


def _same_or_unknown(cut: Figures, whole: Figures) -> None:
    for item in fields(Figures):
        if item.name in ("state", "error"):
            continue
        mine, theirs = getattr(cut, item.name), getattr(whole, item.name)
        if isinstance(mine, dict):  # per engine or reason: each one known is the whole page's
            assert all(key in theirs and value == theirs[key] for key, value in mine.items()), (item.name, mine, theirs)
        else:
            assert mine is None or mine == theirs, (item.name, mine, theirs)


@pytest.fixture(scope="module")
def source():
    made = ScrapeSource([TARGET])
    yield made
    asyncio.run(made.aclose())


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(position=_cut_positions())
def test_a_cut_page_after_a_whole_one_is_bad_or_reads_exactly_as_the_whole_one(source, position):
    cut = NEXT[: min(position, len(NEXT))]
    source._last_pages.clear()
    reference = _figures_of([(100.0, _read(source, WHOLE, 100.0)), (110.0, _read(source, NEXT, 110.0))])[-1]
    source._last_pages.clear()
    first = _read(source, WHOLE, 100.0)
    second = _read(source, cut, 110.0)
    if second.state != "bad_payload":
        assert second.state == "up"
        figures = _figures_of([(100.0, first), (110.0, second)])[-1]
        assert replace(figures, error="") == replace(reference, error="")


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(position=_cut_positions())
def test_a_cut_first_page_is_bad_or_every_figure_is_the_whole_pages_or_unknown(source, position):
    cut = WHOLE[:position]
    source._last_pages.clear()
    whole_alone, whole_pair = _figures_of([(100.0, _read(source, WHOLE, 100.0)), (110.0, _read(source, NEXT, 110.0))])
    source._last_pages.clear()
    first = _read(source, cut, 100.0)
    if first.state == "bad_payload":
        return
    alone, pair = _figures_of([(100.0, first), (110.0, _read(source, NEXT, 110.0))])
    _same_or_unknown(alone, whole_alone)
    # The rates across the cut page and the next whole one: the whole page's, or unknown, never a jump.
    _same_or_unknown(pair, whole_pair)


def test_every_line_end_of_the_capture_is_bad_or_whole(source):
    """Exhaustively: cut at each line end, after a whole page, every poll is bad or the whole page's figures."""
    source._last_pages.clear()
    reference = _figures_of([(100.0, _read(source, WHOLE, 100.0)), (110.0, _read(source, NEXT, 110.0))])[-1]
    next_starts = [0] + [i + 1 for i, c in enumerate(NEXT) if c == "\n"]
    whole_reads = 0
    for position in next_starts:
        source._last_pages.clear()
        first = _read(source, WHOLE, 100.0)
        second = _read(source, NEXT[:position], 110.0)
        if second.state == "bad_payload":
            continue
        whole_reads += 1
        figures = _figures_of([(100.0, first), (110.0, second)])[-1]
        assert replace(figures, error="") == replace(reference, error=""), NEXT[:position][-120:]
    # Only cuts past the last vLLM line (in the HTTP server's own families) read as whole.
    assert 0 < whole_reads < 120


def test_no_figure_of_any_cut_is_a_number_that_is_not_finite(source):
    for position in range(0, len(WHOLE), 97):
        source._last_pages.clear()
        result = _read(source, WHOLE[:position], 100.0)
        for figures in _figures_of([(100.0, result)]):
            for item in fields(Figures):
                value = getattr(figures, item.name)
                assert not isinstance(value, float) or math.isfinite(value)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(position=_cut_positions(), gzipped=st.booleans())
def test_over_http_a_cut_page_is_bad_or_exactly_the_whole_one(position, gzipped):
    """The same through a loopback server, with an honest Content-Length (and gzip, as vLLM serves it)."""
    import gzip

    cut = NEXT[: min(position, len(NEXT))].encode()

    async def scenario():
        bodies = [WHOLE_BYTES, cut]

        async def handler(request):
            body = bodies.pop(0) if len(bodies) > 1 else bodies[0]
            if gzipped:
                return web.Response(
                    body=gzip.compress(body), content_type="text/plain", headers={"Content-Encoding": "gzip"}
                )
            return web.Response(body=body, content_type="text/plain")

        async with serve(handler) as url:
            source = ScrapeSource([Target("r", url + "/metrics")])
            try:
                [first] = await source.fetch(now=100.0)
                [second] = await source.fetch(now=110.0)
            finally:
                await source.aclose()
        return first, second

    first, second = asyncio.run(scenario())
    assert first.state == "up"
    if second.state != "bad_payload":
        reference_source = ScrapeSource([TARGET])
        reference = _figures_of(
            [(100.0, _read(reference_source, WHOLE, 100.0)), (110.0, _read(reference_source, NEXT, 110.0))]
        )[-1]
        asyncio.run(reference_source.aclose())
        figures = _figures_of(
            [(100.0, replace(first, name="r", url=TARGET.url)), (110.0, replace(second, name="r", url=TARGET.url))]
        )[-1]
        assert replace(figures, error="") == replace(reference, error="")
