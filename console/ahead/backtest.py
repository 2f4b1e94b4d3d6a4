"""How wrong the forecast has been on this fleet: the live forecaster walked over recorded arrivals.

At every recorded minute (the origin) the same `console.ahead.forecast.forecast` the console calls is
handed only what came before: the fleet's per-minute request rates of the trend window ending at the
origin, the plan's profile for the minutes after it, the capacity of the replicas answering then. Its
figure for 5, 15 and 30 minutes ahead is set against the rate recorded at that minute, beside two
plain forecasters on the same origins:

* naive: the rate at the origin, held (what a glance at the dashboard says);
* profile: the plan's profile alone (what the plan says for that minute).

Errors are MAE (mean absolute error, req/s) and MAPE (mean absolute error over the actual rate, a 0-1
fraction, over the points whose actual rate is above zero: a quiet minute has no percentage error).

Minutes-to-saturation calls are scored where a capacity is known and the fleet was not over it at the
origin: a call (saturation within the last horizon) came true when the recorded rate went over the
origin's capacity within that horizon, and its error is the gap in minutes between the called and the
recorded crossing; a call that did not come true is a false alarm, a crossing with no call a miss.

Arrivals come in as `Minute`s, one per recorded minute (`at` its end, `rps` the fleet's rate over it):
`fleet_minutes` builds them from per-replica request counters the way `capcon history` reads them.

Pure: plain data in, no clock, no I/O.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from console.ahead.forecast import DAMPING, HORIZONS_MINUTES, TREND_WINDOW_SECONDS, Profile, forecast

MINUTE = 60.0
MAX_STEP_SECONDS = 180.0  # a longer step between a replica's points is a gap: its requests' minute is unknown
TRUTH_SLACK_SECONDS = 30.0  # the recorded minute taken as the truth for origin + h lies within this of it


@dataclass(frozen=True)
class Minute:
    at: float  # the end of the minute (unix seconds): the moment its rate is known
    rps: float | None  # the fleet's request rate over the minute; None unknown
    capacity_rps: float | None = None  # what the replicas answering then carry (the plan's per-replica capacity)


@dataclass(frozen=True)
class HorizonError:
    horizon_minutes: int
    points: int  # forecasts scored (origin and origin + horizon both known)
    mae_rps: float | None
    mape: float | None  # a 0-1 fraction; None without a point whose actual rate is above zero
    mape_points: int


@dataclass(frozen=True)
class SaturationCalls:
    origins: int  # origins scored: capacity known, not over it, the whole last horizon recorded after
    calls: int  # origins where the forecast said saturation within the last horizon
    came_true: int  # of the calls, those where the recorded rate did pass the capacity within it
    false_alarms: int
    missed: int  # recorded crossings within the horizon that the forecast did not call
    mae_minutes: float | None  # |called - recorded| minutes, over the calls that came true


@dataclass(frozen=True)
class Backtest:
    minutes: int  # recorded minutes with a known rate
    origins: int  # forecasts made (minutes with a full trend window before them)
    forecast: tuple[HorizonError, ...]
    naive: tuple[HorizonError, ...]
    profile: tuple[HorizonError, ...] | None  # None without a plan
    saturation: SaturationCalls | None  # None without a capacity

    @property
    def scored(self) -> bool:
        """At least one horizon has a forecast scored."""
        return any(e.points for e in self.forecast)

    @property
    def complete(self) -> bool:
        """Every horizon has a forecast scored: the history holds the trend window and the last horizon after it."""
        return bool(self.forecast) and all(e.points for e in self.forecast)


def needed_minutes(horizons: Sequence[int] = HORIZONS_MINUTES) -> int:
    """The recorded minutes one scored forecast at every horizon needs: its trend window and the last horizon."""
    return int(TREND_WINDOW_SECONDS / MINUTE) + max(horizons) + 1


class _Errors:
    def __init__(self) -> None:
        self.absolute = 0.0
        self.points = 0
        self.relative = 0.0
        self.relative_points = 0

    def add(self, predicted: float | None, actual: float) -> None:
        if predicted is None or not math.isfinite(predicted):
            return
        gap = abs(predicted - actual)
        self.absolute += gap
        self.points += 1
        if actual > 0:
            self.relative += gap / actual
            self.relative_points += 1

    def result(self, horizon: int) -> HorizonError:
        return HorizonError(
            horizon_minutes=horizon,
            points=self.points,
            mae_rps=self.absolute / self.points if self.points else None,
            mape=self.relative / self.relative_points if self.relative_points else None,
            mape_points=self.relative_points,
        )


def backtest(
    minutes: Sequence[Minute],
    profile_at: Callable[[float], Profile | None] | None = None,
    lead_time_minutes: float | None = None,
    horizons: Sequence[int] = HORIZONS_MINUTES,
    damping: float = DAMPING,
) -> Backtest:
    """Walk `minutes` (oldest first) and score the forecast made at each one against what came after.

    `profile_at(origin)`: the plan's profile for the minutes after `origin` (console.ahead.profile.plan_profile
    at the plan clock of that moment), or None where no plan was in force."""
    known = [m for m in minutes if m.rps is not None and math.isfinite(m.rps)]
    times = [m.at for m in known]
    rates = [m.rps for m in known]
    horizons = tuple(horizons)
    last = max(horizons)
    model = {h: _Errors() for h in horizons}
    naive = {h: _Errors() for h in horizons}
    planned = {h: _Errors() for h in horizons}
    has_plan = False
    sat = [0, 0, 0, 0, 0]  # origins, calls, came true, false alarms, missed
    sat_gaps: list[float] = []
    has_capacity = False
    origins = 0
    first = times[0] if times else 0.0

    by_minute = {round(t / MINUTE): r for t, r in zip(times, rates) if t == round(t / MINUTE) * MINUTE}

    def actual(at: float) -> float | None:
        aligned = round(at / MINUTE)
        if aligned in by_minute and abs(aligned * MINUTE - at) <= TRUTH_SLACK_SECONDS:
            return by_minute[aligned]  # the usual case: minute ends, found without a search
        i = bisect_left(times, at - TRUTH_SLACK_SECONDS)
        if i < len(times) and abs(times[i] - at) <= TRUTH_SLACK_SECONDS:
            return rates[i]
        return None

    for index, point in enumerate(known):
        now = point.at
        if now - first < TREND_WINDOW_SECONDS:
            continue  # the console would forecast here too, on less: scored only on a full trend window
        origins += 1
        start = bisect_left(times, now - TREND_WINDOW_SECONDS)
        samples = [(times[i], rates[i]) for i in range(start, index + 1)]
        profile = profile_at(now) if profile_at is not None else None
        capacity = point.capacity_rps if point.capacity_rps is not None and math.isfinite(point.capacity_rps) else None
        ahead = forecast(
            samples,
            now,
            profile,
            capacity_rps=capacity,
            lead_time_minutes=lead_time_minutes,
            horizons=horizons,
            damping=damping,
        )
        for h, predicted in zip(horizons, ahead.rps):
            truth = actual(now + h * MINUTE)
            if truth is None:
                continue
            model[h].add(predicted, truth)
            naive[h].add(point.rps, truth)
            if profile is not None and profile.knots:
                has_plan = True
                planned[h].add(profile.at(float(h)), truth)
        if capacity is None:
            continue
        has_capacity = True
        crossing = _recorded_crossing(actual, now, capacity, last)
        if crossing is None or point.rps is None or point.rps > capacity:
            continue  # the rest of the horizon is not recorded, or the fleet is over already: nothing to call
        called = ahead.minutes_to_saturation
        sat[0] += 1
        if called is not None:
            sat[1] += 1
            if math.isfinite(crossing):
                sat[2] += 1
                sat_gaps.append(abs(called - crossing))
            else:
                sat[3] += 1
        elif math.isfinite(crossing):
            sat[4] += 1
    return Backtest(
        minutes=len(known),
        origins=origins,
        forecast=tuple(model[h].result(h) for h in horizons),
        naive=tuple(naive[h].result(h) for h in horizons),
        profile=tuple(planned[h].result(h) for h in horizons) if has_plan else None,
        saturation=SaturationCalls(
            origins=sat[0],
            calls=sat[1],
            came_true=sat[2],
            false_alarms=sat[3],
            missed=sat[4],
            mae_minutes=sum(sat_gaps) / len(sat_gaps) if sat_gaps else None,
        )
        if has_capacity
        else None,
    )


def _recorded_crossing(actual: Callable[[float], float | None], now: float, capacity: float, last: int) -> float | None:
    """Minutes after `now` at which the recorded rate first went over `capacity` within `last` minutes; inf when
    it did not; None when a minute of that stretch is not recorded (nobody knows)."""
    for minute in range(1, last + 1):
        value = actual(now + minute * MINUTE)
        if value is None:
            return None
        if value > capacity:
            return float(minute)
    return math.inf


# --- arrivals per minute from request counters --------------------------------------------------


@dataclass(frozen=True)
class CounterPoint:
    """One replica's requests counter at one moment (the last sample of a recorded minute)."""

    at: float
    requests: float | None
    start_time: float | None = None  # the process start: a change is a restart


