"""What the replica's own /metrics said during one benchmark step, from scrapes taken while it ran.

Pure: it reads ReplicaSamples (console/metrics) taken by the caller, so the limit
diagnosis and the tests need no network. Gauges (KV usage, waiting, running) are
summarised over the step's scrapes; counters and histograms (preemptions, finished
requests, vLLM's own TTFT and TPOT) are the difference between the step's first and
last scrape. vLLM's TTFT is measured inside the server, from the request's arrival
in the engine to its first token: it leaves out the HTTP front end and tokenization,
and so reads lower than the client's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from console.metrics.vllm import ReplicaSample
from console.metrics.window import delta_quantile, histogram_delta


@dataclass(frozen=True)
class ServerStep:
    scrapes: int
    kv_usage_mean: float | None = None
    kv_usage_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    preemptions: float | None = None  # during the step
    finished: float | None = None  # requests the server counted as finished during the step
    generation_tokens: float | None = None
    ttft_p50: float | None = None  # vLLM's own, in the engine
    ttft_p95: float | None = None
    tpot_p50: float | None = None
    tpot_p95: float | None = None
    queue_mean: float | None = None  # seconds waiting before the first schedule, vLLM's own

    def as_dict(self) -> dict:
        return asdict(self)


def _kv(sample: ReplicaSample) -> float | None:
    values = list(sample.kv_usage_by_engine.values())
    return max(values) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _counter(first: ReplicaSample, last: ReplicaSample, name: str) -> float | None:
    old, new = first.counters.get(name), last.counters.get(name)
    if old is None or new is None or new < old:
        return None  # absent, or the process restarted during the step
    return new - old


def server_step(samples: Sequence[ReplicaSample]) -> ServerStep:
    """The step as the server saw it, from its scrapes in time order (none: nothing known)."""
    if not samples:
        return ServerStep(scrapes=0)
    kv = [v for v in (_kv(s) for s in samples) if v is not None]
    waiting = [s.waiting for s in samples if s.waiting is not None]
    running = [s.running for s in samples if s.running is not None]
    first, last = samples[0], samples[-1]
    ttft = histogram_delta(first.histograms.get("ttft"), last.histograms.get("ttft"))
    tpot = histogram_delta(first.histograms.get("tpot"), last.histograms.get("tpot"))
    queue = histogram_delta(first.histograms.get("queue"), last.histograms.get("queue"))
    queue_mean = (
        queue.sum / queue.count
        if queue is not None and queue.sum is not None and queue.count is not None and queue.count > 0
        else None
    )
    two = len(samples) >= 2
    return ServerStep(
        scrapes=len(samples),
        kv_usage_mean=_mean(kv),
        kv_usage_max=max(kv) if kv else None,
        waiting_mean=_mean(waiting),
        waiting_max=max(waiting) if waiting else None,
        running_mean=_mean(running),
        running_max=max(running) if running else None,
        preemptions=_counter(first, last, "preemptions") if two else None,
        finished=_counter(first, last, "requests") if two else None,
        generation_tokens=_counter(first, last, "generation_tokens") if two else None,
        ttft_p50=delta_quantile(0.5, ttft) if two else None,
        ttft_p95=delta_quantile(0.95, ttft) if two else None,
        tpot_p50=delta_quantile(0.5, tpot) if two else None,
        tpot_p95=delta_quantile(0.95, tpot) if two else None,
        queue_mean=queue_mean if two else None,
    )
