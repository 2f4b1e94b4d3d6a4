"""A benchmark's result as one record: the table people read, the JSON scripts read, the history event.

The capacity is the highest rate whose step held the goodput share; each step keeps
how many requests it measured and the 95 % interval of its goodput share, so a
capacity resting on 30 requests says so. The client's latencies are shown next to
the server's own (vLLM's histograms), labelled, because they differ: the client's
include the HTTP front end and tokenization.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from console.bench.boundary import interval_text, percent_text, share_down_text, share_places, within
from console.bench.diagnosis import Conclusion, evidence_table
from console.bench.limits import Diagnosis, diagnose
from console.bench.measure import BenchTargets, wilson_interval
from console.bench.runner import Step
from console.bench.server_view import ServerStep
from console.text import printable


@dataclass(frozen=True)
class StepSummary:
    """One step as the report shows it: measured here (`step` set) or imported from another tool's report.

    Seconds throughout. `good` is None when the source kept no per-request figures (then
    `holds` was judged on the p95s against the targets).
    """

    rate: float
    sent: int
    completed: int
    holds: bool
    good: int | None = None
    duration_seconds: float = 0.0
    output_tokens: int = 0
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    tpot_p50: float | None = None
    tpot_p95: float | None = None
    itl_p95: float | None = None
    e2e_p50: float | None = None
    e2e_p95: float | None = None
    interrupted: bool = False
    server: ServerStep = field(default_factory=lambda: ServerStep(scrapes=0))
    step: Step | None = None

    @property
    def failed(self) -> int:
        return self.sent - self.completed

    @property
    def goodput_share(self) -> float | None:
        return None if self.good is None else (self.good / self.sent if self.sent else 0.0)

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.good is None else wilson_interval(self.good, self.sent)

    @property
    def output_tokens_per_second(self) -> float:
        return self.output_tokens / self.duration_seconds if self.duration_seconds > 0 else 0.0


def summary(step: Step) -> StepSummary:
    f = step.figures
    return StepSummary(
        rate=f.rate,
        sent=f.sent,
        completed=f.completed,
        holds=step.holds,
        good=f.good,
        duration_seconds=f.duration_seconds,
        output_tokens=f.output_tokens,
        ttft_p50=f.quantile("ttft", 0.5),
        ttft_p95=f.quantile("ttft", 0.95),
        tpot_p50=f.quantile("tpot", 0.5),
        tpot_p95=f.quantile("tpot", 0.95),
        itl_p95=f.itl_quantile(0.95),
        e2e_p50=f.quantile("e2e", 0.5),
        e2e_p95=f.quantile("e2e", 0.95),
        interrupted=f.interrupted,
        server=step.server,
        step=step,
    )


@dataclass(frozen=True)
class BenchReport:
    target: str  # as shown: credentials redacted
    model: str
    targets: BenchTargets
    steps: tuple[StepSummary, ...]
    capacity: float | None
    converged: bool
    interrupted: bool
    started_at: float  # unix time
    settings: dict
    source: str = "capcon bench"
    prompts: str = ""  # what was replayed: the file and its count, or the built-in sample ("" imported)
    diagnose: Conclusion | None = None  # --diagnose: the reruns at capacity and what they concluded

    @property
    def diagnosis(self) -> Diagnosis | None:
        fell = [s for s in self.steps if not s.holds and not s.interrupted]
        if not fell:
            return None
        first = min(fell, key=lambda s: s.rate)
        if first.step is None:
            return imported_diagnosis(first, self.targets)
        return diagnose(first.step.figures, first.server, self.targets)

    @property
    def holding_step(self) -> StepSummary | None:
        held = [s for s in self.steps if s.holds and s.rate == self.capacity]
        return held[-1] if held else None

    def as_dict(self) -> dict:
        diagnosis = self.diagnosis
        holding = self.holding_step
        return {
            "source": self.source,
            "target": self.target,
            "model": self.model,
            "started_at": self.started_at,
            "targets": self.targets.as_dict(),
            "prompts": self.prompts or None,
            "settings": self.settings,
            "capacity_rps": self.capacity,
            "capacity_requests": holding.sent if holding else None,
            "capacity_goodput_interval": list(holding.interval) if holding and holding.interval else None,
            "converged": self.converged,
            "interrupted": self.interrupted,
            "limit": diagnosis.as_dict() if diagnosis else None,
            "steps": [step_dict(s) for s in self.steps],
            **({"diagnose": self.diagnose.as_dict()} if self.diagnose is not None else {}),
        }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


def imported_diagnosis(step: StepSummary, targets: BenchTargets) -> Diagnosis:
    """What an imported step that fell missed, from its p95s: its source kept no server metrics."""
    over = []
    for name, value, target in (("TTFT", step.ttft_p95, targets.ttft), ("TPOT", step.tpot_p95, targets.tpot)):
        if value is not None and not within(value, target):
            over.append(f"p95 {name} {value * 1000:,.1f} ms over the {target * 1000:,.1f} ms target")
    if step.failed:
        over.append(f"{step.failed} of {step.sent} requests failed")
    over.append("imported: no /metrics of the replica, so memory or compute cannot be told apart")
    return Diagnosis("unknown", tuple(over))


def step_dict(step: StepSummary) -> dict:
    return {
        "rate_rps": step.rate if math.isfinite(step.rate) else None,  # None: all at once (the throughput mode)
        "sent": step.sent,
        "completed": step.completed,
        "failed": step.failed,
        "good": step.good,
        "goodput_share": step.goodput_share,
        "goodput_interval": list(step.interval) if step.interval else None,
        "holds": step.holds,
        "interrupted": step.interrupted,
        "duration_seconds": step.duration_seconds,
        "output_tokens": step.output_tokens,
        "output_tokens_per_second": step.output_tokens_per_second,
        "client": {
            "ttft_ms_p50": _ms(step.ttft_p50),
            "ttft_ms_p95": _ms(step.ttft_p95),
            "tpot_ms_p50": _ms(step.tpot_p50),
            "tpot_ms_p95": _ms(step.tpot_p95),
            "itl_ms_p95": _ms(step.itl_p95),
            "e2e_ms_p50": _ms(step.e2e_p50),
            "e2e_ms_p95": _ms(step.e2e_p95),
        },
        "server": step.server.as_dict(),
        "gpu": step.step.gpu.as_dict() if step.step is not None else None,
    }


def _cell(value: float | None, scale: float = 1000.0, digits: int = 0) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


COLUMNS = (
    ("rps", ">7"),
    ("sent", ">6"),
    ("good", ">6"),
    ("goodput (95% interval)", "<22"),
    ("TTFT p50/p95 ms", ">16"),
    ("vLLM TTFT p95", ">13"),
    ("TPOT p50/p95 ms", ">16"),
    ("KV max", ">6"),
    ("wait", ">5"),
    ("run", ">5"),
    ("preempt", ">7"),
    ("", "<5"),
)


def _goodput(step: StepSummary, places: int) -> str:
    if step.good is None or step.interval is None:
        return "- (p95s only)"
    low, high = step.interval
    return f"{share_down_text(step.good, step.sent, places)} ({interval_text(low, high, places)})"


def table_rows(steps: Sequence[StepSummary], places: int = 1) -> list[str]:
    """The steps' table; goodput shares rounded down at `places` decimals (the target's), so none reads as met
    when it fell."""
    head = "  ".join(f"{name:{align}}" for name, align in COLUMNS).rstrip()
    rows = [head]
    for step in steps:
        s = step.server
        cells = (
            f"{step.rate:,.2f}",
            f"{step.sent:,}",
            "-" if step.good is None else f"{step.good:,}",
            _goodput(step, places),
            f"{_cell(step.ttft_p50)}/{_cell(step.ttft_p95)}",
            _cell(s.ttft_p95),
            f"{_cell(step.tpot_p50, digits=1)}/{_cell(step.tpot_p95, digits=1)}",
            _share(s.kv_usage_max),
            _cell(s.waiting_mean, 1, 1),
            _cell(s.running_mean, 1, 1),
            _cell(s.preemptions, 1),
            ("holds" if step.holds else "falls") + (" (stopped)" if step.interrupted else ""),
        )
        rows.append("  ".join(f"{cell:{align}}" for cell, (_, align) in zip(cells, COLUMNS)).rstrip())
    return rows


def render(report: BenchReport) -> str:
    t = report.targets
    places = share_places(t.share)
    e2e = f", E2E <= {t.e2e * 1000:,.0f} ms" if t.e2e is not None else ""
    lines = [
        f"capcon bench: {report.target} ({report.model})",
        f"targets: TTFT <= {t.ttft * 1000:,.0f} ms, TPOT <= {t.tpot * 1000:,.1f} ms{e2e}; "
        f"goodput share >= {percent_text(t.share, places)}",
        *([f"prompts: {report.prompts}"] if report.prompts else []),
        "TTFT and TPOT are the client's (send to first and last token, as vllm bench serve); "
        "vLLM TTFT is the server's own histogram (engine arrival to first token).",
        "",
        *table_rows(report.steps, places),
        "",
    ]
    holding = report.holding_step
    if report.capacity is None:
        lines.append("capacity: no rate held the goodput share (try a lower --start-rate)")
    else:
        noise = ""
        if holding is not None and holding.interval is not None and holding.good is not None:
            low, high = holding.interval
            noise = (
                f" on {holding.sent:,} requests, goodput {share_down_text(holding.good, holding.sent, places)} "
                f"(95% interval {low:.1%}-{high:.1%})"
            )
        elif holding is not None:
            noise = f" on {holding.sent:,} requests (p95s within the targets; per-request figures not kept)"
        edge = "" if report.converged else " (not converged: a lower bound)"
        lines.append(f"capacity: {report.capacity:,.2f} rps per replica{noise}{edge}")
    diagnosis = report.diagnosis
    if diagnosis is not None:
        lines.append(f"limit hit: {diagnosis.limit}")
        lines.extend(f"  - {reason}" for reason in diagnosis.reasons)
    elif report.steps:
        lines.append("limit hit: not reached (every rate held)")
    if report.diagnose is not None:
        lines += ["", *diagnosis_lines(report.diagnose)]
    if report.interrupted:
        lines.append("stopped by Ctrl+C: the steps above are what was measured")
    return "\n".join(lines)


def diagnosis_lines(conclusion: Conclusion) -> list[str]:
    """--diagnose in text: the evidence table and the conclusion (labels from the GPU page made printable)."""
    return [
        "diagnosis: the step at the limit rerun with controlled changes (GPU columns: the GPU's own counters)",
        *evidence_table(conclusion),
        f"limit: {conclusion.limit}" + (f" (moved by {', '.join(conclusion.moved_by)})" if conclusion.moved_by else ""),
        *(f"  - {printable(reason)}" for reason in conclusion.reasons),
    ]


@dataclass(frozen=True)
class ThroughputReport:
    """The offline throughput mode: every request at once (or `max_concurrency` at a time), no latency target.

    The answer is the most output tokens per second the replica gives, for sizing deferrable batch work.
    """

    target: str
    model: str
    step: StepSummary
    max_concurrency: int | None
    started_at: float
    interrupted: bool
    prompts: str = ""  # what was replayed, as BenchReport.prompts

    def as_dict(self) -> dict:
        s = self.step
        return {
            "mode": "throughput",
            "target": self.target,
            "model": self.model,
            "prompts": self.prompts or None,
            "started_at": self.started_at,
            "max_concurrency": self.max_concurrency,
            "requests": s.sent,
            "completed": s.completed,
            "failed": s.failed,
            "duration_seconds": s.duration_seconds,
            "output_tokens": s.output_tokens,
            "output_tokens_per_second": s.output_tokens_per_second,
            "requests_per_second": s.completed / s.duration_seconds if s.duration_seconds > 0 else 0.0,
            "interrupted": self.interrupted,
            "step": step_dict(s),
        }


def render_throughput(report: ThroughputReport) -> str:
    s = report.step
    cap = f"at most {report.max_concurrency:,} in flight" if report.max_concurrency else "all at once"
    rps = s.completed / s.duration_seconds if s.duration_seconds > 0 else 0.0
    lines = [
        f"capcon bench --throughput: {report.target} ({report.model})",
        *([f"prompts: {report.prompts}"] if report.prompts else []),
        f"{s.sent:,} requests sent {cap}, no latency target: {s.completed:,} completed, {s.failed:,} failed "
        f"in {s.duration_seconds:,.1f} s",
        f"throughput: {s.output_tokens_per_second:,.1f} output tokens/s ({rps:,.2f} requests/s, "
        f"{s.output_tokens:,} output tokens)",
    ]
    server = s.server
    if server.scrapes:
        lines.append(
            f"server: KV up to {_share(server.kv_usage_max)}, {_cell(server.running_max, 1)} running at most, "
            f"{_cell(server.waiting_max, 1)} waiting at most, {_cell(server.preemptions, 1)} preemptions"
        )
    if report.interrupted:
        lines.append("stopped by Ctrl+C: the figures above are what had finished")
    return "\n".join(lines)
