"""A percentile target judged only as far as the buckets allow: never a breach that some spread of the requests
inside the buckets would meet, never met where some spread would miss, exact on a bound."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.metrics.attainment import Buckets, allowed_share, buckets, is_wide, judge, quantile_bucket
from console.metrics.window import BucketDelta, delta_buckets, delta_quantile

TPOT_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)  # vLLM's


def of(bounds: tuple[float, ...], per_bucket: list[int]) -> Buckets:
    """Buckets from the count in each bucket (one per bound, then the +Inf bucket)."""
    cumulative, running = [], 0.0
    for count in per_bucket[:-1]:
        running += count
        cumulative.append(running)
    made = buckets(bounds, tuple(cumulative), running + per_bucket[-1])
    assert made is not None
    return made


def spread(b: Buckets, at_top: bool) -> list[tuple[float, float]]:
    """(latency, requests) of one distribution the counts allow: each bucket's requests all at its upper bound
    (the slowest spread), or all just above its lower bound (the fastest)."""
    points, below, lower = [], 0.0, 0.0
    for bound, count in zip((*b.bounds, math.inf), (*b.cumulative, b.total)):
        if count > below:
            where = bound if at_top else math.nextafter(lower, math.inf)  # past the last bound: as slow as can be
            points.append((where, count - below))
        below, lower = count, bound
    return points


def meets(points: list[tuple[float, float]], target: float, quantile: float) -> bool:
    total = sum(n for _, n in points)
    over = sum(n for at, n in points if at > target)
    return over / total <= allowed_share(quantile)  # 1 - p as written: 0.05 for a p95


@st.composite
def histograms_and_targets(draw):
    bounds = tuple(sorted(draw(st.sets(st.floats(0.001, 100.0), min_size=1, max_size=8))))
    per_bucket = draw(st.lists(st.integers(0, 50), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    if sum(per_bucket) == 0:
        per_bucket[draw(st.integers(0, len(bounds)))] = 1
    on_bound = draw(st.booleans())
    target = draw(st.sampled_from(bounds)) if on_bound else draw(st.floats(0.0005, 150.0))
    quantile = draw(st.sampled_from([0.5, 0.9, 0.95, 0.99]))
    return of(bounds, per_bucket), target, quantile


@settings(max_examples=500, deadline=None)
@given(histograms_and_targets())
def test_a_judgement_holds_for_every_spread_the_counts_allow(case):
    b, target, quantile = case
    judged = judge(b, target, quantile)
    assert judged is not None
    slowest = meets(spread(b, at_top=True), target, quantile)
    fastest = meets(spread(b, at_top=False), target, quantile)
    if slowest or fastest:
        assert judged.verdict != "missed"  # some spread meets it: not a breach
    if not slowest or not fastest:
        assert judged.verdict != "met"  # some spread misses it: not met
    if judged.verdict == "undetermined":
        assert fastest and not slowest  # and undetermined only where the two extremes truly differ
    low, high = judged.attainment
    assert 0 <= low <= high <= 1
    if judged.on_bound:
        assert low == high


@settings(max_examples=300, deadline=None)
@given(histograms_and_targets())
def test_the_percentile_lies_in_the_bucket_said_to_hold_it(case):
    b, _target, quantile = case
    lo, hi = quantile_bucket(b, quantile) or (None, None)
    assert lo is not None and hi is not None
    # Both extreme spreads put the percentile inside that bucket.
    for at_top in (True, False):
        points = sorted(spread(b, at_top))
        rank, seen = quantile * b.total, 0.0
        for at, n in points:
            seen += n
            if seen >= rank and seen > 0:
                assert lo <= at <= hi or (hi == math.inf and at > lo)
                break


def test_a_target_inside_vllms_50_75_ms_bucket_is_undetermined():
    # 1000 requests: 920 at or below 50 ms, 970 at or below 75 ms. Between 3 % and 8 % are over 60 ms: within
    # the 5 % a p95 allows if the 50 requests of the bucket sit low in it, over it if they sit high.
    b = of(TPOT_BOUNDS, [0, 0, 920, 50, 30, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    judged = judge(b, 0.060, 0.95)
    assert judged is not None
    assert judged.verdict == "undetermined"
    assert judged.bucket == (0.05, 0.075)
    assert judged.over_low == pytest.approx(0.03) and judged.over_high == pytest.approx(0.08)
    assert judged.attainment == pytest.approx((0.92, 0.97))
    # The interpolated p95 says 70.5 ms, a breach; the buckets cannot tell.
    assert 0.06 < delta_quantile(0.95, _delta(b)) < 0.075


def test_on_a_bound_the_judgement_and_the_attainment_are_exact():
    b = of(TPOT_BOUNDS, [0, 0, 920, 50, 30, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    at_75 = judge(b, 0.075, 0.95)
    assert at_75 is not None and at_75.verdict == "met" and at_75.on_bound
    assert at_75.attainment == (0.97, 0.97)
    at_50 = judge(b, 0.050, 0.95)
    assert at_50 is not None and at_50.verdict == "missed" and at_50.attainment == (0.92, 0.92)
    # Exactly the allowance over the target meets it: a p95 is at most the target when 5 % are over it.
    edge = of((0.05, 0.1), [95, 5, 0])
    judged = judge(edge, 0.05, 0.95)
    assert judged is not None and judged.verdict == "met"
    assert judge(of((0.05, 0.1), [94, 6, 0]), 0.05, 0.95).verdict == "missed"  # type: ignore[union-attr]


def test_a_bucket_wholly_over_or_under_the_target_decides_it():
    assert judge(of(TPOT_BOUNDS, [0] * 4 + [100] + [0] * 9), 0.060, 0.95).verdict == "missed"  # all 75-100 ms
    assert judge(of(TPOT_BOUNDS, [0, 100] + [0] * 12), 0.060, 0.95).verdict == "met"  # all 10-25 ms


def test_past_the_last_bound_and_below_the_first():
    b = of((0.1, 0.5), [10, 10, 80])
    past = judge(b, 1.0, 0.95)
    assert past is not None and past.bucket == (0.5, math.inf) and past.verdict == "undetermined"
    below = judge(b, 0.05, 0.5)
    assert below is not None and below.bucket == (0.0, 0.1) and below.verdict == "missed"
    assert quantile_bucket(b, 0.95) == (0.5, math.inf)


def test_nothing_observed_is_not_judged():
    assert judge(None, 0.06, 0.95) is None
    assert judge(of((0.1,), [0, 0]), 0.06, 0.95) is None
    assert delta_buckets(BucketDelta({0.1: 0.0, math.inf: 0.0}, 0.0, 0.0)) is None


def test_a_wide_bucket_is_shown_as_a_range():
    assert is_wide((0.05, 0.075))
    assert is_wide((0.0, 0.01))
    assert not is_wide((0.56, 0.62))  # the gateway's E24 steps are fine enough for one figure


def test_impossible_counts_make_no_buckets():
    assert buckets((0.1, 0.2), (5.0, 4.0), 6.0) is None  # a count going down
    assert buckets((0.2, 0.1), (1.0, 2.0), 3.0) is None  # bounds out of order
    assert buckets((0.1,), (math.nan,), 1.0) is None
    assert Buckets.from_json({"bounds": [0.1], "cumulative": [1], "total": "x"}) is None
    assert Buckets.from_json(of((0.1,), [1, 2]).to_json()) == of((0.1,), [1, 2])


def _delta(b: Buckets) -> BucketDelta:
    return BucketDelta({**dict(zip(b.bounds, b.cumulative)), math.inf: b.total}, None, b.total)
