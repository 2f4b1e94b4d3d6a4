"""Cells over their limit now: what the eye must see at once, before any flag has lasted its minimum duration.

Flags keep their hysteresis and minimum durations (a value wobbling round a
threshold must not raise and clear an alarm every poll), but a table that
reads "ok" while p95 TTFT is seven times its target lies. So each cell is also
judged on its own, every poll, against the same limits the flag rules use:
latencies against the plan's targets (on the row's buckets, as the SLO rule
judges them), waiting, KV and preemptions against the saturation thresholds.
Without a plan only the fixed thresholds are judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from console.fleet import slo
from console.fleet.columns import tpot_or_itl
from console.fleet.flags import Thresholds
from console.fleet.plan_now import PlanNow
from console.metrics.figures import Figures

CellSeverity = Literal["critical", "warning"]
RANK = {"critical": 2, "warning": 1}


@dataclass(frozen=True)
class Limit:
    column: str  # a fleet table column key
    value: Callable[[Figures], float | None]
    over: Callable[[float], bool]
    severity: CellSeverity  # as the flag the condition leads to
    words: str  # the limit in words, for the no-plan note and help
    # A percentile target: over only where the row's buckets say it is missed (console.fleet.slo), not where
    # the interpolated figure passes it inside a bucket. None: the value against `over`.
    missed: Callable[[Figures], bool] | None = None


def fixed_limits(t: Thresholds) -> tuple[Limit, ...]:
    """The thresholds judged with or without a plan (the saturation rule's raise conditions)."""
    return (
        Limit("wait", lambda f: f.waiting, lambda v: v >= t.queue_raise, "warning", f"waiting ≥ {t.queue_raise:g}"),
        Limit("kv", lambda f: f.kv_usage, lambda v: v >= t.kv_raise, "warning", f"KV ≥ {t.kv_raise * 100:.0f}%"),
        Limit("preempt", lambda f: f.preemptions_per_second, lambda v: v > 0, "warning", "preemptions > 0"),
    )


def plan_limits(plan: PlanNow | None) -> tuple[Limit, ...]:
    """The plan's latency targets: over one is an SLO breach in the making, critical like the flag."""
    if plan is None:
        return ()
    found = []
    for column, value, target in (
        ("ttft", lambda f: f.ttft_p95_seconds, plan.ttft_p95_target_seconds),
        ("tpot", tpot_or_itl, plan.tpot_p95_target_seconds),  # judged as the column shows it
        ("e2e", lambda f: f.e2e_p95_seconds, plan.e2e_p95_target_seconds),
    ):
        if target is not None:
            words = f"{column} p95 > {target:g} s"
            found.append(Limit(column, value, _above(target), "critical", words, _missed(column, target)))
    return tuple(found)


def _missed(column: str, target: float) -> Callable[[Figures], bool]:
    return lambda f: slo.cell_verdict(f, column, target) == "missed"


def _above(target: float) -> Callable[[float], bool]:
    return lambda v: v > target


def limits(plan: PlanNow | None, t: Thresholds) -> tuple[Limit, ...]:
    return plan_limits(plan) + fixed_limits(t)


def over(figures: Figures, judged: tuple[Limit, ...]) -> tuple[tuple[str, CellSeverity], ...]:
    """(column, severity) of every cell over its limit now; unknown is never over."""
    found = []
    for limit in judged:
        if limit.missed is not None:
            if limit.missed(figures):
                found.append((limit.column, limit.severity))
            continue
        value = limit.value(figures)
        if value is not None and limit.over(value):
            found.append((limit.column, limit.severity))
    return tuple(found)


def worst(cells: tuple[tuple[str, CellSeverity], ...]) -> CellSeverity | None:
    return max((s for _, s in cells), key=RANK.__getitem__, default=None)


def fixed_words(t: Thresholds) -> str:
    """What is judged without a plan, in words: the replica states and the fixed saturation thresholds."""
    return (
        f"replica down (after {t.down_after_seconds:g} s), stale or restarted; "
        f"waiting ≥ {t.queue_raise:g}; KV ≥ {t.kv_raise * 100:.0f}% with preemptions"
    )
