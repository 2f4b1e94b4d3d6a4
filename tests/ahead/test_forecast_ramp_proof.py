"""The live forecast against a ramp whose truth we control: arrivals rising steadily through the capacity of the
replicas, counted as the console counts them (a 60 s window read every 2 s, its defaults), and the forecast's
minutes to saturation taken 10 minutes before the crossing, over several seeds.

The arrivals are Poisson with a rate rising linearly (drawn by thinning), so each seed's windowed rates carry
the counting noise a simulated or real fleet's have. The plan expects a flat hour well under the ramp: the
forecast has to follow the fleet's departure from the plan, not fade it back (docs/history.md has the figures
per seed, and the ramps too slow for a five-minute trend to tell from noise).
"""

from __future__ import annotations

import random
from bisect import bisect_right

import pytest

from console.ahead.forecast import TREND_WINDOW_SECONDS, Profile, forecast

WINDOW_SECONDS = 60.0  # watch's default window
INTERVAL_SECONDS = 2.0  # watch's default refresh
AHEAD_MINUTES = 10.0  # the call is taken this long before the crossing
TOLERANCE = 0.25
SEEDS = range(8)


def arrivals(rng: random.Random, rate, start: float, end: float) -> list[float]:
    """Arrival times in [start, end) of a Poisson process of rate `rate(t)` (non-decreasing), by thinning."""
    top = rate(end)
    out: list[float] = []
    at = start
    while True:
        at += rng.expovariate(top)
        if at >= end:
            return out
        if rng.random() * top < rate(at):
            out.append(at)


def windowed_rates(times: list[float], history: float) -> list[tuple[float, float | None]]:
    """The console's trend ring: at each refresh up to 0 (now), the requests of the last window over its seconds."""
    samples: list[tuple[float, float | None]] = []
    steps = int(history / INTERVAL_SECONDS)
    for i in range(steps + 1):
        at = -history + i * INTERVAL_SECONDS
        count = bisect_right(times, at) - bisect_right(times, at - WINDOW_SECONDS)
        samples.append((at, count / WINDOW_SECONDS))
    return samples


def called_minutes(seed: int, capacity: float, per_minute: float, planned: float) -> float | None:
    """The forecast's minutes to saturation at 0, the ramp crossing `capacity` AHEAD_MINUTES later."""

    def rate(t: float) -> float:  # rps at t seconds from now
        return max(capacity + per_minute * (t / 60.0 - AHEAD_MINUTES), 0.1)

    rng = random.Random(seed)
    history = TREND_WINDOW_SECONDS
    times = arrivals(rng, rate, -history - WINDOW_SECONDS, 1.0)
    ahead = forecast(
        windowed_rates(times, history), 0.0, Profile(((0.0, planned),)), capacity_rps=capacity, lead_time_minutes=10.0
    )
    return ahead.minutes_to_saturation


@pytest.mark.parametrize(
    "capacity, per_minute",
    [
        (40.0, 2.0),  # 10 replicas of 4 req/s, from half to full in 10 minutes
        (100.0, 4.0),  # 25 replicas, from 60 % to full in 10 minutes
    ],
)
def test_a_ramp_through_capacity_is_called_ten_minutes_ahead_within_a_quarter(capacity, per_minute):
    calls = [called_minutes(seed, capacity, per_minute, planned=capacity / 2) for seed in SEEDS]
    assert all(c is not None for c in calls), calls
    low, high = AHEAD_MINUTES * (1 - TOLERANCE), AHEAD_MINUTES * (1 + TOLERANCE)
    assert all(low <= c <= high for c in calls), calls  # type: ignore[operator]


def test_the_same_fleet_flat_under_capacity_is_not_called():
    """The other side: the ramp's own noise, without the ramp (90 % of capacity, flat), calls nothing."""

    def never(seed: int) -> float | None:
        rng = random.Random(seed)
        times = arrivals(rng, lambda t: 36.0, -TREND_WINDOW_SECONDS - WINDOW_SECONDS, 1.0)
        samples = windowed_rates(times, TREND_WINDOW_SECONDS)
        return forecast(samples, 0.0, Profile(((0.0, 20.0),)), capacity_rps=40.0).minutes_to_saturation

    assert [never(seed) for seed in SEEDS] == [None] * len(SEEDS)
