"""The fleet's gateways, watched beside its replicas: each poll reads their /metrics and gives the window's figures.

Each gateway keeps the samples of the last window (as the watcher does for replicas); its figures run from
the oldest sample inside the window to the newest, so the rates are the window's, not the last interval's.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from console.metrics.gateway import (
    GatewayFigures,
    GatewaySample,
    WindowDeltas,
    combined,
    gateway_figures,
    window_deltas,
)
from console.sources.gateway import GatewaySource
from console.targets import targets_from


@dataclass(frozen=True)
class GatewayView:
    """What the overflow panel shows: all the fleet's gateways as one, each one in `figures.detail`."""

    figures: GatewayFigures
    names: tuple[str, ...]  # the gateways as shown (host:port, never a credential)


class GatewayWatch:
    def __init__(
        self,
        urls: Sequence[str],
        window_seconds: float,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        targets = targets_from(list(urls))  # UserError for an address that cannot be one; named host:port
        self.source = GatewaySource(targets, timeout=timeout)
        self.window_seconds = window_seconds
        self.clock = clock
        self._samples: list[deque[GatewaySample]] = [deque() for _ in targets]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.source.targets)

    async def poll(self) -> GatewayView:
        now = self.clock()
        results = await self.source.fetch(now)
        parts: list[GatewayFigures] = []
        deltas: list[WindowDeltas] = []
        for result, kept in zip(results, self._samples):
            raw: object = result.sample  # a GatewaySample riding in the replica's result type (sources/gateway.py)
            sample = raw if isinstance(raw, GatewaySample) else None
            if sample is not None:
                kept.append(sample)
            while len(kept) > 1 and kept[0].at < now - self.window_seconds:
                kept.popleft()
            older = kept[0] if kept and kept[0] is not sample else None
            parts.append(gateway_figures(result.name, older, sample, result.error if sample is None else ""))
            deltas.append(window_deltas(older, sample))
            if sample is None:
                kept.clear()  # a gateway that stopped answering may come back restarted: start its window again
        name = parts[0].name if len(parts) == 1 else f"{len(parts)} gateways"
        return GatewayView(combined(name, parts, deltas), self.names)

    async def aclose(self) -> None:
        await self.source.aclose()
