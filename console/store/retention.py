"""Retention: raw samples for a while, one-minute rollups for longer, then nothing.

CONTRACT (implementation to follow):

    Retention(raw_seconds=48 * 3600, minutes_seconds=90 * 86400)
    apply_retention(store, now, retention) -> RetentionDone   # rolls raw samples older than raw_seconds
                                                              # into `minutes`, deletes them, drops old rollups
"""

from __future__ import annotations

from dataclasses import dataclass

RAW_SECONDS = 48 * 3600.0
MINUTES_SECONDS = 90 * 86400.0


@dataclass(frozen=True)
class Retention:
    raw_seconds: float = RAW_SECONDS
    minutes_seconds: float = MINUTES_SECONDS
