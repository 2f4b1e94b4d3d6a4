"""The poll loop: windows over a ring of samples, restarts, stale data, polls that never overlap."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from aiohttp import web

from console.metrics.exposition import parse
from console.metrics.figures import Figures, FleetFigures
from console.metrics.vllm import sample_from_page
from console.sources.base import Target, TargetResult
from console.sources.scrape import ScrapeSource
from console.watcher import Watcher

from metrics.pages import V032_IDLE, V032_SMALL_KV, advance, sample_text
from .servers import pages_in_turn, serve


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
        out.append(await watcher.poll())
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
    pages = [base, advance(base, counters={"vllm:prompt_tokens_total": 10.0}), other, advance(other, counters={"vllm:prompt_tokens_total": 30.0})]
    clock = Clock()
    watcher = Watcher(ScriptedSource(pages), window_seconds=60, interval_seconds=1, clock=clock)
    figures = [f.replicas[0] for f in await run_polls(watcher, clock, 4)]
    assert [f.state for f in figures] == ["up", "up", "restarted", "up"]
    assert figures[2].prompt_tokens_per_second is None
    assert figures[3].prompt_tokens_per_second == pytest.approx(30.0)  # only the new process counts


async def test_a_failed_poll_keeps_the_state_and_the_age_of_the_last_good_data():
    clock = Clock()
    watcher = Watcher(ScriptedSource([sample_text(V032_SMALL_KV), None]), window_seconds=10, interval_seconds=1, clock=clock)
    figures = await run_polls(watcher, clock, 4)
    last = figures[-1].replicas[0]
    assert last.state == "timeout" and last.running is None
    assert last.data_age_seconds == pytest.approx(3.0)
    assert figures[-1].fleet.state == "down"


class FixedFigures:
    """A figure source (as the Prometheus source is) answering with data of a given age."""

    name = "prometheus"

    def __init__(self, age: float):
        self.age = age

    async def collect(self, now: float) -> FleetFigures:
        replica = Figures(name="r", url="u", state="up", running=2.0, data_age_seconds=self.age)
        return FleetFigures(60.0, "prometheus", (replica,), replace(replica, name="fleet"), now)


@pytest.mark.parametrize("age,state", [(1.0, "up"), (30.0, "stale")])
async def test_old_data_from_a_figure_source_is_marked_stale(age, state):
    watcher = Watcher(FixedFigures(age), window_seconds=60, interval_seconds=2)
    figures = await watcher.poll()
    assert figures.replicas[0].state == state and figures.source == "prometheus"


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
    assert all(r.replicas[0].state == "up" for r in results)


async def test_a_scraped_counter_reset_is_a_restart():
    base = sample_text(V032_SMALL_KV)
    later = advance(base, counters={"vllm:prompt_tokens_total": 100.0})
    # Same process start time, but the counter went down: the engine was reset.
    reset = advance(base, counters={"vllm:prompt_tokens_total": -5000.0})
    async with serve(pages_in_turn(base, later, reset)) as url:
        watcher = Watcher(ScrapeSource([Target("r", url + "/metrics")]), window_seconds=60)
        try:
            states = [(await watcher.poll()).replicas[0] for _ in range(3)]
        finally:
            await watcher.aclose()
    assert [s.state for s in states] == ["up", "up", "restarted"]
    assert states[1].prompt_tokens_per_second > 0 and states[2].prompt_tokens_per_second is None


async def test_a_long_window_keeps_a_bounded_ring_and_the_right_span():
    clock = Clock()
    watcher = Watcher(ScriptedSource(growing_pages(400)), window_seconds=300, interval_seconds=1, clock=clock)
    figures = await run_polls(watcher, clock, 400)
    assert len(watcher._rings["u"]) <= 32
    # The older sample is the oldest kept one inside the window: at most 1/30 of it (10 s) late.
    last = figures[-1].replicas[0].prompt_tokens_per_second
    candidates = [(399**2 - i**2) / (399 - i) for i in range(99, 109)]
    assert any(last == pytest.approx(c) for c in candidates)
