"""Small pieces of the console: minimal repaint spans, time-bucketed sparklines, literal labels, column fitting."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.geometry import Region

from console.tui.literal import fit, fit_middle, printable
from console.tui.widgets.diff_text import changed_regions
from console.tui.widgets.fleet_table import columns_for
from console.tui.widgets.sparkline import bucketed, spark
from console.tui.widgets.table_row import BADGE_WIDTH, WIDTHS


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
    [("[bold]x[/bold]", "[bold]x[/bold]"), ("a\x1b[2Jb", "a\\x1b[2Jb"), ("tab\there", "tab\\there"), ("ok name", "ok name")],
)
def test_label_values_become_printable_literals(raw, seen):
    assert printable(raw) == seen


def test_fitting_cells():
    assert fit("12345", 3) == "12…"
    assert fit("7", 3, right=True) == "  7"
    assert fit_middle("127.0.0.1:38779", 11) == "127.0…38779"


def test_columns_drop_the_least_important_first():
    wide = columns_for(200)
    assert len(wide) == len(WIDTHS)
    narrow = columns_for(80)
    assert BADGE_WIDTH + sum(WIDTHS[c] for c in narrow) <= 80
    for essential in ("name", "state", "rps", "wait", "kv", "ttft", "tpot"):
        assert essential in narrow
    assert "prefix" not in narrow and "ttft50" not in narrow
