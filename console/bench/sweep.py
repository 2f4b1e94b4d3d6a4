"""The rate sweep of `capcon bench`: step up, bisect near the edge, stop once goodput has fallen.

Pure bookkeeping, no I/O: `next_rate()` says which rate to measure next (None: done)
and `record()` takes whether it held. From the start rate it multiplies by `factor`
while the rate holds; at the first rate that falls it bisects between the last rate
that held and the first that fell until they are within `precision` of each other.
A start rate that already falls is halved until one holds (or `floor` is reached).
The capacity is the highest rate that held.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from console.bench.boundary import within

MAX_STEPS = 40  # a sweep that has not converged by then reports what it has


@dataclass
class Sweep:
    start: float
    factor: float = 1.5
    precision: float = 0.05  # stop bisecting when (fell - held) / held is at most this (a rounding error over counts)
    floor: float = 0.01  # requests/s: below this a replica carries nothing worth a plan
    ceiling: float = 10_000.0
    max_steps: int = MAX_STEPS
    held: float | None = None
    fell: float | None = None
    history: list[tuple[float, bool]] = field(default_factory=list)

    def next_rate(self) -> float | None:
        if len(self.history) >= self.max_steps:
            return None
        if not self.history:
            return self.start
        if self.fell is None:  # still climbing
            following = self.held * self.factor if self.held is not None else self.start
            return following if following <= self.ceiling else None
        if self.held is None:  # nothing held yet: go down
            following = self.fell / 2
            return following if following >= self.floor else None
        if within((self.fell - self.held) / self.held, self.precision):
            return None
        return (self.held + self.fell) / 2

    def record(self, rate: float, holds: bool) -> None:
        self.history.append((rate, holds))
        if holds:
            self.held = rate if self.held is None else max(self.held, rate)
        else:
            self.fell = rate if self.fell is None else min(self.fell, rate)

    @property
    def capacity(self) -> float | None:
        return self.held

    @property
    def converged(self) -> bool:
        return (
            self.held is not None
            and self.fell is not None
            and within((self.fell - self.held) / self.held, self.precision)
        )
