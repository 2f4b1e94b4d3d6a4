"""Per-request latency figures and goodput, with `vllm bench serve`'s definitions.

TTFT: send to the first streamed chunk carrying a choice. E2E (vLLM's "latency"):
send to the last such chunk. TPOT: (E2E - TTFT) / (output tokens - 1), 0 for an
answer of one token (as vLLM counts it for goodput). ITL: the gaps between chunks.
Output tokens are the server's own count (its `usage` chunk), else the chunks seen.
A request is good when it succeeded and met every target; goodput share = good
requests / requests sent (a failed request is a miss, as a user sees it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from console.bench.boundary import within
from console.bench.client import RequestResult, percentile
from console.errors import UserError
from console.plan.model import Workload


@dataclass(frozen=True)
class BenchTargets:
    """What a good request meets: seconds; `e2e` optional; `share` of requests that must be good."""

    ttft: float
    tpot: float
    e2e: float | None = None
    share: float = 0.99

    def as_dict(self) -> dict:
        return {
            "ttft_seconds": self.ttft,
            "tpot_seconds": self.tpot,
            "e2e_seconds": self.e2e,
            "goodput_share": self.share,
        }


def targets_from(
    workload: Workload | None,
    ttft: float | None = None,
    tpot: float | None = None,
    e2e: float | None = None,
    share: float | None = None,
) -> BenchTargets:
    """The plan workload's targets, each overridden by the flag given; UserError when TTFT or TPOT has neither."""
    plan = workload.targets if workload is not None else None
    ttft = ttft if ttft is not None else (plan.ttft_p95_seconds if plan else None)
    tpot = tpot if tpot is not None else (plan.tpot_p95_seconds if plan else None)
    missing = [name for name, value in (("--ttft", ttft), ("--tpot", tpot)) if value is None]
    if missing:
        raise UserError(
            f"no latency target for {' and '.join(missing)}; expected --plan PLAN (its workload's targets) "
            "or --ttft SECONDS and --tpot SECONDS"
        )
    assert ttft is not None and tpot is not None  # for mypy: `missing` is empty
    return BenchTargets(
        ttft=ttft,
        tpot=tpot,
        e2e=e2e if e2e is not None else (plan.e2e_p95_seconds if plan else None),
        share=share if share is not None else (plan.goodput_share if plan else 0.99),
    )


@dataclass(frozen=True)
class RequestFigures:
    ok: bool
    ttft: float | None
    tpot: float | None
    e2e: float | None
    itl: tuple[float, ...]
    output_tokens: int
    prompt_tokens: int | None
    error: str = ""


def figures(result: RequestResult) -> RequestFigures:
    """One request's figures as vLLM's benchmark computes them."""
    if not result.ok or result.ttft_seconds is None:
        return RequestFigures(False, None, None, None, (), 0, result.prompt_tokens, result.error or "failed")
    latency = result.last_token_seconds if result.last_token_seconds is not None else result.e2e_seconds
    chunks = len(result.chunk_gaps_seconds) + 1
    tokens = result.output_tokens if result.output_tokens is not None else chunks
    tpot = (latency - result.ttft_seconds) / (tokens - 1) if tokens > 1 else 0.0
    return RequestFigures(
        True, result.ttft_seconds, tpot, latency, result.chunk_gaps_seconds, tokens, result.prompt_tokens
    )


def is_good(request: RequestFigures, targets: BenchTargets) -> bool:
    if not request.ok or request.ttft is None or request.tpot is None or request.e2e is None:
        return False
    if not within(request.ttft, targets.ttft) or not within(request.tpot, targets.tpot):
        return False
    return targets.e2e is None or within(request.e2e, targets.e2e)


def wilson_interval(good: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95 % interval of a share measured as good / total (Wilson's): how noisy one step's goodput is."""
    if total == 0:
        return (0.0, 1.0)
    p = good / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class StepFigures:
    """One fixed-rate run: what it sent, what came back, and how much of it was good."""

    rate: float
    sent: int
    requests: tuple[RequestFigures, ...]
    good: int
    duration_seconds: float
    interrupted: bool = False

    @property
    def completed(self) -> int:
        return sum(1 for r in self.requests if r.ok)

    @property
    def failed(self) -> int:
        return self.sent - self.completed

    @property
    def goodput_share(self) -> float:
        return self.good / self.sent if self.sent else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.good, self.sent)

    def quantile(self, name: str, q: float) -> float | None:
        """Quantile of `ttft`, `tpot`, `e2e` over completed requests (TPOT over answers of 2+ tokens, as vLLM's)."""
        values = [
            getattr(r, name)
            for r in self.requests
            if r.ok and getattr(r, name) is not None and (name != "tpot" or r.output_tokens > 1)
        ]
        return percentile(values, q)

    def itl_quantile(self, q: float) -> float | None:
        return percentile([gap for r in self.requests for gap in r.itl], q)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests if r.ok)

    def output_tokens_per_second(self) -> float:
        return self.output_tokens / self.duration_seconds if self.duration_seconds > 0 else 0.0


def step_figures(
    rate: float,
    results: Sequence[RequestResult],
    targets: BenchTargets,
    duration_seconds: float,
    sent: int | None = None,
    interrupted: bool = False,
) -> StepFigures:
    requests = tuple(figures(r) for r in results)
    return StepFigures(
        rate=rate,
        sent=len(requests) if sent is None else sent,
        requests=requests,
        good=sum(1 for r in requests if is_good(r, targets)),
        duration_seconds=duration_seconds,
        interrupted=interrupted,
    )
