"""What `capcon watch --once` prints: the fleet table and flag lines, or one JSON object."""

from __future__ import annotations

import shutil
import sys
import time

from console.ahead.accuracy import ForecastAccuracy
from console.ahead.words import accuracy_legend, forecast_line
from console.fleet import format as fmt
from console.fleet import slo
from console.fleet.client import client_line
from console.fleet.columns import ONCE_COLUMNS, Column, InOnce
from console.fleet.flags import flag_title
from console.fleet.gpu_view import FleetGpu
from console.fleet.gpus import ReplicaGpu
from console.fleet.view import FleetView
from console.fleet.view_json import fleet_view_json
from console.metrics.figures import ANSWERING, FLEET_TOTAL, Figures, FleetFigures
from console.store import json_out
from console.text import PIECE_CHARACTERS, bounded_line, printable
from console.when import iso_when

BADGES = {"critical": "✖ CRIT", "warning": "▲ WARN", "info": "● info"}  # as the console shows them


def any_answered(figures: FleetFigures) -> bool:
    return any(r.state in ANSWERING for r in figures.replicas) or (
        not figures.replicas and figures.fleet.state in ANSWERING
    )


def once_json(
    figures: FleetFigures,
    view: FleetView | None = None,
    plan_file: str | None = None,
    accuracy: ForecastAccuracy | None = None,
) -> dict:
    """The `--once --json` object: the fleet view's JSON form (console.fleet.view_json), times in the local zone;
    `accuracy` the forecast's backtest error on the history file (console.ahead.accuracy), None without one."""
    return fleet_view_json(figures, view, plan_file, iso_when, accuracy)


def _dumps(document: dict) -> str:
    """Strict JSON, by the one rule the history's JSON follows too (no NaN or Infinity; odd text escaped)."""
    return json_out.dumps(document, indent=2)


def once_lines(
    figures: FleetFigures,
    view: FleetView | None,
    with_plan: bool,
    width: int | None = None,
    accuracy: ForecastAccuracy | None = None,
) -> list[str]:
    """The --once text: the table and the flag lines; one line when the source itself failed
    (Prometheus down, refusing, or answering nonsense): the table would be empty and every
    flag would repeat that line."""
    if figures.source_error and not figures.replicas:
        return [printable(f"capcon watch · source {figures.source} · {figures.source_error}")]
    gpu = view.gpu if view is not None else None
    return [
        render_table(figures, width, gpu),
        *gpu_lines(view),
        *client_lines(view),
        *slo_lines(view),
        *forecast_lines(view, accuracy),
        *flag_lines(view, with_plan),
    ]


def gpu_lines(view: FleetView | None) -> list[str]:
    """The fleet's GPU pages in a line under the table (what was read and paired, a page that failed), and why
    a replica's GPU figures are unknown; none without GPU pages."""
    if view is None or view.gpu is None:
        return []
    gpu, rows = view.gpu, view.figures.replicas
    paired = [r.name for r in rows if (g := gpu.replica(r.name)) is not None and g.gpus]
    line = (
        f"GPU: {gpu.pages} dcgm-exporter page{'s' if gpu.pages != 1 else ''}, {gpu.fleet.gpus} GPUs paired with "
        f"{len(paired)} of {len(rows)} replicas"
    )
    if gpu.errors:
        more = f" (and {len(gpu.errors) - 1} more)" if len(gpu.errors) > 1 else ""
        line += f"; not read: {gpu.errors[0]}{more}"
    lines = [bounded_line(printable(line), PIECE_CHARACTERS)]
    unpaired = [(r.name, g.how) for r in rows if (g := gpu.replica(r.name)) is not None and not g.gpus]
    if unpaired and len(gpu.errors) < gpu.pages:  # when no page was read, the line above said why
        name, how = unpaired[0]
        more = f" (and {len(unpaired) - 1} more)" if len(unpaired) > 1 else ""
        lines.append(bounded_line(printable(f"GPU unknown on {name}: {how}{more}"), PIECE_CHARACTERS))
    return lines


def client_lines(view: FleetView | None) -> list[str]:
    """What the clients saw through the fleet's gateways, one line under the table; none without a gateway."""
    line = client_line(view.gateway, view.figures.fleet) if view is not None else None
    return [printable(line)] if line else []


