"""Python's cyclic garbage collector in a long-running console: passes over the whole heap between refreshes.

A refresh of a large fleet makes hundreds of thousands of objects that live until the next one
(every replica's figures, flag state and view row), and none of them is in a cycle. With the
default thresholds the collector scanned each of them twice while young and then ran full passes
over the whole heap once or twice a refresh: a quarter of a 10,000-replica refresh through
Prometheus. Tuned, young passes come every YOUNG_EVERY allocations (most of a refresh's
temporaries are freed by reference counting before one), the whole heap is never scanned from an
allocation, and `after_poll` runs one full pass at most every FULL_EVERY_SECONDS, after a refresh
has been shown. Reference counting frees everything else as before; cycles wait for the next pass.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from console.sources.prometheus import freeze_on_resume

YOUNG_EVERY = 50_000  # net allocations between young passes (Python's default: 700)
MIDDLE_EVERY = 20  # young passes between passes over the middle generation (default 10)
NEVER = 1 << 30  # full passes from allocations: never (they come from `after_poll`)
FULL_EVERY_SECONDS = 60.0


class Collector:
    """The process's collector policy; `tune` once at start, `after_poll` after each refresh shown."""

    def __init__(self, timer: Callable[[], float] = time.monotonic) -> None:
        self.timer = timer
        self.tuned = False
        self.full_passes = 0
        self._last_full = 0.0

    def tune(self) -> None:
        if self.tuned:
            return
        self.tuned = True
        self._last_full = self.timer()
        gc.set_threshold(YOUNG_EVERY, MIDDLE_EVERY, NEVER)
        freeze_on_resume(True)

    def after_poll(self) -> bool:
        """One full pass when the last is FULL_EVERY_SECONDS old (only once tuned); whether it ran."""
        if not self.tuned or self.timer() - self._last_full < FULL_EVERY_SECONDS:
            return False
        gc.unfreeze()  # what reading answers froze (`freeze_on_resume`) is looked at too
        gc.collect()
        self._last_full = self.timer()
        self.full_passes += 1
        return True


COLLECTOR = Collector()
