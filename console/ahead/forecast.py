"""Arrivals for the next 5, 15 and 30 minutes: the recent trend, blended toward the plan's profile.

The method, kept small enough to check by hand:

1. The trend: a least-squares line through the fleet's request-rate samples of the last five
   minutes (the view's trend ring, one windowed rate per poll), read at `now` (the level) and
   continued with a damped slope, so a ramp is extrapolated but flattens rather than running away.
2. The plan: the rps the plan's week expects at each minute ahead (console.ahead.profile), corrected
   by what the fleet did against it over the same five minutes (observed / expected, as NVIDIA Dynamo's
   planner corrects its predictions by actual / expected): a fleet running at half the plan's level is
   forecast to follow the plan's shape at its own level, not to jump back to the plan's figures. The
   ratio is bounded (0.1-10) and shrunk toward 1 with a short history, like the slope.
3. The blend: the trend's weight falls as exp(-minutes / 15), so the near minutes follow the fleet
   and the far ones lean on the plan. A trend resting on little history (`watch --once` has one or
   two samples) is trusted less: its slope is shrunk and the plan takes over sooner.
   A departure from the plan that is moving clearly (its slope more than 3 standard errors from flat, the
   error never taken below what counting Poisson arrivals allows) is followed instead: damped and faded
   less, not at all from 6 standard errors. A ramp through the capacity is then called where it crosses,
   not where the plan would have it level off; the arrivals' own wander stays under the bar and is
   forecast as before (the demo week's backtest is unchanged within 0.002 req/s).
4. The band: the spread of the fit's residuals, widening with the horizon, plus half the gap
   between trend and plan (where the two disagree the forecast is less sure). Too few samples to
   measure a spread: no band (None), never a made-up one.

Saturation is the first moment the blended forecast goes over the capacity of the replicas up;
None when it does not within the last horizon.

No forecasting library, measured (benchmarks/bench_forecast_library.py, the demo's recorded weeks, 672
origins each, MAE in req/s at 5, 15, 30 minutes): statsmodels' damped-trend Holt fitted on the same five minutes
is worse than the naive forecast (off plan 0.56, 1.00, 1.60 against this one's 0.38, 0.46, 0.51); fitted on an
hour of observed / planned, the plan's profile as its level, it wins off plan at 5 minutes (0.33), ties at 15
(0.45), loses at 30 (0.56), and wins on plan (0.25, 0.23, 0.24 against 0.32, 0.29, 0.26), for 300-1,100x the
CPU (21-75 ms a forecast against 0.07 ms; numpy, scipy and pandas to install, 1.1-1.3 s to import). Its gain
is the hour of history, not the library: a longer window for the plan correction here is the thing to try first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

HORIZONS_MINUTES: tuple[int, ...] = (5, 15, 30)
TREND_WINDOW_SECONDS = 300.0  # the samples the trend is fitted on
FULL_TRUST_MINUTES = 5.0  # a trend over this much history is fully trusted; less is shrunk toward the plan
MIN_SLOPE_SPAN_SECONDS = 30.0  # samples spanning less than this give a level, no slope
DAMPING = 0.95  # per minute: the slope's effect adds up to at most 19 minutes' worth
PLAN_PULL_MINUTES = 15.0  # the trend's weight at h minutes ahead is exp(-h / this), with full trust
MIN_TRUST = 0.2  # with no history the trend still counts for the first minutes (exp(-h / 3))
CLARITY_FROM_T = 3.0  # a departure's slope under this many standard errors is not followed (_clarity)
CLARITY_FULL_T = 6.0  # ... and followed fully from this many
BAND_Z = 1.64  # about a 90 % band for normal residuals
CORRECTION_BOUNDS = (0.1, 10.0)  # observed / expected beyond these says the plan is for another fleet

BISECTIONS = 30  # a minute halved this often: under a tenth of a millisecond

Basis = Literal["trend+plan", "trend", "plan", "none"]


@dataclass(frozen=True)
class Profile:
    """What the plan expects ahead: (minutes from now, rps) knots, linear between them, flat beyond the ends."""

    knots: tuple[tuple[float, float], ...]

    def at(self, minutes: float) -> float | None:
        knots = self.knots
        if not knots:
            return None
        if minutes <= knots[0][0]:
            return knots[0][1]
        for (x0, y0), (x1, y1) in pairwise(knots):
            if minutes <= x1:
                return y0 if x1 <= x0 else y0 + (y1 - y0) * (minutes - x0) / (x1 - x0)
        return knots[-1][1]

    def by_minute(self, last: int) -> list[float | None]:
        """`at(0)`, `at(1)`, ... `at(last)`, the knots walked once."""
        knots = self.knots
        if not knots:
            return [None] * (last + 1)
        out: list[float | None] = []
        i = 0
        for minute in range(last + 1):
            while i + 1 < len(knots) and knots[i + 1][0] < minute:
                i += 1
            if minute <= knots[0][0] or i + 1 >= len(knots):
                out.append(knots[0][1] if minute <= knots[0][0] else knots[-1][1])
                continue
            (x0, y0), (x1, y1) = knots[i], knots[i + 1]
            out.append(y0 if x1 <= x0 else y0 + (y1 - y0) * (minute - x0) / (x1 - x0))
        return out


@dataclass(frozen=True)
class Forecast:
    horizon_minutes: tuple[int, ...]
    rps: tuple[float | None, ...]
    rps_low: tuple[float | None, ...]
    rps_high: tuple[float | None, ...]
    minutes_to_saturation: float | None  # 0: over capacity now; None: not within the last horizon, or unknown
    lead_time_minutes: float | None  # how long a new replica takes to serve (the plan's lead time)
    capacity_rps: float | None  # replicas up x the plan's capacity per replica
    trend_samples: int  # the request-rate samples the trend rests on
    basis: Basis
    by_minute: tuple[float | None, ...] = ()  # the forecast at 0, 1, ... minutes ahead, to the last horizon
    # The plan's profile was multiplied by this (observed / expected over the trend's minutes, shrunk toward 1
    # with a short history); None when there was no plan or no recent rate to compare it with.
    plan_correction: float | None = None

    @property
    def saturates_before_a_replica_starts(self) -> bool:
        m, lead = self.minutes_to_saturation, self.lead_time_minutes
        return m is not None and lead is not None and m < lead


@dataclass(frozen=True)
class _Trend:
    level: float  # rps at `now`
    slope: float  # rps per minute, already shrunk by trust
    trust: float  # 0-1: how much history the fit had
    sigma: float | None  # residual spread, rps; None with too few samples
    samples: int
    # 0-1: how clearly a departure from the plan is moving (its slope against the slope's standard error);
    # 0 for a trend of the rates themselves, or too few samples to tell.
    clarity: float = 0.0

    def at(self, minutes: float, damping: float) -> float:
        return max(self.offset(minutes, damping), 0.0)

    def offset(self, minutes: float, damping: float) -> float:
        """The line at `minutes` ahead, unclamped (a deviation from the plan can be negative)."""
        if damping >= 1.0:
            added = minutes
        else:
            added = damping * (1 - damping**minutes) / (1 - damping)
        return self.level + self.slope * added


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _recent(samples: Sequence[tuple[float, float | None]], now: float) -> list[tuple[float, float]]:
    """The known rates of the trend's window, as (minutes from `now`, <= 0 for the past; rps)."""
    return [
        ((float(at) - now) / 60.0, float(v))
        for at, v in samples
        if v is not None and _finite(at) and _finite(v) and now - TREND_WINDOW_SECONDS <= at
    ]


