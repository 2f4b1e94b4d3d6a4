"""`capcon bench --diagnose`: which controlled change moves the result at capacity, and so which limit it is.

Pure: it reads a table of reruns and concludes. The method (docs/method.md, 'Measuring a
replica's goodput') says the server's gauges are hints: before naming the limit, check
preemptions, compute and memory-bandwidth use and running requests, then repeat with
controlled changes to concurrency and context length and see which one moves the result.

The reruns run where the limit binds: at the first rate the sweep saw fall, just above the capacity
it found (`limit_rate`). There goodput is short of the target, so a change can show what it
gains as well as what it costs; at a rate that held, nothing can gain more than the little
that was missing, and a change would show only by what it costs. Each against the same replica:
  baseline          the step at the limit again, as the sweep ran it;
  concurrency_half  at most half the requests in flight that the baseline had;
  concurrency_batch at most the replica's batch size (max_num_seqs) in flight;
  lengths_half      the same prompts at half their length, half the answer tokens;
  lengths_double    the same prompts at double their length, double the answer tokens.

A change "moves" the result when the goodput share changes by at least MOVES (absolute).
The conclusion, first rule that holds:
  memory     the lengths move it, and at baseline or double length the KV cache was nearly
             full or requests were preempted (DRAM active, when known, is shown beside);
  compute    the lengths move it with the KV cache free and nothing preempted (tensor and SM
             active, when known, are shown beside: high says the GPU's arithmetic is the wall);
  scheduler  a concurrency cap raises goodput, its wait for a place counted as the clients'
             (runner.StepSettings.hold_counts): the replica admits a larger batch than the
             latency targets allow (max_num_seqs, max_num_batched_tokens are the knobs);
  queueing   nothing moves it and requests wait: the replica is simply at its rate, and the
             queue is the arrivals' (more replicas, or the overflow policy);
  unknown    nothing moved and nothing waited: the reruns say no more than the sweep did.
GPU counters never decide alone (a GPU reads busy while doing little); they corroborate. Under a
memory or compute verdict, a cap that raised goodput while carrying what the baseline carried is
named as a lever too (`_cap_lever`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MOVES = 0.05  # goodput share, absolute: less than this is within one step's noise at ~100 requests
KV_NEARLY_FULL = 0.90
BUSY = 0.5  # a profiling share at or above this is "high" for the evidence lines
KEPT_PACE = 0.9  # a capped rerun carrying less than this share of the offered rate held requests back
SAME_LOAD = 0.98  # a capped rerun carrying this share of what the baseline carried lost no throughput to its cap

BASELINE = "baseline"
CHANGES = ("concurrency_half", "concurrency_batch", "lengths_half", "lengths_double")


@dataclass(frozen=True)
class GpuFigures:
    """The GPU's own counters over a step: means of its readings; None where unknown (no page, or no field)."""

    sm_active: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    fb_used_bytes: float | None = None
    readings: int = 0
    note: str = ""  # why unknown, when it is

    def as_dict(self) -> dict:
        return {
            "sm_active": self.sm_active,
            "tensor_active": self.tensor_active,
            "dram_active": self.dram_active,
            "fb_used_bytes": self.fb_used_bytes,
            "readings": self.readings,
            "note": self.note or None,
        }


@dataclass(frozen=True)
class Rerun:
    """One row of the evidence table."""

    change: str  # BASELINE or one of CHANGES
    what: str  # the change in words ("at most 12 in flight")
    rate: float
    sent: int
    good: int
    failed: int = 0
    ttft_p95: float | None = None  # seconds, the client's
    tpot_p95: float | None = None
    preemptions: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    kv_usage_max: float | None = None
    gpu: GpuFigures = field(default_factory=GpuFigures)
    skipped: str = ""  # why this change was not run (then the figures mean nothing)
    in_flight_mean: float | None = None  # the client's requests in flight on average (rate x mean E2E)
    duration_seconds: float | None = None  # first send to last answer

    @property
    def achieved_rate(self) -> float | None:
        """Requests per second the rerun actually carried (a cap holding requests back stretches it)."""
        return self.sent / self.duration_seconds if self.duration_seconds else None

    @property
    def refused(self) -> bool:
        """Most requests failed (a doubled prompt past the context limit): its goodput says nothing of the limit."""
        return self.sent > 0 and self.failed * 2 >= self.sent

    @property
    def goodput_share(self) -> float | None:
        return self.good / self.sent if self.sent and not self.skipped else None

    @property
    def compared(self) -> bool:
        return self.goodput_share is not None and not self.refused

    def as_dict(self) -> dict:
        return {
            "change": self.change,
            "what": self.what,
            "rate_rps": self.rate,
            "sent": self.sent,
            "good": self.good,
            "failed": self.failed,
            "goodput_share": self.goodput_share,
            "ttft_p95_seconds": self.ttft_p95,
            "tpot_p95_seconds": self.tpot_p95,
            "preemptions": self.preemptions,
            "running_max": self.running_max,
            "waiting_mean": self.waiting_mean,
            "kv_usage_max": self.kv_usage_max,
            "gpu": self.gpu.as_dict(),
            "skipped": self.skipped or None,
            "in_flight_mean": self.in_flight_mean,
            "achieved_rate_rps": self.achieved_rate,
        }


