"""A poll never fails as a whole because of one target: hundreds of targets, a share of them hanging, resetting,
closing, trickling or cutting their pages, and connections the HTTP stack refuses to use again."""

from __future__ import annotations

import collections
from pathlib import Path

import httpcore
import pytest

from console.sources.scrape import ScrapeSource
from console.targets import Target

from .faulty_fleet import behaviour, faulty_fleet, target_urls
from .servers import serve

PAGE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vllm" / "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"
TARGETS = 256


async def test_a_connection_left_unusable_is_that_targets_state_and_the_next_poll_opens_a_new_one(monkeypatch):
    """httpcore refuses a connection a cancelled request left mid-answer (ConnectionNotAvailable) on every later
    request: seen at a thousand targets with faults. The first connection here is refused so, every time."""
    from aiohttp import web

    from tests.metrics.pages import V032_SMALL_KV, sample_text

    refused = []
    real = httpcore.AsyncHTTPConnection.handle_async_request

    async def stuck_first(self, request):
        if not refused or refused[0] is self:
            refused[:1] = [self]
            raise httpcore.ConnectionNotAvailable()
        return await real(self, request)

    monkeypatch.setattr(httpcore.AsyncHTTPConnection, "handle_async_request", stuck_first)

    async def page(request):
        return web.Response(text=sample_text(V032_SMALL_KV))

    async with serve(page) as url:
        source = ScrapeSource([Target("stuck", url + "/metrics"), Target("fine", url + "/metrics?b")], timeout=1.0)
        try:
            first = await source.fetch(now=1.0)
            second = await source.fetch(now=2.0)
        finally:
            await source.aclose()
    assert [r.state for r in first] == ["down", "up"]
    assert "ConnectionNotAvailable" in first[0].error
    assert [r.state for r in second] == ["up", "up"]


@pytest.mark.timeout(120)
async def test_256_targets_with_a_share_faulty_give_every_target_a_state_at_every_poll():
    with faulty_fleet(PAGE) as base:
        urls = target_urls(base, TARGETS)
        source = ScrapeSource([Target(f"t{i}", url) for i, url in enumerate(urls)], timeout=0.5)
        polls = []
        try:
            for k in range(5):
                polls.append(await source.fetch(now=float(k)))
        finally:
            await source.aclose()
    assert len(polls) == 5
    for results in polls:
        assert [r.name for r in results] == [f"t{i}" for i in range(TARGETS)]
        for i, result in enumerate(results):
            kind = behaviour(i)
            if kind in ("hang", "slow"):
                assert result.state == "timeout", (i, kind, result.state, result.error)
            elif kind == "ok":
                assert result.state in ("up", "timeout"), (i, kind, result.state, result.error)
            else:
                assert result.state in ("down", "bad_payload", "timeout"), (i, kind, result.state, result.error)
    # On any machine the well-behaved targets answer once connections are open: at most a few miss a deadline.
    last = collections.Counter(polls[-1][i].state for i in range(TARGETS) if behaviour(i) == "ok")
    assert last["up"] >= 0.9 * sum(last.values()), last
