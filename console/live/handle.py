"""A fleet as the console and the recorder drive it: a name, its plan and its watcher.

Kept apart from the Textual app so `capcon record` (no UI) reads the plan the same way
the console does without importing Textual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from console.fleet.plan_now import PlanNow, plan_now
from console.live.watcher import Watcher
from console.plan.model import Plan


@dataclass(frozen=True)
class FleetHandle:
    name: str
    plan: Plan | None
    watcher: Watcher
    # What the plan expects at a moment; defaults to the planner's schedule for `plan`.
    expect: Callable[[float], PlanNow | None] | None = None
    # Where in the plan's week the console reads it at `now`, as a time on the plan's own clock
    # (UTC offset folded in); the demo runs a simulated week. Recorded with each poll, so a replay
    # reads the plan at the same moment.
    plan_clock: Callable[[float], float] | None = None
    # The capcon gateways in front of the fleet, by the URL of their /metrics listener: watched beside it.
    gateways: tuple[str, ...] = ()
    # The dcgm-exporter pages of the fleet's GPUs (their own counters), read in the same step as the replicas
    # within `dcgm_timeout` seconds; `replica_pods`: (replica name, pod, namespace) where the caller knows a
    # replica's pod (a simulated fleet's replicas share one host: their pod labels pair them with their GPUs).
    dcgm: tuple[str, ...] = ()
    dcgm_timeout: float = 2.0
    # `--dcgm-selector`: the GPUs' series read from the fleet's own Prometheus instead, matched by it.
    dcgm_selector: str | None = None
    replica_pods: tuple[tuple[str, str, str | None], ...] = ()
    # (replica name, its GPUs' indices on its host) where the plan names them (fleet.targets' {url, gpus}).
    replica_gpu_indices: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def plan_time(self, now: float) -> float | None:
        if self.plan is None:
            return None
        if self.plan_clock is not None:
            return self.plan_clock(now)
        return now + utc_offset_seconds(self.plan.timezone, now)

    def plan_at(self, now: float) -> PlanNow | None:
        if self.expect is not None:
            return self.expect(now)
        at = self.plan_time(now)
        return plan_now(self.plan, at) if self.plan is not None and at is not None else None


def utc_offset_seconds(zone: str, at: float) -> float:
    """How far the plan's clock is ahead of UTC at `at` (DST included); the zone was checked when the plan loaded."""
    offset = datetime.fromtimestamp(at, ZoneInfo(zone)).utcoffset()
    return offset.total_seconds() if offset is not None else 0.0
