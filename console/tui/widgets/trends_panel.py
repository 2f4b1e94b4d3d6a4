"""Trends over the last minutes: load under the planned capacity, queue, worst KV and p95 latencies."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.text import Text

from console.fleet import format as fmt
from console.fleet.trends import Trends
from console.tui.widgets.diff_text import DiffText
from console.tui.widgets.sparkline import bucketed, finite, spark

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from console.tui.widgets.options import WidgetOptions

LABEL_WIDTH = 8
VALUE_WIDTH = 12


def _last(values: tuple[float | None, ...]) -> float | None:
    return values[-1] if values else None


class TrendsPanel(DiffText):
    def __init__(self, **kwargs: Unpack[WidgetOptions]) -> None:
        super().__init__(**kwargs)
        self._trends: Trends | None = None
        self._shown: str | None = None

    def show(self, trends: Trends) -> None:
        self._trends = trends
        self._render_text()

    def on_resize(self) -> None:
        self._render_text()

    def _render_text(self) -> None:
        if self._trends is None:
            return
        width = max(self.content_size.width - LABEL_WIDTH - VALUE_WIDTH, 4)
        t = self._trends
        # The whole span across the width: one bar per slice of time, at least a second wide.
        bucket = max(t.span_seconds / width, 1.0)
        ats = tuple(p.at for p in t.points)

        def series(name: str) -> tuple[float | None, ...]:
            return bucketed(tuple(zip(ats, t.series(name))), width, bucket)

        load, capacity = series("load_rps"), series("capacity_rps")
        last_capacity = _last(t.series("capacity_rps"))
        known = [v for v in load + capacity if finite(v)]
        # A top that only grows in steps, so bars do not all rescale with every small change.
        top = _step_up(max(known)) if known else None
        lines = [
            ("load", spark(load, width, top), f"{fmt.rate(_last(t.series('load_rps')))}/{fmt.rate(last_capacity)}"),
            (
                "queue",
                spark(series("waiting"), width, _step_up(_max(series("waiting")))),
                fmt.count(_last(t.series("waiting"))),
            ),
            ("KV max", spark(series("kv_usage"), width, 1.0), fmt.share(_last(t.series("kv_usage")))),
            (
                "TTFT95",
                spark(series("ttft_p95_seconds"), width, _step_up(_max(series("ttft_p95_seconds")))),
                fmt.seconds(_last(t.series("ttft_p95_seconds"))),
            ),
            (
                "TPOT95",
                spark(series("tpot_p95_seconds"), width, _step_up(_max(series("tpot_p95_seconds")))),
                fmt.seconds(_last(t.series("tpot_p95_seconds"))),
            ),
        ]
        rendered = "\n".join(f"{label:<{LABEL_WIDTH}}{bars}{value:>{VALUE_WIDTH}}" for label, bars, value in lines)
        if rendered != self._shown:
            self._shown = rendered
            self.show_text(Text(rendered, no_wrap=True, overflow="crop"))


def _max(values: tuple[float | None, ...]) -> float | None:
    known = [v for v in values if finite(v)]
    return max(known) if known else None


def _step_up(value: float | None) -> float | None:
    """The next of 1, 2, 5 x 10^n at or above `value`: a scale that moves rarely.

    Never raises: a value that is not a finite number gives no scale (None), and one so large
    that no 1-2-5 step above it is a float is its own scale.
    """
    if not finite(value):
        return None
    if value <= 0:
        return value
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        try:
            top = float(step * 10**exponent)
        except OverflowError:
            return float(value)
        if top >= value:
            return top
    return float(value)
