"""One fixed-rate step against a replica, and the sweep of steps: the network side of `capcon bench`.

A step sends `count` requests at the arrival offsets (console/bench/arrivals.py),
at most `max_concurrency` in flight when set (later arrivals wait for a place, as
`vllm bench serve --max-concurrency` does), each streamed by the SessionClient (aiohttp),
while a scraper reads the replica's /metrics every `scrape_every` seconds. When
`stop` is set (Ctrl+C) the step sends no more, drops the requests in flight and
returns what had finished, marked interrupted.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.bench.arrivals import arrival_offsets
from console.bench.boundary import meets_share
from console.bench.client import RequestResult
from console.bench.diagnosis import GpuFigures
from console.bench.gpu_watch import GpuWatch
from console.bench.measure import BenchTargets, StepFigures, figures, is_good, step_figures
from console.bench.prompts import BenchPrompt
from console.bench.server_view import ServerStep, server_step
from console.bench.stream import SessionClient
from console.bench.sweep import Sweep
from console.metrics.vllm import ReplicaSample
from console.sources.scrape import ScrapeSource
from console.targets import Target, target_name

# Progress: (rate, requests done, requests in the step, good so far).
Progress = Callable[[float, int, int, int], None]


@dataclass(frozen=True)
class StepSettings:
    seconds: float = 60.0  # each step sends rate x seconds requests ...
    min_requests: int = 100  # ... and at least this many ...
    max_requests: int = 100_000  # ... and at most this many
    burstiness: float = 1.0
    max_concurrency: int | None = None
    # A diagnosis' capped rerun: the wait for a place under the cap counts in TTFT and E2E, as the clients of a
    # replica admitting fewer would wait in its queue (vllm bench serve's --max-concurrency starts the clock at send).
    hold_counts: bool = False
    max_tokens: int = 128  # for prompts that name none
    ignore_eos: bool = False
    scrape_every: float = 1.0
    seed: int = 0

    def count(self, rate: float) -> int:
        if math.isinf(rate):  # the throughput mode: a fixed batch
            return self.min_requests
        return max(self.min_requests, min(self.max_requests, round(rate * self.seconds)))


@dataclass(frozen=True)
class Step:
    figures: StepFigures
    server: ServerStep
    holds: bool
    gpu: GpuFigures = field(default_factory=GpuFigures)  # the GPU's own counters (unknown without a page)


@dataclass
class PromptCycle:
    """The prompts in a seeded order, handed out round after round; steps continue where the last stopped."""

    prompts: Sequence[BenchPrompt]
    seed: int = 0
    _order: list[int] = field(default_factory=list)
    _next: int = 0

    def __post_init__(self) -> None:
        self._order = list(range(len(self.prompts)))
        random.Random(self.seed).shuffle(self._order)

    def take(self, count: int) -> list[BenchPrompt]:
        out = []
        for _ in range(count):
            out.append(self.prompts[self._order[self._next % len(self._order)]])
            self._next += 1
        return out


class MetricsWatch:
    """Scrapes one replica's /metrics in the background; `take()` returns the samples since the last take."""

    def __init__(self, metrics_url: str, every: float) -> None:
        self.source = ScrapeSource([Target(target_name(metrics_url), metrics_url)], timeout=max(1.0, every))
        self.every = every
        self.samples: list[ReplicaSample] = []
        self.errors: list[str] = []
        self._task: asyncio.Task | None = None

    async def scrape_once(self) -> None:
        (result,) = await self.source.fetch(time.time())
        if result.sample is not None:
            self.samples.append(result.sample)
        elif result.error:
            self.errors.append(result.error)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.scrape_once()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="capcon-bench-metrics")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def take(self) -> list[ReplicaSample]:
        """The samples since the last take, with one more scrape now (so a step ends on its own reading)."""
        await self.scrape_once()
        taken, self.samples = self.samples, self.samples[-1:]
        return taken

    async def aclose(self) -> None:
        await self.stop()
        await self.source.aclose()


