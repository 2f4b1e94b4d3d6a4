"""How wrong the forecast has been on a recorded fleet: the history file read, the backtest run on it.

`fleet_backtest` is the step `capcon history --backtest` runs over any range; `forecast_accuracy` is what the
console and `watch --once --db` quote beside the forecast: the backtest of the last week recorded
(console.ahead.accuracy.REACH_SECONDS bounds the cost, whatever the file keeps), read through a read-only
connection so that it never takes the recorder's write lock (WAL: the reader sees the last committed poll).

The fleet's request rate is rebuilt minute by minute from the recorded request counters; the plan's profile is
read at the plan clock the polls recorded (a `demo --db` week runs a simulated clock), else at the wall clock in
the plan's zone. This is I/O and CPU (about 0.9 s for a week of minutes): the console runs it on a worker thread.
"""

from __future__ import annotations

import sqlite3
from bisect import bisect_right
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from console.ahead.accuracy import REACH_SECONDS, ForecastAccuracy, accuracy_of
from console.ahead.backtest import Backtest, CounterPoint, backtest, fleet_minutes
from console.ahead.forecast import TREND_WINDOW_SECONDS, Profile
from console.ahead.profile import plan_profile
from console.plan.model import Plan
from console.store.arrivals import minute_plan_clocks, minute_requests
from console.store.database import HistoryError, Store

CLOCK_REACH_SECONDS = 120.0  # a recorded plan clock stands for the minutes just after it, not across a gap
LEAD_IN_SECONDS = TREND_WINDOW_SECONDS + 60.0  # the first forecast of the range looks back a trend window


def fleet_backtest(store: Store, fleet: str, start: float, end: float, plan: Plan | None) -> Backtest:
    """The backtest of one fleet's recorded arrivals in [start, end) against `plan` (None: the trend alone)."""
    read_from = start - LEAD_IN_SECONDS
    counters = {
        url: [CounterPoint(at, requests, started) for at, requests, started in points]
        for url, points in minute_requests(store, fleet, read_from, end).items()
    }
    per_replica = plan.capacity.rps_per_replica if plan is not None else None
    minutes = fleet_minutes(counters, (lambda at: per_replica) if per_replica else None)
    profile_at = profiles_at(plan, minute_plan_clocks(store, fleet, read_from, end)) if plan is not None else None
    return backtest(
        minutes,
        profile_at,
        lead_time_minutes=plan.lead_time_seconds / 60.0 if plan is not None else None,
    )


def profiles_at(plan: Plan, clocks: list[tuple[float, float]]) -> Callable[[float], Profile]:
    """origin -> the plan's profile after it, at the recorded plan clock, else the wall clock in the plan's zone."""
    zone = ZoneInfo(plan.timezone)
    times = [at for at, _ in clocks]

    def profile_at(origin: float) -> Profile:
        i = bisect_right(times, origin) - 1
        if i >= 0 and origin - times[i] <= CLOCK_REACH_SECONDS:
            clock = clocks[i][1] + (origin - times[i])
        else:
            offset = datetime.fromtimestamp(origin, UTC).astimezone(zone).utcoffset()
            clock = origin + (offset.total_seconds() if offset is not None else 0.0)
        return plan_profile(plan, clock)

    return profile_at


def forecast_accuracy(
    path: str | Path, fleets: Sequence[tuple[str, Plan | None]], now: float
) -> list[ForecastAccuracy | None]:
    """Per (fleet name, plan in force): the forecast's backtest error over the last week recorded up to `now`.

    None for every fleet when the file cannot be read (not there yet, not a history, damaged): the console goes
    on without the figure rather than failing over it."""
    try:
        store = Store.open(path, read_only=True)
    except HistoryError:
        return [None] * len(fleets)
    try:
        return [accuracy_of(fleet_backtest(store, name, now - REACH_SECONDS, now, plan)) for name, plan in fleets]
    except sqlite3.Error:
        return [None] * len(fleets)
    finally:
        store.close()
