"""Active flags, worst first: severity, since when, why (the figures) and what to do."""

from __future__ import annotations

import time

from rich.text import Text

from console.fleet import format as fmt
from console.tui.widgets.diff_text import DiffText
from console.fleet.flags import Flag, Pending
from console.tui.literal import printable
from console.tui.widgets.table_row import BADGES

TITLES = {
    "saturation": "saturated",
    "replica_down": "replica down",
    "replica_stale": "stale figures",
    "replica_restarted": "replica restarted",
    "latency_drift": "latency drift",
    "slo_breach_ttft": "SLO breach: TTFT",
    "slo_breach_tpot": "SLO breach: TPOT",
    "slo_breach_e2e": "SLO breach: end-to-end",
    "above_plan": "load over plan",
    "n_plus_1_at_risk": "N+1 at risk",
    "workload_drift_input": "workload drift: input",
    "workload_drift_output": "workload drift: output",
    "schedule_lag": "behind the schedule",
    "scale_up_due": "scale-up due",
    "source_error": "source unreachable",
}


def title(flag: Flag) -> str:
    return TITLES.get(flag.kind, flag.kind)


def _since(flag: Flag, now: float) -> tuple[str, str]:
    """(the clock time it began, how long ago)."""
    # Local time, as the replay header, the go-to box and `--from` read it: one clock on the bastion.
    return time.strftime("%H:%M:%S", time.localtime(flag.since)), fmt.age(now - flag.since)


class FlagsPanel(DiffText):
    WRAPS = True
    COMPONENT_CLASSES = {"flags-panel--critical", "flags-panel--warning", "flags-panel--info"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None

    def show(self, flags: tuple[Flag, ...], now: float, pending: tuple[Pending, ...] = ()) -> None:
        lines = tuple(_grouped(flags, now))
        waiting = tuple(pending_lines(pending, now))
        if (lines, waiting) == self._shown:
            return
        self._shown = (lines, waiting)
        # "Within its plan" only when no rule's condition holds at all, pending or shown.
        self.set_class(not flags and not pending, "-clear")
        text = Text()
        if not flags and not pending:
            text.append("✓ no flags: the fleet is within its plan", style="bold")
        # Headlines first, one line each, so a short terminal still shows every flag; then what is
        # pending (a condition that holds, inside its minimum duration); then the details.
        headlines = []
        for severity, name, subjects, since, why, todo in lines:
            style = self.get_component_rich_style(f"flags-panel--{severity}", partial=True) if self.is_mounted else ""
            headline = Text()
            headline.append(BADGES[severity], style=style)
            headline.append(f" {name}", style="bold")
            headline.append(f" · {printable(subjects)} · {since[1]}")
            headlines.append(headline)
        headlines += [Text(line) for line in waiting]
        text.append(Text("\n").join(headlines))
        for severity, name, subjects, since, why, todo in lines:
            text.append(f"\n\n{name}", style="bold")
            text.append(f" since {since[0]}")
            text.append(f"\n  why: {printable(why)}")
            text.append(f"\n  do:  {printable(todo)}")
        self.show_text(text)


def pending_lines(pending: tuple[Pending, ...], now: float):
    """One line per kind of condition that holds but is not a flag yet: how long it has held of how long it must."""
    kinds: dict[str, list[Pending]] = {}
    for item in pending:  # worst first, then oldest
        kinds.setdefault(item.kind, []).append(item)
    for group in kinds.values():
        oldest = min(group, key=lambda p: p.since)
        held = max(now - oldest.since, 0.0)
        subjects = printable(", ".join(p.subject for p in group))
        yield f"… pending: {title_of(oldest.kind)} · {subjects} ({held:.0f} s of {oldest.needed_seconds:.0f} s)"


def title_of(kind: str) -> str:
    return TITLES.get(kind, kind)


def _grouped(flags: tuple[Flag, ...], now: float):
    """One entry per kind of flag: four saturated replicas read as one line naming all four."""
    kinds: dict[str, list[Flag]] = {}
    for flag in flags:  # already worst first, then oldest
        kinds.setdefault(flag.kind, []).append(flag)
    for group in kinds.values():
        first = group[0]
        subjects = ", ".join(f.subject for f in group)
        why = first.why + (f" (and {len(group) - 1} more)" if len(group) > 1 else "")
        oldest = min(group, key=lambda f: f.since)
        yield (first.severity, title(first), subjects, _since(oldest, now), why, first.todo)
