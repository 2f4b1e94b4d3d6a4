"""The poll loop: windows over a ring of samples, restarts, stale data, polls that never overlap."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from aiohttp import web

from console.live.handle import FleetHandle
from console.live.watcher import Watcher
from console.metrics.exposition import parse
from console.metrics.figures import Figures, FleetFigures
from console.metrics.vllm import sample_from_page
from console.sources import promql
from console.sources.prometheus import PrometheusSource
from console.sources.scrape import ScrapeSource
from console.targets import Target, TargetResult
from console.tui.app import ConsoleApp
from tests.metrics.pages import V032_IDLE, V032_SMALL_KV, advance, sample_text
from tests.sources.servers import pages_in_turn, serve
from tests.sources.test_prometheus_source import answers_for
from tests.tui.conftest import settle
from tests.tui.fakes import FakeClock, FakeWatcher, normal_fleet


class ScriptedSource:
    """A sample source that replays pages (one per poll) for one replica, failing where told."""

    name = "scrape"

    def __init__(self, pages: list[str | None]):
        self.pages = pages
        self.polls = 0

    async def fetch(self, now: float) -> list[TargetResult]:
        text = self.pages[min(self.polls, len(self.pages) - 1)]
        self.polls += 1
        if text is None:
            return [TargetResult("r", "u", "timeout", None, "no answer", now)]
        return [TargetResult("r", "u", "up", sample_from_page(parse(text), now), "", now)]

    async def aclose(self) -> None:
        pass


class Clock:
    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def growing_pages(count: int) -> list[str]:
    """Page i has i*i prompt tokens more than the base: the rate tells which pair was used."""
    base = sample_text(V032_SMALL_KV)
    return [advance(base, counters={"vllm:prompt_tokens_total": float(i * i)}) for i in range(count)]


async def run_polls(watcher: Watcher, clock: Clock, polls: int, step: float = 1.0) -> list[FleetFigures]:
    out = []
    for _ in range(polls):
        out.append((await watcher.poll()).figures)
        clock.now += step
    return out


async def test_rates_use_the_oldest_sample_inside_the_window():
    clock = Clock()
    watcher = Watcher(ScriptedSource(growing_pages(30)), window_seconds=10, interval_seconds=1, clock=clock)
    figures = await run_polls(watcher, clock, 25)
    # Poll 24 (t=24) against poll 14 (t=14): (24^2 - 14^2) / 10 s.
    assert figures[24].replicas[0].prompt_tokens_per_second == pytest.approx((24**2 - 14**2) / 10)
    assert figures[0].replicas[0].prompt_tokens_per_second is None  # one sample: unknown
    assert figures[1].replicas[0].prompt_tokens_per_second == pytest.approx(1.0)


async def test_a_restart_is_shown_once_then_rates_resume():
    base = sample_text(V032_SMALL_KV)
    other = sample_text(V032_IDLE)  # a different process
    pages = [
        base,
        advance(base, counters={"vllm:prompt_tokens_total": 10.0}),
        other,
        advance(other, counters={"vllm:prompt_tokens_total": 30.0}),
    ]
    clock = Clock()
    watcher = Watcher(ScriptedSource(pages), window_seconds=60, interval_seconds=1, clock=clock)
    figures = [f.replicas[0] for f in await run_polls(watcher, clock, 4)]
    assert [f.state for f in figures] == ["up", "up", "restarted", "up"]
    assert figures[2].prompt_tokens_per_second is None
    assert figures[3].prompt_tokens_per_second == pytest.approx(30.0)  # only the new process counts


async def test_a_failed_poll_keeps_the_state_and_the_age_of_the_last_good_data():
    clock = Clock()
    watcher = Watcher(
        ScriptedSource([sample_text(V032_SMALL_KV), None]), window_seconds=10, interval_seconds=1, clock=clock
    )
    figures = await run_polls(watcher, clock, 4)
    last = figures[-1].replicas[0]
    assert last.state == "timeout" and last.running is None
    assert last.data_age_seconds == pytest.approx(3.0)
    assert figures[-1].fleet.state == "down"


class FixedFigures:
    """A figure source (as the Prometheus source is) answering with data of a given age and state."""

    name = "prometheus"

    def __init__(self, age: float, state: str):
        self.age = age
        self.state = state

    async def collect(self, now: float) -> FleetFigures:
        replica = Figures(name="r", url="u", state=self.state, running=2.0, data_age_seconds=self.age)
        return FleetFigures(60.0, "prometheus", (replica,), replace(replica, name="fleet"), now)


@pytest.mark.parametrize("age,state", [(1.0, "up"), (30.0, "up"), (90.0, "stale")])
async def test_a_figure_source_judges_staleness_itself(age, state):
    # 30 s is fifteen 2-second intervals: still current for Prometheus, which scrapes every 15-60 s.
    watcher = Watcher(FixedFigures(age, state), window_seconds=60, interval_seconds=2)
    figures = (await watcher.poll()).figures
    assert figures.replicas[0].state == state and figures.source == "prometheus"


class ScrapingPrometheus:
    """Stands in for PrometheusConnect: every target was last scraped on a 15-second beat."""

    SCRAPE_INTERVAL = 15.0

    def __init__(self, instances: list[str]):
        self.answers = answers_for(instances)
        self.instances = instances
        self.by_query: dict[str, str] = {}
        self.ages: list[float] = []

    def custom_query(self, query, params=None, timeout=None):
        purpose = self.by_query[query]
        if purpose != "up":
            return self.answers[purpose]
        at = float(params["time"])
        scraped = at - at % self.SCRAPE_INTERVAL
        self.ages.append(at - scraped)
        rows = []
        for instance in self.instances:
            rows.append({"metric": {promql.FIGURE_LABEL: "up", "instance": instance}, "value": [at, "1"]})
            rows.append(
                {"metric": {promql.FIGURE_LABEL: "scraped_at", "instance": instance}, "value": [at, str(scraped)]}
            )
        return rows


async def test_prometheus_replicas_between_scrapes_stay_up_on_a_short_interval():
    client = ScrapingPrometheus(["10.0.0.1:8000", "10.0.0.2:8000"])
    source = PrometheusSource("http://prometheus.invalid", 'job="vllm"', window_seconds=60, client=client)
    client.by_query = {query: purpose for purpose, query in source.queries.items()}
    clock = Clock(1_800_000_000.0)
    watcher = Watcher(source, window_seconds=60, interval_seconds=2, clock=clock)
    figures = await run_polls(watcher, clock, 16, step=2.0)
    # The polls met every data age a 15-second scrape gives, far past three 2-second intervals.
    assert min(client.ages) == 0.0 and max(client.ages) == 14.0
    assert {r.state for f in figures for r in f.replicas} == {"up"}
    assert all(f.fleet.state == "up" and f.fleet.requests_per_second == pytest.approx(4.0) for f in figures)
    assert max(r.data_age_seconds for f in figures for r in f.replicas) == pytest.approx(14.0)


async def test_refreshes_further_apart_than_the_window_still_give_figures_over_their_span():
    clock = Clock()
    watcher = Watcher(ScriptedSource(growing_pages(10)), window_seconds=2, interval_seconds=5, clock=clock)
    figures = await run_polls(watcher, clock, 4, step=5.0)
    assert figures[0].replicas[0].prompt_tokens_per_second is None
    # Poll 3 (t=15) against poll 2 (t=10), the last refresh: (3^2 - 2^2) / 5 s.
    assert figures[3].replicas[0].prompt_tokens_per_second == pytest.approx((9 - 4) / 5)
    assert figures[3].fleet.prompt_tokens_per_second == pytest.approx((9 - 4) / 5)
    assert figures[3].window_seconds == 5.0  # the span the figures cover, not the 2 s asked for
    assert watcher.ring_length("u") == 2


async def test_a_window_wider_than_the_refresh_reports_itself():
    clock = Clock()
    watcher = Watcher(ScriptedSource(growing_pages(30)), window_seconds=10, interval_seconds=1, clock=clock)
    figures = await run_polls(watcher, clock, 25)
    assert {f.window_seconds for f in figures} == {10}


async def test_data_from_before_a_gap_is_not_the_older_sample():
    pages = growing_pages(4)
    clock = Clock()
    watcher = Watcher(ScriptedSource(pages), window_seconds=10, interval_seconds=1, clock=clock)
    first = (await watcher.poll()).figures
    clock.now += 30.0  # the replica was unreachable for half a minute
    after_gap = (await watcher.poll()).figures
    clock.now += 1.0
    resumed = (await watcher.poll()).figures
    assert first.replicas[0].prompt_tokens_per_second is None
    assert after_gap.replicas[0].prompt_tokens_per_second is None  # not a rate averaged over the gap
    assert after_gap.window_seconds == 10
    assert resumed.replicas[0].prompt_tokens_per_second == pytest.approx((4 - 1) / 1)


def window_app(window: float | None, interval: float) -> ConsoleApp:
    clock = FakeClock()
    watcher = FakeWatcher(normal_fleet(), clock=clock)
    if window is not None:
        watcher.window_seconds = window
    return ConsoleApp([FleetHandle("assistant", None, watcher)], clock=clock, interval=interval)


@pytest.mark.parametrize("window,start,cap", [(20.0, 2.0, 10.0), (None, 2.0, 60.0), (20.0, 30.0, 30.0)])
async def test_slower_stops_at_half_the_window(window, start, cap):
    app = window_app(window, start)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        steps = []
        for _ in range(25):
            await pilot.press("plus")
            steps.append(app.interval)
    assert steps[-1] == cap and max(steps) == cap
    assert steps == sorted(steps)  # "+" never makes refreshes faster, even above the cap


async def test_polls_never_overlap():
    in_flight = {"now": 0, "max": 0, "total": 0}

    async def handler(request):
        in_flight["now"] += 1
        in_flight["total"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        await asyncio.sleep(0.2)
        in_flight["now"] -= 1
        return web.Response(text=sample_text(V032_SMALL_KV))

    async with serve(handler) as url:
        watcher = Watcher(ScrapeSource([Target("r", url + "/metrics")], timeout=5), window_seconds=10)
        try:
            results = await asyncio.gather(*(watcher.poll() for _ in range(3)))
        finally:
            await watcher.aclose()
    assert in_flight["total"] == 3 and in_flight["max"] == 1
    assert all(r.figures.replicas[0].state == "up" for r in results)


async def test_a_scraped_counter_reset_is_a_restart():
    base = sample_text(V032_SMALL_KV)
    later = advance(base, counters={"vllm:prompt_tokens_total": 100.0})
    # Same process start time, but the counter went down: the engine was reset.
    reset = advance(base, counters={"vllm:prompt_tokens_total": -5000.0})
    async with serve(pages_in_turn(base, later, reset)) as url:
        watcher = Watcher(ScrapeSource([Target("r", url + "/metrics")]), window_seconds=60)
        try:
            states = [(await watcher.poll()).figures.replicas[0] for _ in range(3)]
        finally:
            await watcher.aclose()
    assert [s.state for s in states] == ["up", "up", "restarted"]
    assert states[1].prompt_tokens_per_second > 0 and states[2].prompt_tokens_per_second is None


async def test_a_bigger_model_behind_the_same_url_is_a_restart_not_nine_million_requests_a_second():
    # A 7B replaced by a 70B on the same address, its counters larger, the start time not on the page.
    base = (
        "\n".join(row for row in sample_text(V032_SMALL_KV).splitlines() if not row.startswith("process_start")) + "\n"
    )
    later = advance(base, counters={"vllm:request_success_total": 1.0})
    swapped = advance(
        base.replace('model_name="tiny"', 'model_name="llama-70b"'),
        counters={"vllm:request_success_total": 90_528_700.0},
    )
    after = advance(swapped, counters={"vllm:request_success_total": 5.0})
    clock = Clock()
    watcher = Watcher(
        ScriptedSource([base, later, swapped, after]), window_seconds=60, interval_seconds=10, clock=clock
    )
    figures = [f.replicas[0] for f in await run_polls(watcher, clock, 4, step=10.0)]
    assert [f.state for f in figures] == ["up", "up", "restarted", "up"]
    assert "model tiny -> llama-70b" in figures[2].error
    assert figures[2].requests_per_second is None  # never a rate across the change
    assert figures[3].requests_per_second == pytest.approx(5 * 5 / 10.0)  # the new process's own, next refresh


async def test_an_infinite_gauge_on_one_replica_does_not_take_the_console_down():
    hostile = sample_text(V032_SMALL_KV).replace(
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} +Inf',
    )
    async with serve(pages_in_turn(hostile)) as url:
        watcher = Watcher(ScrapeSource([Target("r", url + "/metrics")]), window_seconds=60)
        try:
            figures = [(await watcher.poll()).figures for _ in range(2)]
        finally:
            await watcher.aclose()
    replica = figures[-1].replicas[0]
    assert replica.state == "up" and replica.waiting is None and figures[-1].fleet.waiting is None
    assert "impossible values shown as unknown" in replica.error and "+Inf" in replica.error


async def test_a_long_window_keeps_a_bounded_ring_and_the_right_span():
    clock = Clock()
    watcher = Watcher(ScriptedSource(growing_pages(400)), window_seconds=300, interval_seconds=1, clock=clock)
    figures = await run_polls(watcher, clock, 400)
    assert watcher.ring_length("u") <= 32
    # The older sample is the oldest kept one inside the window: at most 1/30 of it (10 s) late.
    last = figures[-1].replicas[0].prompt_tokens_per_second
    candidates = [(399**2 - i**2) / (399 - i) for i in range(99, 109)]
    assert any(last == pytest.approx(c) for c in candidates)
