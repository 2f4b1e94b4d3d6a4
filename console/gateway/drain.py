"""How fast the queue drains: what Retry-After is computed from.

Two figures, and the larger is the drain rate:

- measured: completions per second over the last 30 s. Right after start, or after a quiet spell, the
  window is empty or holds the quiet, and reads far too low (a refusal said 17-21 s where the queue drained
  in about 1 s);
- from capacity: the slots the fleet has (the in-flight cap on each healthy replica) over a request's
  service time (a lease's length: the answer streamed whole). The service time is the mean of the leases
  measured so far (a moving average that a quiet spell leaves as it was), or, before any lease has ended,
  the plan's expected time in the system. A refusal comes only when those slots are full, so this is the
  rate at which they free.

No clock is read: the caller passes `now` (the event loop's monotonic time).
"""

from __future__ import annotations

import math
from collections import deque

WINDOW_SECONDS = 30.0
SERVICE_WEIGHT = 0.1  # each lease's share of the moving average of service times


class DrainMeter:
    def __init__(self, started: float, window: float = WINDOW_SECONDS, expected_service: float | None = None) -> None:
        self.started = started
        self.window = window
        self._ends: deque[float] = deque()
        usable = expected_service is not None and math.isfinite(expected_service) and expected_service > 0
        self.service_seconds: float | None = expected_service if usable else None
        self._measured_leases = 0

    def completed(self, now: float, service_seconds: float | None = None) -> None:
        self._ends.append(now)
        self._forget(now)
        if service_seconds is not None and math.isfinite(service_seconds) and service_seconds >= 0:
            if self._measured_leases == 0 or self.service_seconds is None:
                self.service_seconds = service_seconds  # the first measured lease replaces the plan's guess
            else:
                self.service_seconds += SERVICE_WEIGHT * (service_seconds - self.service_seconds)
            self._measured_leases += 1

    def rate(self, now: float) -> float | None:
        """Completions per second over the window (or since start, if shorter; at least 1 s); None before any."""
        self._forget(now)
        if not self._ends:
            return None
        span = min(self.window, max(1.0, now - self.started))
        return len(self._ends) / span

    def capacity_rate(self, slots: int) -> float | None:
        """Completions per second with `slots` requests in flight at the service time; None when unknown."""
        if slots <= 0 or not self.service_seconds:
            return None
        return slots / self.service_seconds

    def drain_rate(self, now: float, slots: int) -> float | None:
        """The larger of the measured rate and the capacity's; None when neither is known."""
        known = [r for r in (self.rate(now), self.capacity_rate(slots)) if r is not None]
        return max(known) if known else None

    def _forget(self, now: float) -> None:
        ends, oldest = self._ends, now - self.window
        while ends and ends[0] < oldest:
            ends.popleft()
