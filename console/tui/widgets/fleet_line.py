"""One fleet on the overview screen: load against capacity, headroom, worst flag, replicas against the schedule."""

from __future__ import annotations

from rich.text import Text

from console.fleet import format as fmt
from console.fleet.format import short_names
from console.fleet.view import FleetView
from console.text import printable
from console.tui.literal import fit
from console.tui.widgets.diff_text import DiffText
from console.tui.widgets.flags_panel import title, title_of
from console.tui.widgets.table_row import BADGES

NAME_MIN = 17  # the fleet column at its narrowest (80 columns)
FIGURES_WIDTH = 15 + 10 + 10  # load/sched cap, headroom, up/sched
# Cells the worst flag keeps before a fleet's name may widen: "load over plan (8) +2 pending".
FLAG_ROOM = 30


def overview_header(name_width: int = NAME_MIN) -> str:
    return f"{'':7}{'fleet':<{name_width + 1}}{'load/sched cap':>15}{'headroom':>10}{'up/sched':>10}  worst flag"


HEADER = overview_header()


def overview_names(names: list[str], width: int) -> tuple[int, dict[str, str]]:
    """The fleet column's width in `width` cells, and each fleet's name as shown in it.

    The column is as wide as the longest name while the worst flag keeps FLAG_ROOM; names longer than
    that lose their common parts first and keep the end that tells them apart (format.short_names).
    """
    shown = [printable(n) for n in names]
    room = width - 7 - 1 - FIGURES_WIDTH - 2 - FLAG_ROOM
    name_width = max(NAME_MIN, min(max((len(n) for n in shown), default=0), room))
    short = short_names(shown, name_width)
    return name_width, {name: short[label] for name, label in zip(names, shown)}


class FleetLine(DiffText):
    COMPONENT_CLASSES = {
        "fleet-line--critical",
        "fleet-line--warning",
        "fleet-line--info",
        "fleet-line--pending",
        "fleet-line--over",
        "fleet-line--ok",
        "fleet-line--unknown",
    }

    def __init__(self, index: int, name: str) -> None:
        super().__init__()
        self.index = index
        self.fleet_name = name
        self._shown: tuple | None = None

    def show(
        self, view: FleetView | None, selected: bool, label: str | None = None, name_width: int = NAME_MIN
    ) -> None:
        """`label`: the fleet's name as the overview fits it (overview_names); else its name, cut at the end."""
        self.set_class(selected, "-selected")
        if view is None:
            cells = ("unknown", fmt.UNKNOWN, fmt.UNKNOWN, fmt.UNKNOWN, "waiting for the first poll")
        else:
            plan = view.plan
            load = fmt.rate(view.figures.fleet.requests_per_second)
            capacity = fmt.rate(plan.planned_capacity_rps) if plan else fmt.UNKNOWN
            if plan is not None and plan.capacity_estimated:
                capacity = "~" + capacity  # on an estimated capacity per replica
            scheduled = str(plan.replicas_scheduled) if plan else fmt.UNKNOWN
            worst = view.flags[0] if view.flags else None
            pending = view.pending
            over = bool(view.total.over) or any(r.over for r in view.rows)
            if worst is not None:
                flag = f"{title(worst)} ({len(view.flags)})" + (f" +{len(pending)} pending" if pending else "")
            elif pending:
                # A condition holds but not yet for its minimum duration: never "ok", never "none".
                flag = f"… pending: {title_of(pending[0].kind)}" + (
                    f" (+{len(pending) - 1})" if len(pending) > 1 else ""
                )
            elif over:
                flag = "none yet: cells over a limit now"
            else:
                flag = "none"
            cells = (
                worst.severity if worst else "pending" if pending else "over" if over else "ok",
                f"{load}/{capacity}",
                fmt.share(view.headroom),
                f"{view.replicas_serving}/{scheduled}",
                flag,
            )
        name = fit(label if label is not None else printable(self.fleet_name), name_width)
        line = (*cells, name)
        if line == self._shown:
            return
        self._shown = line
        severity, load, headroom, replicas, flag, name = line
        style = self.get_component_rich_style(f"fleet-line--{severity}", partial=True) if self.is_mounted else ""
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(fit(BADGES[severity], 7), style=style)
        text.append(f"{name} {load:>15}{headroom:>10}{replicas:>10}  {flag}")
        self.show_text(text)