def _shrunk(value: float, variance: float) -> float:
    """`value` times value^2 / (value^2 + variance): a figure no larger than its own standard error is mostly
    the arrivals' noise and mostly dropped; a clear one keeps nearly all of itself."""
    square = value * value
    return value * square / (square + variance) if square + variance > 0 else value


def _trend(recent: Sequence[tuple[float, float]], deviation: bool = False, mean_rps: float = 0.0) -> _Trend | None:
    """A least-squares line through `recent`, read at `now` (minutes 0). With `deviation` the points are the
    fleet's rates less the corrected plan's: the level may be negative and is shrunk by its significance too."""
    if not recent:
        return None
    xs = [x for x, _ in recent]
    ys = [v for _, v in recent]
    n = len(recent)
    span = max(xs) - min(xs)
    trust = min(span / FULL_TRUST_MINUTES, 1.0)
    if n < 2 or span * 60.0 < MIN_SLOPE_SPAN_SECONDS:
        return _Trend(level=ys[-1], slope=0.0, trust=trust, sigma=None, samples=n)
    clarity = 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    level = my - slope * mx
    sigma = None
    if n >= 3:
        residuals = [y - (level + slope * x) for x, y in zip(xs, ys)]
        sigma = math.sqrt(sum(r * r for r in residuals) / (n - 2))
        # A noisy slope continued for minutes would add the arrivals' noise tenfold: shrunk by its significance.
        if deviation:
            level = _shrunk(level, sigma * sigma * (1 / n + mx * mx / sxx))
            clarity = _clarity(slope, max(sigma * sigma / sxx * _inflation(residuals), _counting_floor(mean_rps, span)))
        slope = _shrunk(slope, sigma * sigma / sxx)
    if not deviation:
        level = max(level, 0.0)
    return _Trend(level=level, slope=slope * trust, trust=trust, sigma=sigma, samples=n, clarity=clarity * trust)


