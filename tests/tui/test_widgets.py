"""Small pieces of the console: minimal repaint spans, time-bucketed sparklines, literal labels, column fitting."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text
from textual.geometry import Region

from console.fleet import format as fmt
from console.fleet.trends import SERIES, TrendPoint, Trends
from console.text import printable
from console.tui.literal import fit, fit_middle
from console.tui.widgets.diff_text import changed_regions
from console.tui.widgets.fleet_table import columns_for
from console.tui.widgets.sparkline import bucketed, spark
from console.tui.widgets.table_row import BADGE_WIDTH, WIDTHS
from console.tui.widgets.trends_panel import TrendsPanel, _step_up


def test_only_the_changed_characters_are_dirty():
    before = Text("gpu-1   4.21  46%\ngpu-2   3.90  51%")
    after = Text("gpu-1   4.23  46%\ngpu-2   3.90  51%")
    assert changed_regions(before, after) == [Region(11, 0, 1, 1)]
    assert changed_regions(before, before.copy()) == []


def test_a_changed_style_or_line_count_repaints_everything():
    before = Text("✓ ok  gpu-1")
    before.stylize("green", 0, 4)
    after = Text("✓ ok  gpu-1")
    after.stylize("red", 0, 4)
    assert changed_regions(before, after) is None
    assert changed_regions(Text("a"), Text("a\nb")) is None
    assert changed_regions(None, Text("a")) is None


def test_sparkline_buckets_keep_the_worst_value_and_leave_gaps_blank():
    points = ((0.0, 1.0), (4.0, 3.0), (10.0, 2.0), (30.0, 8.0))
    assert bucketed(points, width=10, bucket_seconds=10.0) == (3.0, 2.0, None, 8.0)
    assert bucketed(points, width=2, bucket_seconds=10.0) == (None, 8.0)
    assert spark((0.0, None, 4.0, 8.0), width=4, top=8.0) == "▁ ▅█"
    assert spark((None, None), width=2) == "  "  # unknown is never drawn as 0


def test_sparkline_shifts_only_when_a_new_bucket_begins():
    first = bucketed(((0.0, 1.0), (10.0, 2.0), (11.0, 2.5)), width=5, bucket_seconds=10.0)
    same_bucket = bucketed(((0.0, 1.0), (10.0, 2.0), (11.0, 2.5), (12.0, 2.2)), width=5, bucket_seconds=10.0)
    assert first == same_bucket == (1.0, 2.5)


@pytest.mark.parametrize(
    "raw,seen",
    [
        ("[bold]x[/bold]", "[bold]x[/bold]"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("tab\there", "tab\\there"),
        ("ok name", "ok name"),
    ],
)
def test_label_values_become_printable_literals(raw, seen):
    assert printable(raw) == seen


def test_fitting_cells():
    assert fit("12345", 3) == "12…"
    assert fit("7", 3, right=True) == "  7"
    assert fit_middle("127.0.0.1:38779", 11) == "127.0…38779"


def test_columns_drop_the_least_important_first():
    gpu_columns = ("sm", "tensor", "dram", "fb")
    wide = columns_for(200, gpu=True)
    assert len(wide) == len(WIDTHS)
    assert not set(gpu_columns) & set(columns_for(200))  # a fleet without GPU pages has no GPU columns
    narrow = columns_for(80, gpu=True)
    assert BADGE_WIDTH + sum(WIDTHS[c] for c in narrow) <= 80
    for essential in ("name", "state", "rps", "wait", "kv", "ttft", "tpot"):
        assert essential in narrow
    assert "prefix" not in narrow and "ttft50" not in narrow
    assert not set(gpu_columns) & set(narrow)  # hidden on a narrow terminal by the same rule
    # At 120 cells the GPU's activity shows (the prefix and TTFT50 columns go first), memory used does not.
    middling = columns_for(120, gpu=True)
    assert {"sm", "tensor", "dram"} <= set(middling) and "fb" not in middling and "prefix" not in middling


# --- hostile numbers never bring the trends down (they are unknown long before; this is the last guard) ---

_HOSTILE = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308, 5e-324, 0.0])
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True), _HOSTILE), max_size=30),
    st.integers(-2, 60),
    st.floats(allow_nan=True, allow_infinity=True),
    _HOSTILE,
)
def test_sparklines_never_raise_and_draw_only_finite_values(points, width, bucket_seconds, top):
    values = bucketed(tuple(points), width, bucket_seconds)
    assert all(v is None or math.isfinite(v) for v in values)
    line = spark(tuple(v for _, v in points), width, top)
    assert len(line) == max(width, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[_HOSTILE] * 5), min_size=1, max_size=20))
def test_the_trends_panel_never_raises_on_hostile_values(rows):
    trends = Trends()
    for i, (load, capacity, waiting, kv, ttft) in enumerate(rows):
        trends = trends.add(
            TrendPoint(
                at=1000.0 + i,
                load_rps=load,
                capacity_rps=capacity,
                waiting=waiting,
                kv_usage=kv,
                ttft_p95_seconds=ttft,
                tpot_p95_seconds=ttft,
            )
        )
    for point in trends.points:
        for name in SERIES:
            value = getattr(point, name)
            assert value is None or math.isfinite(value)
    panel = TrendsPanel()
    panel.show(trends)
    assert panel._shown is not None and "inf" not in panel._shown and "nan" not in panel._shown


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, None])
def test_the_axis_step_of_a_value_that_is_not_finite_is_no_axis(value):
    assert _step_up(value) is None


def test_the_axis_step_of_huge_values_is_a_float():
    assert _step_up(1e308) == 1e308 and _step_up(1.7e308) == 1.7e308 and _step_up(3.0) == 5


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_numbers_that_are_not_finite_are_shown_as_unknown(value):
    assert fmt.compact(value) == fmt.count(value) == fmt.share(value) == fmt.UNKNOWN
    assert fmt.age(value) == fmt.UNKNOWN_AGE


def test_huge_numbers_stay_short():
    assert fmt.compact(9.05e12) == "9.1T" and fmt.compact(2.5e9) == "2.5G" and len(fmt.compact(1e300)) <= 8
    assert fmt.count(1e20) == fmt.compact(1e20)


@given(st.text())
def test_any_text_comes_out_printable_and_spaces_stay(raw):
    shown = printable(raw)
    assert shown.isprintable()
    assert shown.count(" ") >= raw.count(" ")  # spaces stay spaces
    assert "\x1b" not in shown and "\n" not in shown