def slo_lines(view: FleetView | None) -> list[str]:
    """Each latency target of the plan as the buckets judge it, one line each: the p95 (its bucket where wide),
    the share of requests within the target, and why a target inside a bucket cannot be judged; none for a
    target with nothing to judge yet (no request in the window)."""
    if view is None:
        return []
    return [printable(slo.line(check)) for check in view.slo_checks if check.verdict is not None]


def forecast_lines(view: FleetView | None, accuracy: ForecastAccuracy | None = None) -> list[str]:
    """The arrivals ahead, one line under the table; only with a plan (without one there is no capacity to pass,
    and the two samples of a --once run make no trend worth a line). With a history file (`accuracy`), each
    horizon's past error and a second line saying what the ± is."""
    if view is None or view.plan is None or view.forecast is None:
        return []
    legend = accuracy_legend(accuracy)
    return [forecast_line(view.forecast, accuracy), *([legend] if legend else [])]


def flag_lines(view: FleetView | None, with_plan: bool) -> list[str]:
    """The flags under the --once table, one line each: raised ones, then the pending ones.

    With a plan an empty list is said too ("none"), so a reader knows flags were judged.
    """
    if view is None or (not view.flags and not view.pending):
        return ["flags: none active or pending"] if with_plan else []
    lines = [f"flags: {len(view.flags)} active, {len(view.pending)} pending"]
    for f in view.flags:
        since = time.strftime("%H:%M:%S", time.localtime(f.since))
        # The console's words for the kind (flag_title); --json keeps the kind as its key.
        lines.append(printable(f"{BADGES[f.severity]} {flag_title(f.kind)} · {f.subject} · since {since} · {f.why}"))
    for p in view.pending:
        held = max(view.now - p.since, 0.0)
        lines.append(
            printable(
                f"… pending {BADGES[p.severity]} {flag_title(p.kind)} · {p.subject} · "
                f"{held:.0f} s of {p.needed_seconds:.0f} s · {p.why}"
            )
        )
    return lines


def _terminal_width() -> int | None:
    """The terminal's width when printing to one; None (every column) for a pipe or a file."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _cell(column: Column, figures: Figures, gpu: ReplicaGpu | None = None) -> str:
    shown = column.show(figures, gpu)
    return printable(shown) if column.unit == "text" else shown  # a Prometheus instance label: anyone's text


def _once(column: Column) -> InOnce:
    assert column.once is not None, "ONCE_COLUMNS holds the columns --once shows"
    return column.once


def render_table(figures: FleetFigures, width: int | None = None, gpu: FleetGpu | None = None) -> str:
    """The fleet table: one row per replica, then the fleet total, then the reasons for odd states.

    With `width` (a terminal's), the least urgent columns are left out until the table fits. With `gpu` (the
    fleet's GPU pages were read) the GPU columns show each replica's counters and the fleet's means.
    """
    columns = [c for c in ONCE_COLUMNS if gpu is not None or not c.is_gpu]
    replica_gpu = [gpu.replica(r.name) if gpu is not None else None for r in figures.replicas]
    fleet_gpu = gpu.fleet if gpu is not None else None
    while True:
        rows = [[_cell(c, r, g) for c in columns] for r, g in zip(figures.replicas, replica_gpu)]
        total = [_cell(c, figures.fleet, fleet_gpu) for c in columns]
        header = [_once(c).heading for c in columns]
        widths = [max(len(row[i]) for row in [header, total, *rows]) for i in range(len(header))]
        droppable = sorted((c for c in columns if _once(c).drop is not None), key=lambda c: _once(c).drop or 0)
        if width is None or sum(widths) + 2 * (len(widths) - 1) <= width or not droppable:
            break
        columns.remove(droppable[0])

    def line(row: list[str]) -> str:
        return "  ".join(
            text.ljust(width) if column.is_text else text.rjust(width)
            for text, width, column in zip(row, widths, columns)
        ).rstrip()

    out = [f"capcon watch · source {figures.source} · window {fmt.window(figures.window_seconds)}", line(header)]
    out += [line(row) for row in rows]
    out.append(line(["-" * w for w in widths]))
    out.append(line(total))
    notes = [f"{r.name}: {r.error}" for r in figures.replicas if r.error]
    if figures.fleet.error:
        notes.append(f"{FLEET_TOTAL}: {figures.fleet.error}")
    if figures.source_error:
        notes.append(f"source: {figures.source_error}")
    return "\n".join(out + [bounded_line(note, PIECE_CHARACTERS) for note in notes])
