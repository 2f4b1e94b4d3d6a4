"""Which limit the replica hit when goodput fell, as the method reads the server's hints.

(docs/method.md, 'Measuring a replica's goodput'.)

Queueing while KV cache is nearly full (or requests preempted) points at memory;
decoding slower than the TPOT target while KV is free points at compute; both
can happen at once. Hints, not verdicts: the text says what to check next.
Pure: it reads the client's figures and the server's view of the step that fell.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.bench.boundary import within
from console.bench.measure import BenchTargets, StepFigures
from console.bench.server_view import ServerStep

KV_NEARLY_FULL = 0.90  # vLLM preempts at 100 %; past 90 % a queue is waiting for blocks
QUEUEING_WAITING = 1.0  # requests waiting on average over the step


@dataclass(frozen=True)
class Misses:
    ttft: int
    tpot: int
    e2e: int
    failed: int


def misses(step: StepFigures, targets: BenchTargets) -> Misses:
    """How many requests missed each target (one request may miss several)."""
    done = [r for r in step.requests if r.ok]
    return Misses(
        ttft=sum(1 for r in done if r.ttft is not None and not within(r.ttft, targets.ttft)),
        tpot=sum(1 for r in done if r.tpot is not None and not within(r.tpot, targets.tpot)),
        e2e=sum(1 for r in done if targets.e2e is not None and r.e2e is not None and not within(r.e2e, targets.e2e)),
        failed=step.failed,
    )


@dataclass(frozen=True)
class Diagnosis:
    limit: str  # "memory", "compute", "memory and compute", "queueing", "errors", "unknown"
    reasons: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"limit": self.limit, "reasons": list(self.reasons)}


def diagnose(step: StepFigures, server: ServerStep, targets: BenchTargets) -> Diagnosis:
    """The limit behind the first step whose goodput fell under the share."""
    missed = misses(step, targets)
    reasons: list[str] = []
    if missed.failed and missed.failed >= max(missed.ttft, missed.tpot, missed.e2e):
        reasons.append(f"{missed.failed} of {step.sent} requests failed (errors or refused): check the server's log")
        return Diagnosis("errors", tuple(reasons))
    said = []
    for name, count in (("TTFT", missed.ttft), ("TPOT", missed.tpot), ("E2E", missed.e2e)):
        if count:
            said.append(f"{count} missed {name}")
    if said:
        reasons.append(f"of {step.sent} requests: " + ", ".join(said))
    if server.scrapes == 0:
        reasons.append("no /metrics read during the step: the server's side is unknown")
        return Diagnosis("unknown", tuple(reasons))
    kv_full = server.kv_usage_max is not None and server.kv_usage_max >= KV_NEARLY_FULL
    preempted = bool(server.preemptions)
    queueing = server.waiting_mean is not None and server.waiting_mean >= QUEUEING_WAITING
    slow_decode = missed.tpot > 0
    memory = preempted or (queueing and kv_full)
    compute = slow_decode and not kv_full
    if kv_full or preempted:
        reasons.append(
            f"KV cache up to {server.kv_usage_max:.0%}" if server.kv_usage_max is not None else "KV cache unknown"
        )
    if preempted:
        reasons.append(f"{server.preemptions:.0f} preemptions")
    if server.waiting_mean is not None:
        reasons.append(f"{server.waiting_mean:.1f} waiting on average (at most {server.waiting_max:.0f})")
    if memory and compute:
        reasons.append("both move: repeat with a lower --max-concurrency and with shorter prompts to see which one")
        return Diagnosis("memory and compute", tuple(reasons))
    if memory:
        reasons.append("queueing with KV nearly full points at memory: FP8 KV, a shorter context cap, or more GPUs")
        return Diagnosis("memory", tuple(reasons))
    if compute:
        kv = f"{server.kv_usage_max:.0%}" if server.kv_usage_max is not None else "unknown"
        reasons.append(f"decode slower than the TPOT target with KV free (at most {kv}) points at compute")
        return Diagnosis("compute", tuple(reasons))
    if queueing:
        running = f"{server.running_max:.0f}" if server.running_max is not None else "unknown"
        reasons.append(
            f"queueing with KV free: the batch is at its cap ({running} running; max_num_seqs) "
            "or prefill holds the queue"
        )
        return Diagnosis("queueing", tuple(reasons))
    reasons.append("the server's gauges did not move: check compute and memory-bandwidth use directly")
    return Diagnosis("unknown", tuple(reasons))
