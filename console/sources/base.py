"""What a metrics source hands the watcher.

Two shapes, because the two sources differ in where the window math happens:

* a `SampleSource` (direct scrape) returns one raw `TargetResult` (console.targets)
  per target per call; the watcher keeps the samples and does the window math itself;
* a `FigureSource` (Prometheus) already answers with windowed figures, since the
  rates and quantiles are computed by PromQL.

Neither raises for a target or server that misbehaves: a failure is a state.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from console.metrics.figures import FleetFigures
from console.targets import TargetResult


@runtime_checkable
class SampleSource(Protocol):
    name: str  # "scrape"

    async def fetch(self, now: float) -> list[TargetResult]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class FigureSource(Protocol):
    """E.g. `console.sources.prometheus.PrometheusSource(url, selector, window_seconds, timeout)`."""

    async def collect(self, now: float) -> FleetFigures: ...