def limit_rate(capacity: float | None, fell: float | None) -> float | None:
    """The rate the reruns run at: the lowest rate that fell above the capacity (the limit binds there), else the
    capacity (no rate above it fell: the sweep stopped at its ceiling); None when nothing held."""
    if capacity is None:
        return None
    return fell if fell is not None and fell > capacity else capacity


@dataclass(frozen=True)
class Change:
    """One controlled change to rerun: a client-side cap on requests in flight and a length factor."""

    change: str
    what: str
    max_concurrency: int | None = None
    length_factor: float = 1.0
    skipped: str = ""


def planned_changes(in_flight: float | None, batch_size: int | None) -> list[Change]:
    """The four changes after the baseline; a cap that cannot be set (nothing known to halve) is skipped."""
    half = max(1, round(in_flight / 2)) if in_flight else None
    if half:
        by_half = Change("concurrency_half", f"at most {half} in flight (half)", half)
    else:
        by_half = Change(
            "concurrency_half", "half the requests in flight", skipped="the baseline's concurrency unknown"
        )
    if batch_size:
        by_batch = Change("concurrency_batch", f"at most {batch_size} in flight (batch size)", batch_size)
    else:
        by_batch = Change("concurrency_batch", "at most the batch size in flight", skipped="max_num_seqs unknown")
    return [
        by_half,
        by_batch,
        Change("lengths_half", "prompts and outputs at half length", length_factor=0.5),
        Change("lengths_double", "prompts and outputs at double length", length_factor=2.0),
    ]


@dataclass(frozen=True)
class Conclusion:
    limit: str  # "memory", "compute", "scheduler", "queueing", "unknown"
    moved_by: tuple[str, ...]  # the changes that moved goodput by MOVES or more
    reasons: tuple[str, ...]
    reruns: tuple[Rerun, ...]

    def as_dict(self) -> dict:
        return {
            "limit": self.limit,
            "moved_by": list(self.moved_by),
            "reasons": list(self.reasons),
            "reruns": [r.as_dict() for r in self.reruns],
        }


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0%}"


def _memory_pressure(row: Rerun | None) -> bool:
    if row is None or row.skipped:
        return False
    return bool(row.preemptions) or (row.kv_usage_max is not None and row.kv_usage_max >= KV_NEARLY_FULL)


def _kept_pace(row: Rerun) -> bool:
    achieved = row.achieved_rate
    return achieved is None or achieved >= KEPT_PACE * row.rate


def _cap_lever(rows: Mapping[str, Rerun], base: Rerun, delta: Mapping[str, float]) -> str | None:
    """A concurrency cap that raised goodput while carrying as much as the baseline did: whatever the limit, a
    smaller batch serves the same load within the targets, so the batch size is a lever too. In words, or None."""
    carried = base.achieved_rate
    if carried is None:
        return None
    for name in ("concurrency_half", "concurrency_batch"):
        row = rows.get(name)
        achieved = row.achieved_rate if row is not None else None
        if row is None or achieved is None or delta.get(name, 0.0) < MOVES or achieved < SAME_LOAD * carried:
            continue
        return (
            f"{row.what} raised goodput to {_pct(row.goodput_share)} (the wait for a place counted) carrying "
            f"{achieved:,.2f} rps where the baseline carried {carried:,.2f}: the batch the replica admits costs more "
            "than it carries, so max_num_seqs (or the gateway's in-flight cap) near that figure is a lever too"
        )
    return None


def _gpu_line(row: Rerun) -> str:
    g = row.gpu
    if g.readings == 0:
        return "GPU counters unknown" + (f" ({g.note})" if g.note else "")
    return (
        f"GPU at baseline: SM active {_pct(g.sm_active)}, tensor active {_pct(g.tensor_active)}, "
        f"DRAM active {_pct(g.dram_active)}"
    )


