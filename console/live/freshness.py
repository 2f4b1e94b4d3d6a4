"""Whether a fleet's figures are fresh: a fleet with no fresh poll for two intervals says so wherever it is shown.

A poll that fails as a whole, or one that never ends, leaves the last figures on screen and in the recorder's
log; without this they would read as live. The console's header turns `● live` into the age and the reason,
`capcon record` logs it and exits 1 when its last intervals wrote nothing, `capcon watch --once` exits 1.
"""

from __future__ import annotations

from dataclasses import dataclass

STALE_AFTER_INTERVALS = 2


@dataclass
class Freshness:
    """One fleet's last fresh poll, on a monotonic clock the caller reads (this module reads none)."""

    interval_seconds: float
    since: float  # when watching began: before any poll, the age counts from here
    last_fresh: float | None = None
    reason: str = ""  # why the polls since the last fresh one failed, in words; "" when none failed

    def polled(self, at: float) -> None:
        self.last_fresh = at
        self.reason = ""

    def failed(self, words: str) -> None:
        self.reason = words

    def age(self, now: float) -> float:
        """Seconds since the last fresh poll (or since watching began, before the first)."""
        return max(now - (self.last_fresh if self.last_fresh is not None else self.since), 0.0)

    def stale(self, now: float) -> bool:
        return self.age(now) >= STALE_AFTER_INTERVALS * self.interval_seconds

    def words(self, now: float) -> str:
        """'no fresh poll for 7 s: ConnectError: ...' (or 'no poll yet ...'), for a header or a log line."""
        seconds = self.age(now)
        what = "no fresh poll" if self.last_fresh is not None else "no poll yet"
        because = f": {self.reason}" if self.reason else " (a poll still running)"
        return f"{what} for {seconds:.0f} s{because}"