def _inflation(residuals: Sequence[float]) -> float:
    """How much the residuals' likeness to their neighbours widens the slope's error: 1 + 2 x the sum of their
    autocorrelations at lags 1, 2, ... while positive. Windowed rates polled more often than their window
    overlap: a minute's window read every 2 s gives 30 samples worth about one, and counting them as 30 would
    make any wander of the arrivals look like a clear ramp."""
    n = len(residuals)
    total = sum(r * r for r in residuals)
    if total <= 0 or n < 3:
        return 1.0
    added = 0.0
    for lag in range(1, n // 2 + 1):
        rho = sum(residuals[i] * residuals[i + lag] for i in range(n - lag)) / total
        if rho <= 0:
            break
        added += rho
    return 1.0 + 2.0 * added


def _counting_floor(mean_rps: float, span_minutes: float) -> float:
    """The least variance (rps per minute, squared) of a slope read from arrivals counted over `span_minutes`
    at `mean_rps`: Poisson counts give a rate's slope over T seconds no better than rate x 12 / T^3 (per second
    squared), however the rates were windowed and sampled. Bursty arrivals only add to it; a fit whose
    residuals say less (noiseless samples, or a smooth curve's bend) is held to it."""
    seconds = span_minutes * 60.0
    return max(mean_rps, 0.0) * 12.0 / seconds**3 * 3600.0 if seconds > 0 else math.inf


def _clarity(slope: float, variance: float) -> float:
    """0 while the slope is under CLARITY_FROM_T standard errors from flat (the arrivals' own wander: the forecast
    is what it was without this), rising linearly to 1 at CLARITY_FULL_T (a ramp no noise makes)."""
    if slope == 0:
        return 0.0
    if variance <= 0:
        return 1.0
    t = abs(slope) / math.sqrt(variance)
    return min(max((t - CLARITY_FROM_T) / (CLARITY_FULL_T - CLARITY_FROM_T), 0.0), 1.0)


def plan_correction(recent: Sequence[tuple[float, float]], profile: Profile, trust: float) -> float:
    """Observed / expected over the same minutes (bounded), shrunk toward 1 by `trust`; 1 when the plan expected
    nothing there (a ratio to zero says nothing about the plan's shape)."""
    expected = [profile.at(x) for x, _ in recent]
    known = [(v, e) for (_, v), e in zip(recent, expected) if e is not None]
    planned = sum(e for _, e in known)
    if not known or not planned > 0:
        return 1.0
    low, high = CORRECTION_BOUNDS
    ratio = min(max(sum(v for v, _ in known) / planned, low), high)
    return 1.0 + trust * (ratio - 1.0)


def forecast(
    samples: Sequence[tuple[float, float | None]],
    now: float,
    profile: Profile | None = None,
    capacity_rps: float | None = None,
    lead_time_minutes: float | None = None,
    horizons: Sequence[int] = HORIZONS_MINUTES,
    damping: float = DAMPING,
) -> Forecast:
    """Arrivals at each horizon (minutes after `now`) from `samples` ((unix time, rps) pairs, oldest first;
    an unknown rate as None) and the plan's `profile`; when they pass `capacity_rps`, if within the last horizon.

    Without samples the forecast is the plan's profile (basis "plan"); without a profile, the trend alone
    ("trend"); without either every figure is None ("none").
    """
    recent = _recent(samples, now)
    trend = _trend(recent)
    if profile is not None and not profile.knots:
        profile = None
    correction = plan_correction(recent, profile, trend.trust) if profile is not None and trend is not None else None
    if profile is not None and correction is not None and trend is not None:
        # With a plan the trend is of the fleet's departure from the corrected plan: the plan gives the shape
        # (a morning ramp is the plan's, not a trend to extrapolate), the trend what the fleet does beyond it.
        deviations = [(x, v - correction * (profile.at(x) or 0.0)) for x, v in recent]
        mean_rps = sum(v for _, v in recent) / len(recent)
        trend = _trend(deviations, deviation=True, mean_rps=mean_rps) or trend
    tau = PLAN_PULL_MINUTES * max(trend.trust if trend else 0.0, MIN_TRUST)
    # A clear departure from the plan is followed: neither damped nor faded back toward the plan in step with it.
    clarity = trend.clarity if trend is not None else 0.0
    damping = damping + (1.0 - damping) * clarity
    capacity = capacity_rps if _finite(capacity_rps) else None
    lead = lead_time_minutes if _finite(lead_time_minutes) else None

    def planned(minutes: float) -> float | None:
        at = profile.at(minutes) if profile is not None else None
        return at * correction if at is not None and correction is not None else at

    def following(minutes: float, plan: float | None) -> float | None:
        """Where the fleet's own recent course leads: the trend alone, or the corrected plan (`plan`, its value
        at `minutes`) plus the trend of the fleet's departure from it."""
        if trend is None:
            return None
        if plan is None:
            return trend.at(minutes, damping)
        return max(plan + trend.offset(minutes, damping), 0.0)

    def blended(minutes: float) -> float | None:
        plan = planned(minutes)
        own = following(minutes, plan)
        if own is None:
            return plan
        if plan is None:
            return own
        weight = clarity + (1 - clarity) * math.exp(-minutes / tau)
        return weight * own + (1 - weight) * plan

    def band(minutes: float, centre: float | None) -> tuple[float | None, float | None]:
        if centre is None or trend is None or trend.sigma is None:
            return None, None
        half = BAND_Z * trend.sigma * math.sqrt(1 + minutes / FULL_TRUST_MINUTES)
        plan = planned(minutes)
        own = following(minutes, plan)
        if plan is not None and own is not None:
            half += abs(own - plan) / 2
        return max(centre - half, 0.0), centre + half

    count = math.ceil(max(horizons)) + 1 if horizons else 1
    by_minute = _by_minute(count - 1, profile, correction, trend, tau, damping)
    rps = tuple(by_minute[h] if 0 <= h < count else blended(h) for h in horizons)
    bands = [band(h, r) for h, r in zip(horizons, rps)]
    basis: Basis = (
        "none"
        if trend is None and profile is None
        else "plan"
        if trend is None
        else "trend"
        if profile is None
        else "trend+plan"
    )
    last = max(horizons) if horizons else 0
    return Forecast(
        horizon_minutes=tuple(horizons),
        rps=rps,
        rps_low=tuple(low for low, _ in bands),
        rps_high=tuple(high for _, high in bands),
        minutes_to_saturation=saturation_minutes(blended, capacity, last, by_minute),
        lead_time_minutes=lead,
        capacity_rps=capacity,
        trend_samples=trend.samples if trend else 0,
        basis=basis,
        by_minute=by_minute,
        plan_correction=correction,
    )


def _by_minute(
    last: int, profile: Profile | None, correction: float | None, trend: _Trend | None, tau: float, damping: float
) -> tuple[float | None, ...]:
    """The blended forecast at 0, 1, ... `last` minutes: what `blended` gives there, with the plan walked once
    and the damping and weights multiplied along (a backtest asks for this ten thousand times a week)."""
    plans: list[float | None] = [None] * (last + 1)
    if profile is not None:
        plans = profile.by_minute(last)
        if correction is not None:
            plans = [p * correction if p is not None else None for p in plans]
    if trend is None:
        return tuple(plans)
    out: list[float | None] = []
    added, step, weight, fade = 0.0, 1.0, 1.0, math.exp(-1.0 / tau)
    for plan in plans:
        line = trend.level + trend.slope * added
        if plan is None:
            out.append(max(line, 0.0))
        else:
            own = max(plan + line, 0.0)
            kept = trend.clarity + (1 - trend.clarity) * weight
            out.append(kept * own + (1 - kept) * plan)
        step *= damping
        added = added + 1.0 if damping >= 1.0 else added + step
        weight *= fade
    return tuple(out)


def saturation_minutes(
    curve: Callable[[float], float | None],
    capacity: float | None,
    last: float,
    by_minute: Sequence[float | None] | None = None,
) -> float | None:
    """The first minute in [0, last] at which `curve` (minutes -> rps or None) goes over `capacity`;
    None when it stays at or under it, or either is unknown. Found minute by minute (`by_minute`: the curve
    at 0, 1, ... minutes, already known), then by bisection to well under a second."""
    if capacity is None:
        return None

    def at_minute(minute: int) -> float | None:
        return by_minute[minute] if by_minute is not None and minute < len(by_minute) else curve(float(minute))

    start = at_minute(0)
    if start is None:
        return None
    if start > capacity:
        return 0.0
    below = 0.0
    for minute in range(1, math.ceil(last) + 1):
        value = at_minute(minute)
        if value is not None and value > capacity:
            above = float(minute)
            for _ in range(BISECTIONS):
                middle = (below + above) / 2
                crossed = curve(middle)
                if crossed is not None and crossed > capacity:
                    above = middle
                else:
                    below = middle
            return above
        below = float(minute)
    return None
