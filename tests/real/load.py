"""A known load on the real vLLM, with a watch on its queue and KV cache while it runs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from console.bench.client import LoadResult, StreamingClient, prompts

from . import raw_metrics
from .vllm_harness import SERVED_MODEL

# 40 requests, 8 in flight against --max-num-seqs 4: half of them always wait.
# Prompts of ~80 tokens plus 300 output tokens need 3-4 of the 16 KV blocks each,
# so four running requests fill the cache.
REQUESTS = 40
CONCURRENCY = 8
MAX_TOKENS = 300
PROMPT_WORDS = 40
ACCEPT_TEXT = {"Accept": "text/plain"}


@dataclass
class Peaks:
    waiting: float = 0.0
    kv_usage: float = 0.0
    running: float = 0.0
    polls: int = 0


async def scrape_text(url: str) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(url, headers=ACCEPT_TEXT)
        response.raise_for_status()
        return response.text


async def watch_peaks(metrics_url: str, peaks: Peaks, every: float = 0.25) -> None:
    """Record the highest queue, running count and KV usage seen on /metrics until cancelled."""
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            try:
                text = (await http.get(metrics_url, headers=ACCEPT_TEXT)).text
            except httpx.HTTPError:
                text = None  # a busy server may answer late; keep watching
            if text is not None:
                peaks.polls += 1
                peaks.waiting = max(peaks.waiting, raw_metrics.total(text, "vllm:num_requests_waiting"))
                peaks.running = max(peaks.running, raw_metrics.total(text, "vllm:num_requests_running"))
                kv = max((v for _l, v in raw_metrics.samples(text, "vllm:kv_cache_usage_perc")), default=0.0)
                peaks.kv_usage = max(peaks.kv_usage, kv)
            await asyncio.sleep(every)


async def drive(
    base_url: str,
    requests: int = REQUESTS,
    concurrency: int = CONCURRENCY,
    max_tokens: int = MAX_TOKENS,
    first: int = 0,
) -> LoadResult:
    client = StreamingClient(base_url, SERVED_MODEL)
    return await client.run(
        prompts(first + requests, PROMPT_WORDS)[first:], concurrency=concurrency, max_tokens=max_tokens
    )


async def settled(metrics_url: str, polls: int = 100, every: float = 0.05) -> str:
    """/metrics once two reads in a row agree on the finished-request count and nothing runs:
    the engine records a request's stats just after its last token goes out."""
    previous = None
    for _ in range(polls):
        text = await scrape_text(metrics_url)
        done = raw_metrics.total(text, "vllm:request_success_total")
        idle = (
            raw_metrics.total(text, "vllm:num_requests_running") == 0
            and raw_metrics.total(text, "vllm:num_requests_waiting") == 0
        )
        if idle and previous == done:
            return text
        previous = done if idle else None
        await asyncio.sleep(every)
    raise AssertionError(f"vLLM did not settle after the load within {polls * every:.0f} s")
