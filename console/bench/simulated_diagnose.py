"""`--diagnose`'s reruns on the plan's simulated replica, in simulated time: no server, no clock.

Each rerun sends the same requests at the same arrival offsets a live rerun would
(console/bench/arrivals.py), changed as the rerun says (a concurrency cap held by the client,
as `vllm bench serve --max-concurrency` holds it, the wait for a place counted in TTFT and E2E;
lengths halved or doubled), into a fresh
simulator engine, and reads what a live rerun reads: the client's goodput, TTFT and TPOT,
the server's preemptions, running, waiting and KV gauges, and the GPU's own counters from the
engine's work (console/sim/gpu.py's definitions). Deterministic, so the diagnosis of a plan
known to be memory- or compute-bound can be checked in milliseconds.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from console.bench.arrivals import arrival_offsets
from console.bench.boundary import within
from console.bench.client import percentile
from console.bench.diagnosis import BASELINE, Conclusion, GpuFigures, Rerun, conclude, planned_changes
from console.bench.measure import BenchTargets
from console.bench.runner import StepSettings
from console.bench.simulated import DRAIN_SECONDS, Lengths
from console.plan.model import Plan
from console.sim.engine import Engine, SimRequest
from console.sim.shape import replica_shape

SAMPLES = 400  # gauge readings over a rerun, evenly spaced in simulated time


def scaled_lengths(lengths: Sequence[Lengths], factor: float) -> list[Lengths]:
    """Prompts and answers at `factor` times their length (at least one token each)."""
    return [(max(1, round(p * factor)), max(1, round(a * factor)), max(1, round(m * factor))) for p, a, m in lengths]


def simulated_rerun(
    plan: Plan,
    lengths: Sequence[Lengths],
    rate: float,
    settings: StepSettings,
    targets: BenchTargets,
    change: str = BASELINE,
    what: str = "as the sweep ran it",
) -> Rerun:
    shape = replica_shape(plan)
    engine = Engine(shape)
    offsets = arrival_offsets(len(lengths), rate, settings.burstiness, random.Random(f"{settings.seed}:{rate}"))
    cap = settings.max_concurrency
    span = (offsets[-1] if offsets else 0.0) or 1.0
    every = span / SAMPLES
    requests: list[SimRequest] = []
    queued: deque[SimRequest] = deque()  # arrived, waiting for a place under the client's cap
    held: dict[int, float] = {}  # seconds each request waited for its place, where that counts
    in_flight: list[SimRequest] = []
    running: list[float] = []
    waiting: list[float] = []
    kv: list[float] = []
    failed = 0
    next_sample = 0.0
    pending = deque(zip(offsets, lengths))

    def send(request: SimRequest, now: float) -> None:
        nonlocal failed
        # The engine sees it when it is sent; its client's clock started at its arrival when a cap's wait counts
        # (a diagnosis' capped rerun), else at the send, as vllm bench serve's does.
        held[id(request)] = now - request.arrival if settings.hold_counts else 0.0
        request.arrival = now
        if engine.validate(request.prompt_tokens, request.max_tokens) is None:
            engine.submit(request)
            in_flight.append(request)
        else:
            failed += 1

    now = 0.0
    while pending or queued or in_flight:
        following = [t for t in (pending[0][0] if pending else None, engine.next_event_time()) if t is not None]
        if not following:
            break
        now = max(now, min(following))
        if now > span + DRAIN_SECONDS:
            break
        engine.advance(now)
        in_flight[:] = [r for r in in_flight if not r.finished]
        while pending and pending[0][0] <= now:
            at, (prompt, answer, max_tokens) = pending.popleft()
            request = SimRequest(f"d{len(requests)}", prompt, answer, max_tokens, at)
            requests.append(request)
            queued.append(request)
        while queued and (cap is None or len(in_flight) < cap):
            send(queued.popleft(), now)
        while now >= next_sample and next_sample <= span:
            running.append(engine.num_running)
            waiting.append(engine.num_waiting + len(queued))
            kv.append(engine.kv_usage)
            next_sample += every
    end = max([r.finished_at or 0.0 for r in requests] + [now])
    busy, read, flops = engine.gpu_work(end)
    done = [r for r in requests if r.finished_reason in ("stop", "length")]

    def client(value: float | None, request: SimRequest) -> float | None:
        return None if value is None else value + held.get(id(request), 0.0)

    ttfts = {id(r): client(r.ttft, r) for r in done}
    e2es = {id(r): client(r.e2e, r) for r in done}
    good = sum(
        1
        for r in done
        if (ttft := ttfts[id(r)]) is not None
        and r.tpot is not None
        and within(ttft, targets.ttft)
        and within(r.tpot, targets.tpot)
        and (targets.e2e is None or ((e2e := e2es[id(r)]) is not None and within(e2e, targets.e2e)))
    )
    gpu = GpuFigures(
        sm_active=min(1.0, busy / end) if end > 0 else None,
        tensor_active=min(1.0, flops / (shape.flops_per_second * end)) if end > 0 else None,
        dram_active=min(1.0, read / (shape.bandwidth_bytes_per_second * end)) if end > 0 else None,
        fb_used_bytes=shape.gpu_memory_bytes * shape.usable_memory_share,
        readings=1,
    )
    return Rerun(
        change=change,
        what=what,
        rate=rate,
        sent=len(requests),
        good=good,
        failed=len(requests) - len(done),
        ttft_p95=percentile([t for t in ttfts.values() if t is not None], 0.95),
        tpot_p95=percentile([r.tpot for r in done if r.tpot is not None and r.generated > 1], 0.95),
        preemptions=float(engine.preemptions),
        running_max=float(max(running)) if running else None,
        waiting_mean=sum(waiting) / len(waiting) if waiting else None,
        kv_usage_max=max(kv) if kv else None,
        gpu=gpu,
        in_flight_mean=rate * sum(e for e in e2es.values() if e is not None) / len(done) if done else None,
        duration_seconds=end - min((r.arrival for r in requests), default=0.0) if requests else None,
    )


def simulated_diagnosis(
    plan: Plan, lengths: Sequence[Lengths], rate: float, settings: StepSettings, targets: BenchTargets
) -> Conclusion:
    """`--diagnose` at `rate` on the simulated replica: the baseline, the four changes, and the conclusion."""
    base = simulated_rerun(plan, lengths, rate, settings, targets)
    reruns = [base]
    for change in planned_changes(base.in_flight_mean, plan.replica.max_num_seqs):
        if change.skipped:
            reruns.append(Rerun(change.change, change.what, rate, 0, 0, skipped=change.skipped))
            continue
        changed = replace(
            settings,
            max_concurrency=change.max_concurrency or settings.max_concurrency,
            hold_counts=change.max_concurrency is not None,
        )
        scaled = scaled_lengths(lengths, change.length_factor) if change.length_factor != 1.0 else list(lengths)
        reruns.append(simulated_rerun(plan, scaled, rate, changed, targets, change.change, change.what))
    return conclude(reruns)
