"""One fleet on the overview screen: load against capacity, headroom, worst flag, replicas against the schedule."""

from __future__ import annotations

from rich.text import Text

from console.fleet import format as fmt
from console.fleet.view import FleetView
from console.text import printable
from console.tui.literal import fit
from console.tui.widgets.diff_text import DiffText
from console.tui.widgets.flags_panel import title, title_of
from console.tui.widgets.table_row import BADGES

HEADER = f"{'':7}{'fleet':<18}{'load/sched cap':>15}{'headroom':>10}{'up/sched':>10}  worst flag"


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

    def __init__(self, index: int, name: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.index = index
        self.fleet_name = name
        self._shown: tuple | None = None

    def show(self, view: FleetView | None, selected: bool) -> None:
        self.set_class(selected, "-selected")
        if view is None:
            line = ("unknown", fmt.UNKNOWN, fmt.UNKNOWN, fmt.UNKNOWN, "waiting for the first poll")
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
            line = (
                worst.severity if worst else "pending" if pending else "over" if over else "ok",
                f"{load}/{capacity}",
                fmt.share(view.headroom),
                f"{view.replicas_serving}/{scheduled}",
                flag,
            )
        if line == self._shown:
            return
        self._shown = line
        severity, load, headroom, replicas, flag = line
        style = self.get_component_rich_style(f"fleet-line--{severity}", partial=True) if self.is_mounted else ""
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(fit(BADGES[severity], 7), style=style)
        text.append(f"{fit(printable(self.fleet_name), 17)} {load:>15}{headroom:>10}{replicas:>10}  {flag}")
        self.show_text(text)