async def run_step(
    client: SessionClient,
    prompts: Sequence[BenchPrompt],
    rate: float,
    settings: StepSettings,
    targets: BenchTargets,
    stop: asyncio.Event,
    progress: Progress | None = None,
) -> tuple[StepFigures, list[RequestResult]]:
    """Send `prompts` at `rate`; the figures of what finished (all of it, unless `stop` was set)."""
    offsets = arrival_offsets(len(prompts), rate, settings.burstiness, random.Random(f"{settings.seed}:{rate}"))
    gate = asyncio.Semaphore(settings.max_concurrency) if settings.max_concurrency else None
    results: list[RequestResult] = []
    good = 0
    started = time.perf_counter()

    async def one(prompt: BenchPrompt) -> None:
        nonlocal good
        max_tokens = prompt.max_tokens or settings.max_tokens
        if gate is not None:
            arrived = time.perf_counter()
            async with gate:
                result = await client.complete(prompt.prompt or "", max_tokens, settings.ignore_eos, prompt.messages)
            if settings.hold_counts:
                result = with_hold(result, result.started - arrived)
        else:
            result = await client.complete(prompt.prompt or "", max_tokens, settings.ignore_eos, prompt.messages)
        results.append(result)
        if progress is not None:
            good += is_good(figures(result), targets)
            progress(rate, len(results), len(prompts), good)

    tasks: list[asyncio.Task] = []
    stopper = asyncio.create_task(stop.wait())
    interrupted = False
    try:
        for prompt, offset in zip(prompts, offsets):
            delay = started + offset - time.perf_counter()
            if delay > 0:
                await asyncio.wait({stopper}, timeout=delay)
            if stop.is_set():
                interrupted = True
                break
            tasks.append(asyncio.create_task(one(prompt)))
        if tasks and not interrupted:
            # return_exceptions: a request cancelled by Ctrl+C is an outcome here, not an error to log.
            everything = asyncio.gather(*tasks, return_exceptions=True)
            # Futures of two result types: asyncio.wait's own parameter is a set of Future[Any].
            first_done: set[asyncio.Future[Any]] = {stopper, everything}
            await asyncio.wait(first_done, return_when=asyncio.FIRST_COMPLETED)
            interrupted = stop.is_set() and not all(t.done() for t in tasks)
    finally:
        stopper.cancel()
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    duration = time.perf_counter() - started
    finished = list(results)
    return step_figures(
        rate, finished, targets, duration, sent=len(finished) if interrupted else len(prompts), interrupted=interrupted
    ), finished


def with_hold(result: RequestResult, held: float) -> RequestResult:
    """The request as its client saw it from its arrival: `held` seconds waiting for a place come first."""
    if not held > 0:
        return result
    return replace(
        result,
        started=result.started - held,
        e2e_seconds=result.e2e_seconds + held,
        ttft_seconds=None if result.ttft_seconds is None else result.ttft_seconds + held,
        last_token_seconds=None if result.last_token_seconds is None else result.last_token_seconds + held,
    )


async def run_sweep(
    client: SessionClient,
    prompts: Sequence[BenchPrompt],
    targets: BenchTargets,
    settings: StepSettings,
    sweep: Sweep,
    stop: asyncio.Event,
    metrics_url: str | None,
    progress: Progress | None = None,
    on_step: Callable[[Step], None] | None = None,
    fixed_rate: float | None = None,
    gpu: GpuWatch | None = None,
    keep_open: bool = False,
) -> list[Step]:
    """Measure rate after rate as `sweep` asks (or one `fixed_rate`) until it is done or `stop` is set.

    `gpu` reads the replica's GPU page beside /metrics; `keep_open` leaves the client open for reruns after it.
    """
    cycle = PromptCycle(prompts, settings.seed)
    steps: list[Step] = []
    watch = MetricsWatch(metrics_url, settings.scrape_every) if metrics_url else None
    try:
        if not keep_open:
            await client.__aenter__()
        try:
            if watch is not None:
                await watch.scrape_once()
                watch.start()
            if gpu is not None:
                gpu.start()
            while not stop.is_set():
                rate = fixed_rate if fixed_rate is not None else sweep.next_rate()
                if rate is None or (fixed_rate is not None and steps):
                    break
                if watch is not None:
                    await watch.take()  # the step starts from a fresh reading
                if gpu is not None:
                    await gpu.take()
                measured, _ = await run_step(
                    client, cycle.take(settings.count(rate)), rate, settings, targets, stop, progress
                )
                samples = await watch.take() if watch is not None else []
                gpu_figures = await gpu.take() if gpu is not None else GpuFigures(note="no GPU page")
                if measured.sent == 0:
                    break
                holds = meets_share(measured.good, measured.sent, targets.share)
                step = Step(measured, server_step(samples), holds, gpu_figures)
                steps.append(step)
                if on_step is not None:
                    on_step(step)
                if measured.interrupted:
                    break
                sweep.record(rate, holds)
        finally:
            if not keep_open:
                await client.__aexit__(None, None, None)
    finally:
        if watch is not None:
            await watch.aclose()
        if gpu is not None:
            await gpu.stop()
    return steps


async def run_measured_step(
    client: SessionClient,
    prompts: Sequence[BenchPrompt],
    rate: float,
    settings: StepSettings,
    targets: BenchTargets,
    stop: asyncio.Event,
    metrics_url: str | None,
    gpu: GpuWatch | None,
    progress: Progress | None = None,
) -> Step:
    """One step with the replica's /metrics and GPU page read while it runs (a --diagnose rerun); client open."""
    watch = MetricsWatch(metrics_url, settings.scrape_every) if metrics_url else None
    try:
        if watch is not None:
            await watch.scrape_once()
            watch.start()
        if gpu is not None:
            await gpu.take()
            gpu.start()
        measured, _ = await run_step(client, prompts, rate, settings, targets, stop, progress)
        samples = await watch.take() if watch is not None else []
        gpu_figures = await gpu.take() if gpu is not None else GpuFigures(note="no GPU page")
    finally:
        if watch is not None:
            await watch.aclose()
        if gpu is not None:
            await gpu.stop()
    return Step(measured, server_step(samples), meets_share(measured.good, measured.sent, targets.share), gpu_figures)
