"""`capcon bench --diagnose` against a live replica: the step at the limit rerun with controlled changes.

The same prompts (the same draw from the prompts file, in the same order) are sent in every
rerun at the same rate, where the limit binds (console/bench/diagnosis.limit_rate); a rerun
changes one thing: a client-side cap on requests in flight (half the baseline's, then the batch
size), or the length of every prompt and answer (half: each prompt cut to half its words and half
its max_tokens; double: each prompt's text twice over and twice its max_tokens). Each rerun reads the replica's /metrics and its GPU page
as the sweep's steps do; console/bench/diagnosis.py concludes from the table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from console.bench.diagnosis import BASELINE, Conclusion, Rerun, conclude, planned_changes
from console.bench.gpu_watch import GpuWatch
from console.bench.measure import BenchTargets
from console.bench.prompts import BenchPrompt
from console.bench.runner import Progress, PromptCycle, Step, StepSettings, run_measured_step
from console.bench.stream import SessionClient


def _scaled_text(text: str, factor: float) -> str:
    words = text.split()
    if factor >= 1:
        return " ".join(words * round(factor))
    return " ".join(words[: max(1, round(len(words) * factor))])


def scaled_prompt(prompt: BenchPrompt, factor: float, default_max_tokens: int) -> BenchPrompt:
    """The prompt at `factor` times its length (words) and answer (max_tokens); at least one of each."""
    max_tokens = max(1, round((prompt.max_tokens or default_max_tokens) * factor))
    if prompt.messages is not None:
        messages = []
        for message in prompt.messages:
            content = message.get("content")
            if isinstance(content, list):  # content parts: their text, joined
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            messages.append({**message, "content": _scaled_text(str(content or ""), factor)})
        return replace(prompt, messages=tuple(messages), max_tokens=max_tokens)
    return replace(prompt, prompt=_scaled_text(prompt.prompt or "", factor), max_tokens=max_tokens)


def rerun_row(step: Step, change: str, what: str) -> Rerun:
    """One row of the evidence table from a measured step."""
    f, s = step.figures, step.server
    e2e = [r.e2e for r in f.requests if r.ok and r.e2e is not None]
    return Rerun(
        change=change,
        what=what,
        rate=f.rate,
        sent=f.sent,
        good=f.good,
        failed=f.failed,
        ttft_p95=f.quantile("ttft", 0.95),
        tpot_p95=f.quantile("tpot", 0.95),
        preemptions=s.preemptions,
        running_max=s.running_max,
        waiting_mean=s.waiting_mean,
        kv_usage_max=s.kv_usage_max,
        gpu=step.gpu,
        in_flight_mean=f.rate * sum(e2e) / len(e2e) if e2e else None,
        duration_seconds=f.duration_seconds,
    )


async def run_diagnosis(
    client: SessionClient,
    prompts: list[BenchPrompt],
    rate: float,
    settings: StepSettings,
    targets: BenchTargets,
    stop: asyncio.Event,
    metrics_url: str | None,
    gpu: GpuWatch | None,
    batch_size: int | None,
    progress: Progress | None = None,
    on_rerun: Callable[[Rerun], None] | None = None,
) -> Conclusion | None:
    """The baseline and the four changes at `rate`, with the client open; None when stopped before the baseline."""
    chosen = PromptCycle(prompts, settings.seed).take(settings.count(rate))

    async def measured(what: str, change: str, changed: StepSettings, batch: list[BenchPrompt]) -> Rerun:
        step = await run_measured_step(client, batch, rate, changed, targets, stop, metrics_url, gpu, progress)
        row = rerun_row(step, change, what)
        if on_rerun is not None:
            on_rerun(row)
        return row

    base = await measured("as the sweep ran it", BASELINE, settings, chosen)
    if stop.is_set():
        return None
    reruns = [base]
    for change in planned_changes(base.in_flight_mean, batch_size):
        if stop.is_set():
            break
        if change.skipped:
            reruns.append(Rerun(change.change, change.what, rate, 0, 0, skipped=change.skipped))
            continue
        changed = replace(
            settings,
            max_concurrency=change.max_concurrency or settings.max_concurrency,
            hold_counts=change.max_concurrency is not None,  # a cap's wait is the clients' (runner.StepSettings)
        )
        batch = (
            chosen
            if change.length_factor == 1.0
            else [scaled_prompt(p, change.length_factor, settings.max_tokens) for p in chosen]
        )
        reruns.append(await measured(change.what, change.change, changed, batch))
    return conclude(reruns)