def conclude(reruns: Sequence[Rerun]) -> Conclusion:
    """The limit the reruns point at, with the evidence in words (see the module's rules)."""
    rows: Mapping[str, Rerun] = {r.change: r for r in reruns}
    base = rows.get(BASELINE)
    if base is None or base.goodput_share is None:
        return Conclusion("unknown", (), ("the step at the limit was not rerun: nothing to compare",), tuple(reruns))
    start = base.goodput_share
    delta: dict[str, float] = {}
    for name in CHANGES:
        row = rows.get(name)
        if row is not None and row.compared and row.goodput_share is not None:
            delta[name] = row.goodput_share - start
    moved = tuple(name for name in CHANGES if name in delta and abs(delta[name]) >= MOVES)
    reasons = [
        f"{rows[name].what}: goodput {_pct(start)} -> {_pct(rows[name].goodput_share)}"
        for name in CHANGES
        if name in delta
    ]
    for name in CHANGES:
        row = rows.get(name)
        if row is not None and row.skipped:
            reasons.append(f"{row.what}: not run ({row.skipped})")
        elif row is not None and row.refused:
            reasons.append(
                f"{row.what}: {row.failed} of {row.sent} requests failed (past the context limit?): left out"
            )
    lengths = max(delta.get("lengths_half", 0.0), -delta.get("lengths_double", 0.0))
    # A cap that helps only by holding requests back in the client (the rerun fell behind the offered rate) hides a
    # queue rather than curing it: it does not count for the scheduler.
    cap_helps = max(
        (delta[name] for name in ("concurrency_half", "concurrency_batch") if name in delta and _kept_pace(rows[name])),
        default=0.0,
    )
    gpu = _gpu_line(base)
    double = rows.get("lengths_double")

    if lengths >= MOVES and (_memory_pressure(base) or _memory_pressure(double)):
        worst = max((r for r in (base, double) if r is not None and not r.skipped), key=lambda r: r.kv_usage_max or 0.0)
        reasons.append(
            f"the context length moves the result with the KV cache up to {_pct(worst.kv_usage_max)} and "
            f"{worst.preemptions or 0:.0f} preemptions ({worst.what}): memory; {gpu}"
        )
        reasons.append("levers: FP8 KV, a shorter context cap per request, prefix caching, or more GPUs per replica")
        cap = _cap_lever(rows, base, delta)
        if cap:
            reasons.append(cap)
        return Conclusion("memory", moved, tuple(reasons), tuple(reruns))
    if lengths >= MOVES:
        busy = [
            name
            for name, value in (("tensor", base.gpu.tensor_active), ("SM", base.gpu.sm_active))
            if value is not None and value >= BUSY
        ]
        said = f" ({' and '.join(busy)} active high)" if busy else ""
        reasons.append(
            f"the context length moves the result with the KV cache free (up to {_pct(base.kv_usage_max)}, "
            f"no preemptions): compute{said}; {gpu}"
        )
        reasons.append(
            "levers: shorter prompts (prefix caching), a faster GPU or more tensor parallelism, more replicas"
        )
        cap = _cap_lever(rows, base, delta)
        if cap:
            reasons.append(cap)
        return Conclusion("compute", moved, tuple(reasons), tuple(reruns))
    if cap_helps >= MOVES:
        reasons.append(
            f"capping the requests in flight raises goodput (running up to {base.running_max or 0:.0f} at baseline): "
            "the batch the replica admits is larger than the latency targets allow; "
            "lower max_num_seqs or max_num_batched_tokens"
        )
        return Conclusion("scheduler", moved, tuple(reasons), tuple(reruns))
    if base.waiting_mean is not None and base.waiting_mean >= 1.0:
        reasons.append(
            f"no change moves the result and {base.waiting_mean:.1f} requests wait on average: the replica is at its "
            f"rate and the queue is the arrivals'; more replicas, or the overflow policy; {gpu}"
        )
        return Conclusion("queueing", moved, tuple(reasons), tuple(reruns))
    reasons.append(f"no change moved goodput by {MOVES:.0%} or more, and nothing waited; {gpu}")
    return Conclusion("unknown", moved, tuple(reasons), tuple(reruns))


def evidence_table(conclusion: Conclusion) -> list[str]:
    """The reruns as a text table: one row per change, unknown shown as '-'."""

    def cell(value: float | None, scale: float = 1.0, digits: int = 0) -> str:
        return "-" if value is None else f"{value * scale:,.{digits}f}"

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    columns = (
        ("change", "<36"),
        ("goodput", ">7"),
        ("TTFT p95 ms", ">11"),
        ("TPOT p95 ms", ">11"),
        ("preempt", ">7"),
        ("run", ">4"),
        ("KV max", ">6"),
        ("SM", ">4"),
        ("tensor", ">6"),
        ("DRAM", ">4"),
    )
    rows = ["  ".join(f"{name:{align}}" for name, align in columns).rstrip()]
    for r in conclusion.reruns:
        if r.skipped:
            rows.append(f"{r.what:<36}  not run: {r.skipped}")
            continue
        cells = (
            r.what[:36],
            share(r.goodput_share),
            cell(r.ttft_p95, 1000),
            cell(r.tpot_p95, 1000, 1),
            cell(r.preemptions),
            cell(r.running_max),
            share(r.kv_usage_max),
            share(r.gpu.sm_active),
            share(r.gpu.tensor_active),
            share(r.gpu.dram_active),
        )
        rows.append("  ".join(f"{c:{align}}" for c, (_, align) in zip(cells, columns)).rstrip())
    return rows
