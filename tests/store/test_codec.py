"""Histogram blobs: every histogram comes back exactly, and a damaged blob is refused, never misread."""

from __future__ import annotations

import math
from itertools import accumulate

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from console.metrics.vllm import Histogram
from console.metrics.window import histogram_quantile
from console.store import codec
from console.store.codec import (
    CodecError,
    bounds_from_text,
    bounds_text,
    decode,
    encode,
    layout_of,
)

finite_bounds = st.lists(
    st.floats(min_value=-1e6, max_value=1e9, allow_nan=False), min_size=0, max_size=30, unique=True
).map(sorted)
bounds = finite_bounds.map(lambda b: tuple(b) + (math.inf,))
sums = st.none() | st.floats(allow_nan=False)
layouts = st.integers(min_value=1, max_value=2**40)


@st.composite
def whole_histograms(draw):
    edges = draw(bounds)
    increments = draw(
        st.lists(st.integers(min_value=0, max_value=2**53 // 64), min_size=len(edges), max_size=len(edges))
    )
    counts = tuple(float(c) for c in accumulate(increments))
    count = draw(st.none() | st.just(counts[-1]) | st.integers(min_value=0, max_value=2**53).map(float))
    return Histogram(edges, counts, draw(sums), count)


@st.composite
def fractional_histograms(draw):
    edges = draw(bounds)
    increments = draw(st.lists(st.floats(min_value=0, max_value=1e12), min_size=len(edges), max_size=len(edges)))
    counts = tuple(accumulate(increments))
    # What the blob stores are the steps between the float sums: 1.0 + 5e-324 is 1.0, a whole step again.
    steps = [after - before for before, after in zip((0.0, *counts[:-1]), counts)]
    assume(any(step != int(step) for step in steps))
    count = draw(st.none() | st.just(counts[-1]) | st.floats(min_value=0, max_value=1e15))
    return Histogram(edges, counts, draw(sums), count)


@given(whole_histograms(), layouts)
def test_whole_counts_round_trip_exactly(histogram, layout):
    blob = encode(histogram, layout)
    assert blob[0] == codec.WHOLE and layout_of(blob) == layout
    assert decode(blob, histogram.bounds) == histogram


@given(fractional_histograms(), layouts)
def test_fractional_counts_round_trip_exactly(histogram, layout):
    blob = encode(histogram, layout)
    assert blob[0] == codec.FRACTIONAL and layout_of(blob) == layout
    assert decode(blob, histogram.bounds) == histogram


@given(bounds, st.data())
def test_falling_cumulative_counts_come_back_as_prometheus_reads_them(edges, data):
    # A scrape caught mid-update can show a higher bucket below a lower one: histogram_quantile
    # reads such counts as their running maximum, and that is what is kept.
    counts = tuple(data.draw(st.lists(st.integers(0, 10**6).map(float), min_size=len(edges), max_size=len(edges))))
    histogram = Histogram(edges, counts, data.draw(sums), data.draw(st.none() | st.just(counts[-1])))
    back = decode(encode(histogram, 3), edges)
    assert back.counts == tuple(accumulate(counts, max))
    assert (back.sum, back.count) == (histogram.sum, histogram.count)
    for q in (0.5, 0.95, 0.99):
        assert histogram_quantile(q, edges, back.counts) == histogram_quantile(q, edges, counts)


def test_missing_sum_and_count_stay_missing_and_zero_stays_zero():
    edges = (0.1, 1.0, math.inf)
    for total, count in [(None, None), (0.0, None), (None, 0.0), (0.0, 0.0), (-0.0, 5.0)]:
        histogram = Histogram(edges, (0.0, 0.0, 5.0 if count else 0.0), total, count)
        back = decode(encode(histogram, 1), edges)
        assert (back.sum, back.count) == (total, count)
        assert back.sum is None or math.copysign(1, back.sum) == math.copysign(1, total)


def test_a_latency_histogram_takes_a_few_bytes_per_bucket():
    # vLLM's TTFT layout (18 buckets + Inf) after a day of traffic: most buckets take one or two bytes.
    edges = (
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        math.inf,
    )
    counts = tuple(
        float(c)
        for c in accumulate([0, 0, 3, 80, 900, 4000, 9000, 12000, 30000, 8000, 900, 300, 120, 8, 1, 0, 0, 0, 0])
    )
    blob = encode(Histogram(edges, counts, 12345.678, counts[-1]), 7)
    assert len(blob) <= 1 + 1 + 3 + 8 + 2 * len(edges)


@given(st.one_of(whole_histograms(), fractional_histograms()), st.data())
@settings(max_examples=200)
def test_a_truncated_or_lengthened_blob_is_refused(histogram, data):
    blob = encode(histogram, 5)
    cut = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    with pytest.raises(CodecError):
        decode(blob[:cut], histogram.bounds)
    with pytest.raises(CodecError):
        decode(blob + data.draw(st.binary(min_size=1, max_size=9)), histogram.bounds)


@given(st.binary(max_size=200), finite_bounds)
def test_any_bytes_decode_to_a_histogram_or_a_codec_error(blob, edges):
    # A damaged file must never surface as IndexError, struct.error or OverflowError deep in a replay.
    try:
        back = decode(blob, tuple(edges) + (math.inf,))
    except CodecError:
        return
    assert len(back.counts) == len(edges) + 1


@pytest.mark.parametrize("blob", [b"", b"x", b"\x00\x01", b'{"counts": [1, 2]}'])
def test_foreign_bytes_are_not_a_stored_histogram(blob):
    with pytest.raises(CodecError, match="not a stored histogram"):
        decode(blob, (1.0, math.inf))
    with pytest.raises(CodecError):
        layout_of(blob)


def test_a_blob_read_against_a_shorter_layout_is_refused():
    blob = encode(Histogram((0.1, 1.0, math.inf), (1.0, 2.0, 3.0), 1.5, 3.0), 1)
    with pytest.raises(CodecError, match="longer than its layout"):
        decode(blob, (0.1, math.inf))
    with pytest.raises(CodecError):
        decode(blob, (0.1, 1.0, 2.0, math.inf))


@given(bounds)
def test_bucket_layouts_round_trip_as_text(edges):
    assert bounds_from_text(bounds_text(edges)) == edges


@pytest.mark.parametrize("text", ["0.1,fast,inf", "1,,2"])
def test_a_damaged_layout_is_refused(text):
    with pytest.raises(CodecError, match="not a list of numbers"):
        bounds_from_text(text)


@pytest.mark.parametrize(
    "blob",
    [
        b"v\x01" + b"\xff" * 200 + b"\x01" + b"\x00" * 8 + b"\x01",  # a count of 1400 bits
        b"v\x01\x01" + b"\x00" * 8 + b"\xff" * 200 + b"\x01",  # a bucket of 1400 bits
        b"d\x01\x00\x00",  # cut inside the fractional count
    ],
)
def test_numbers_no_float_can_hold_or_cut_doubles_are_refused(blob):
    with pytest.raises(CodecError, match="damaged"):
        decode(blob, (math.inf,))
