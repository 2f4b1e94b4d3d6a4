"""Every figure of one replica, updated as polls arrive."""

from __future__ import annotations

from dataclasses import fields

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from console.fleet import format as fmt
from console.fleet import slo
from console.fleet.plan_now import PlanNow
from console.live.session import FleetSession
from console.metrics.figures import Figures
from console.text import printable
from console.tui.screens.base import ConsoleScreen, console_app
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.scroll import ConsoleScroll

SECONDS = {
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "ttft_p99_seconds",
    "itl_p95_seconds",
    "tpot_p95_seconds",
    "e2e_p95_seconds",
    "queue_p95_seconds",
}
SHARES = {"kv_usage", "prefix_hit_share"}


def figure_lines(figures: Figures) -> list[tuple[str, str]]:
    lines = []
    for item in fields(figures):
        value = getattr(figures, item.name)
        # The unit is in the value ("230ms", "12s"): "ttft p95", not "ttft p95 seconds".
        label = item.name.removesuffix("_seconds").replace("_", " ")
        if item.name == "latency_buckets":
            # What the p95s above can say: each lies in its bucket, interpolated inside it.
            label, shown = "p95 buckets", slo.p95_buckets_words(figures) or fmt.UNKNOWN
        elif item.name == "data_age_seconds":
            shown = fmt.age(value)
        elif item.name in SECONDS:
            shown = fmt.seconds(value)
        elif item.name in SHARES:
            shown = fmt.share(value)
        elif item.name == "state":
            shown = fmt.state(value)
        elif isinstance(value, dict):
            shown = ", ".join(f"{printable(k)}: {fmt.compact(v)}" for k, v in sorted(value.items())) or fmt.UNKNOWN
        elif isinstance(value, float) or value is None:
            shown = fmt.compact(value)
        else:
            shown = printable(value) or fmt.UNKNOWN
        lines.append((label, shown))
    return lines


BAR_WIDTH = 30


def latency_bars(figures: Figures, plan: PlanNow | None) -> list[tuple[str, str, str]]:
    """(label, bar, value and target) for the latency percentiles, on one scale so they compare at a glance."""
    rows = [
        ("TTFT p50", figures.ttft_p50_seconds, None),
        ("TTFT p95", figures.ttft_p95_seconds, plan.ttft_p95_target_seconds if plan else None),
        ("TTFT p99", figures.ttft_p99_seconds, None),
        ("TPOT p95", figures.tpot_p95_seconds, plan.tpot_p95_target_seconds if plan else None),
        ("ITL p95", figures.itl_p95_seconds, None),
        ("queue p95", figures.queue_p95_seconds, None),
        ("E2E p95", figures.e2e_p95_seconds, plan.e2e_p95_target_seconds if plan else None),
    ]
    top = max([v for _, v, _ in rows if v is not None] + [t for _, _, t in rows if t is not None], default=0.0)
    out = []
    for label, value, target in rows:
        if value is None or top <= 0:
            bar = " " * BAR_WIDTH  # unknown: no bar at all, not an empty one
        else:
            bar = ("█" * max(1, round(value / top * BAR_WIDTH))).ljust(BAR_WIDTH)
        note = fmt.seconds(value) + (f"  (target {fmt.seconds(target)})" if target is not None else "")
        out.append((label, bar, note))
    return out


class ReplicaScreen(ConsoleScreen):
    BINDINGS = [Binding("escape", "app.pop_screen", "back", id="back")]

    def __init__(self, session: FleetSession, key: str) -> None:
        super().__init__()
        self.session = session
        self.index = session.index
        self.key = key

    def chosen_replica(self) -> str | None:
        return self.key  # the replica shown

    def compose(self) -> ComposeResult:
        yield ConsoleHeader()
        with ConsoleScroll():
            yield Static(id="figures")
        yield Footer()

    def draw(self) -> None:
        self.query_one(ConsoleHeader).show(console_app(self).header_info(self.session))
        view = self.session.view
        row = view.row(self.key) if view else None
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"replica {printable(self.key)}\n", style="bold")
        if view is None or row is None:
            text.append("this replica is no longer in the figures")
        else:
            flags = [f for f in view.flags if f.subject == self.key]
            text.append("latency percentiles over the window\n", style="bold")
            for label, bar, note in latency_bars(row.figures, view.plan):
                text.append(f"{label:<10}{bar} {note}\n")
            text.append("\nevery figure\n", style="bold")
            for label, shown in figure_lines(row.figures):
                text.append(f"{label:<34}{shown}\n")
            for flag in flags:
                text.append(f"flag {flag.kind}: {printable(flag.why)}\n", style="bold")
        self.query_one("#figures", Static).update(text)