def fleet_minutes(
    replicas: Mapping[str, Sequence[CounterPoint]],
    capacity_per_replica: Callable[[float], float | None] | None = None,
) -> list[Minute]:
    """The fleet's request rate per minute: each replica's counter increase between neighbouring points over
    their elapsed time, set on the minute its newer point falls in, summed over the replicas known in it.

    A step that restarted (the counter went down, or a new process start) or spans more than
    MAX_STEP_SECONDS is unknown rather than guessed. `capacity_per_replica(at)`: the plan's per-replica
    capacity then; the minute's capacity is that times the replicas with a rate in it."""
    totals: dict[float, list[float]] = {}  # minute end -> [rps, replicas]
    for points in replicas.values():
        ordered = sorted(points, key=lambda p: p.at)
        steps: dict[float, list[float]] = {}  # minute end -> [requests, seconds] of this replica's steps ending in it
        for older, newer in pairwise(ordered):
            elapsed = newer.at - older.at
            if not 0 < elapsed <= MAX_STEP_SECONDS or older.requests is None or newer.requests is None:
                continue
            restarted = newer.requests < older.requests or (
                older.start_time is not None and newer.start_time is not None and newer.start_time != older.start_time
            )
            if restarted:
                continue
            end = math.floor(newer.at / MINUTE) * MINUTE + MINUTE
            step = steps.setdefault(end, [0.0, 0.0])
            step[0] += newer.requests - older.requests
            step[1] += elapsed
        # Two of a replica's steps ending in one minute (a sample taken twice in it) make one rate, not two.
        for end, (requests, seconds) in steps.items():
            entry = totals.setdefault(end, [0.0, 0.0])
            entry[0] += requests / seconds
            entry[1] += 1
    out = []
    for end in sorted(totals):
        rps, answering = totals[end]
        per = capacity_per_replica(end) if capacity_per_replica is not None else None
        capacity = answering * per if per is not None and math.isfinite(per) else None
        out.append(Minute(at=end, rps=rps, capacity_rps=capacity))
    return out
