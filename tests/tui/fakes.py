"""A prepared data source for console tests: a watcher that hands out FleetFigures from a list.

The real wiring (scrape, window, watch command) is exercised by the tmux test.
"""

from __future__ import annotations

from dataclasses import replace

from console.live.watcher import Poll
from console.metrics.figures import Figures, FleetFigures
from tests.fleet.builders import PLAN_NOW, plan_now

NOW = 1_764_583_200.0  # Monday 2025-12-01 10:00 UTC, so data ages and "since" clocks are stable


class FakeWatcher:
    """Hands out `snapshots` in turn (the last repeats). With a clock, each poll moves it `step` seconds on
    and stamps the figures 2 s before it, as if the console had been watching for a while."""

    # No window of its own: the console's + key then stops at 60 s, as without a window.
    window_seconds = 0.0
    interval_seconds = 1.0

    def __init__(self, *snapshots: FleetFigures, clock: FakeClock | None = None, step: float = 10.0) -> None:
        self.snapshots = list(snapshots)
        self.polls = 0
        self.clock = clock
        self.step = step

    async def poll(self) -> Poll:
        figures = self.snapshots[min(self.polls, len(self.snapshots) - 1)]
        self.polls += 1
        if self.clock is not None:
            if self.polls > 1:
                self.clock.now += self.step
            figures = replace(figures, at=self.clock.now - 2.0)
        # As a figure source hands it out: figures, no raw results.
        return Poll(
            figures,
            None,
            self.clock.now if self.clock is not None else figures.at,
            figures.window_seconds,
            self.interval_seconds,
        )

    async def aclose(self) -> None:
        pass

    def then(self, *snapshots: FleetFigures) -> None:
        """Queue figures for the next polls (the last one repeats)."""
        self.snapshots = self.snapshots[: self.polls] + list(snapshots)


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def replica(name: str, state: str = "up", **values) -> Figures:
    base = dict(
        requests_per_second=3.4,
        prompt_tokens_per_second=6800.0,
        generation_tokens_per_second=1680.0,
        running=21.0,
        waiting=0.0,
        kv_usage=0.46,
        kv_capacity_tokens=220_000.0,
        preemptions_per_second=0.0,
        prefix_hit_share=0.31,
        ttft_p50_seconds=0.21,
        ttft_p95_seconds=0.62,
        tpot_p95_seconds=0.031,
        e2e_p95_seconds=13.1,
        queue_p95_seconds=0.05,
        mean_input_tokens=2050.0,
        mean_output_tokens=395.0,
        data_age_seconds=1.0,
    )
    if state in ("down", "timeout", "bad_payload"):
        base = {}
    base.update(values)
    return Figures(name=name, url=f"http://127.0.0.1:80{len(name):02d}/metrics", state=state, **base)


def fleet_of(*replicas: Figures, at: float = NOW - 2.0, **totals) -> FleetFigures:
    serving = [r for r in replicas if r.state == "up"]

    def total(attr: str) -> float | None:
        values = [getattr(r, attr) for r in serving if getattr(r, attr) is not None]
        return sum(values) if values else None

    def worst(attr: str) -> float | None:
        values = [getattr(r, attr) for r in serving if getattr(r, attr) is not None]
        return max(values) if values else None

    fleet = dict(
        requests_per_second=total("requests_per_second"),
        prompt_tokens_per_second=total("prompt_tokens_per_second"),
        generation_tokens_per_second=total("generation_tokens_per_second"),
        running=total("running"),
        waiting=total("waiting"),
        kv_usage=worst("kv_usage"),
        preemptions_per_second=total("preemptions_per_second"),
        prefix_hit_share=worst("prefix_hit_share"),
        ttft_p50_seconds=worst("ttft_p50_seconds"),
        ttft_p95_seconds=worst("ttft_p95_seconds"),
        tpot_p95_seconds=worst("tpot_p95_seconds"),
        e2e_p95_seconds=worst("e2e_p95_seconds"),
        queue_p95_seconds=worst("queue_p95_seconds"),
        mean_input_tokens=worst("mean_input_tokens"),
        mean_output_tokens=worst("mean_output_tokens"),
    )
    fleet.update(totals)
    return FleetFigures(
        window_seconds=60.0,
        source="scrape",
        replicas=tuple(replicas),
        fleet=Figures(name="fleet", url="", state="up", **fleet),
        at=at,
    )


def normal_fleet(at: float = NOW - 2.0) -> FleetFigures:
    return fleet_of(
        replica("gpu-1"),
        replica("gpu-2", kv_usage=0.52, running=24.0),
        replica("gpu-3", kv_usage=0.41),
        replica("gpu-4", requests_per_second=3.2),
        at=at,
    )


def saturated_fleet(at: float = NOW - 2.0) -> FleetFigures:
    hot = dict(
        waiting=7.0,
        kv_usage=0.96,
        preemptions_per_second=0.8,
        ttft_p95_seconds=2.4,
        tpot_p95_seconds=0.047,
        queue_p95_seconds=1.9,
        requests_per_second=6.4,
    )
    return fleet_of(
        replica("gpu-1", **hot), replica("gpu-2", **hot), replica("gpu-3", **hot), replica("gpu-4", **hot), at=at
    )


def replica_down_fleet(at: float = NOW - 2.0) -> FleetFigures:
    return fleet_of(
        replica("gpu-1"),
        replica("gpu-2", state="timeout", error="no answer in 2 s"),
        replica("gpu-3"),
        replica("gpu-4"),
        at=at,
    )


class DemoRecorder:
    """Stands in for the demo's simulated fleet: records the calls the console makes; `refuse` makes them fail."""

    def __init__(self, refuse: Exception | None = None) -> None:
        self.calls: list[tuple] = []
        self.refuse = refuse

    def _record(self, *call) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.calls.append(call)

    def spike(self, factor: float, seconds: float) -> None:
        self._record("spike", factor, seconds)

    async def fault(self, index: int, kind: str, factor: float = 3.0) -> None:
        self._record("fault", index, kind)

    async def clear_fault(self, index: int, kind: str) -> None:
        self._record("clear_fault", index, kind)

    async def clear_all_faults(self) -> None:
        self._record("clear_all_faults")


__all__ = [
    "NOW",
    "PLAN_NOW",
    "DemoRecorder",
    "FakeClock",
    "FakeWatcher",
    "fleet_of",
    "normal_fleet",
    "plan_now",
    "replica",
    "replica_down_fleet",
    "saturated_fleet",
]
