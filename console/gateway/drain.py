"""The measured drain rate: completions per second over the last 30 s (what Retry-After is computed from).

No clock is read: the caller passes `now` (the event loop's monotonic time).
"""

from __future__ import annotations

from collections import deque

WINDOW_SECONDS = 30.0


class DrainMeter:
    def __init__(self, started: float, window: float = WINDOW_SECONDS) -> None:
        self.started = started
        self.window = window
        self._ends: deque[float] = deque()

    def completed(self, now: float) -> None:
        self._ends.append(now)
        self._forget(now)

    def rate(self, now: float) -> float | None:
        """Completions per second over the window (or since start, if shorter; at least 1 s); None before any."""
        self._forget(now)
        if not self._ends:
            return None
        span = min(self.window, max(1.0, now - self.started))
        return len(self._ends) / span

    def _forget(self, now: float) -> None:
        ends, oldest = self._ends, now - self.window
        while ends and ends[0] < oldest:
            ends.popleft()
