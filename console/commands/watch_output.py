"""What `capcon watch --once` prints: the fleet table and flag lines, or one JSON object."""

from __future__ import annotations

import math
import shutil
import sys
import time

from console.fleet import format as fmt
from console.metrics.figures import Figures, FleetFigures
from console.plan.model import DAYS
from console.store import json_out
from console.store.when import iso_when
from console.tui.literal import printable  # the console's rule: control characters shown as escapes

JSON_FIELDS = (
    "name",
    "url",
    "state",
    "requests_per_second",
    "prompt_tokens_per_second",
    "generation_tokens_per_second",
    "running",
    "waiting",
    "kv_usage",
    "preemptions_per_second",
    "prefix_hit_share",
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "ttft_p99_seconds",
    "itl_p95_seconds",
    "tpot_p95_seconds",
    "e2e_p95_seconds",
    "queue_p95_seconds",
    "mean_input_tokens",
    "mean_output_tokens",
)
ANSWERED = ("up", "restarted", "stale")
BADGES = {"critical": "✖ CRIT", "warning": "▲ WARN", "info": "● info"}  # as the console shows them


def any_answered(figures: FleetFigures) -> bool:
    return any(r.state in ANSWERED for r in figures.replicas) or (not figures.replicas and figures.fleet.state in ANSWERED)


def _figure_json(figures: Figures) -> dict:
    out = {}
    for key in JSON_FIELDS:
        value = getattr(figures, key)
        out[key] = None if isinstance(value, float) and not math.isfinite(value) else value
    out["kv_usage_by_engine"] = dict(figures.kv_usage_by_engine)
    out["kv_capacity_tokens"] = figures.kv_capacity_tokens
    out["kv_capacity_tokens_by_engine"] = dict(figures.kv_capacity_tokens_by_engine)
    out["requests_per_second_by_reason"] = dict(figures.requests_per_second_by_reason)
    out["rejections_per_second"] = figures.rejections_per_second
    out["data_age_seconds"] = figures.data_age_seconds
    out["error"] = figures.error or None
    return out


def once_json(figures: FleetFigures, view=None, plan_file: str | None = None) -> dict:
    """The `--once --json` object: the figures, the plan beside them and the flags; unknown as null.

    `view` (a FleetView of the last poll) gives the comparisons and flags; without one (a caller
    with figures only) they are empty. Keys are the same with or without a plan.
    """
    plan = view.plan if view is not None else None
    return {
        "plan": plan.plan_name if plan is not None else None,
        "plan_file": plan_file if plan is not None else None,
        "plan_at": {"weekday": DAYS[plan.weekday], "hour": plan.hour} if plan is not None else None,
        "window_seconds": figures.window_seconds,
        "source": figures.source,
        "at": figures.at,
        "source_error": figures.source_error or None,
        "replicas": [_figure_json(r) for r in figures.replicas],
        "fleet": _figure_json(figures.fleet),
        "comparisons": [_comparison_json(c) for c in view.comparisons] if view is not None else [],
        "flags": _flags_json(view),
    }


def _comparison_json(c) -> dict:
    return {"label": c.label, "planned": c.planned, "actual": c.actual, "unit": c.unit, "status": c.status, "note": c.note or None}


def _flags_json(view) -> dict:
    """Raised flags, and the conditions that hold but have not lasted their minimum duration yet."""
    if view is None:
        return {"active": [], "pending": []}
    todo = {flag_id: tracker.todo for flag_id, tracker in view.flag_state.trackers.items()}
    active = [
        {"kind": f.kind, "subject": f.subject, "severity": f.severity, "since": f.since, "since_time": iso_when(f.since),
         "why": f.why, "todo": f.todo}
        for f in view.flags
    ]
    pending = [
        {"kind": p.kind, "subject": p.subject, "severity": p.severity, "since": p.since, "since_time": iso_when(p.since),
         "held_seconds": round(max(view.now - p.since, 0.0), 3), "needed_seconds": p.needed_seconds,
         "why": p.why, "todo": todo.get(p.id)}
        for p in view.pending
    ]
    return {"active": active, "pending": pending}


def _dumps(document: dict) -> str:
    """Strict JSON, by the one rule the history's JSON follows too (no NaN or Infinity; odd text escaped)."""
    return json_out.dumps(document, indent=2)


def once_lines(figures: FleetFigures, view, with_plan: bool, width: int | None = None) -> list[str]:
    """The --once text: the table and the flag lines; one line when the source itself failed
    (Prometheus down, refusing, or answering nonsense): the table would be empty and every
    flag would repeat that line."""
    if figures.source_error and not figures.replicas:
        return [printable(f"capcon watch · source {figures.source} · {figures.source_error}")]
    return [render_table(figures, width), *flag_lines(view, with_plan)]


def flag_lines(view, with_plan: bool) -> list[str]:
    """The flags under the --once table, one line each: raised ones, then the pending ones.

    With a plan an empty list is said too ("none"), so a reader knows flags were judged.
    """
    if view is None or (not view.flags and not view.pending):
        return ["flags: none active or pending"] if with_plan else []
    lines = [f"flags: {len(view.flags)} active, {len(view.pending)} pending"]
    for f in view.flags:
        since = time.strftime("%H:%M:%S", time.localtime(f.since))
        lines.append(printable(f"{BADGES[f.severity]} {f.kind} · {f.subject} · since {since} · {f.why}"))
    for p in view.pending:
        held = max(view.now - p.since, 0.0)
        lines.append(printable(f"… pending {BADGES[p.severity]} {p.kind} · {p.subject} · {held:.0f} s of {p.needed_seconds:.0f} s · {p.why}"))
    return lines


COLUMNS = (
    ("NAME", lambda f: printable(f.name)),  # a Prometheus instance label: anyone's text
    ("STATE", lambda f: fmt.state(f.state)),
    ("REQ/S", lambda f: fmt.rate(f.requests_per_second)),
    ("IN TOK/S", lambda f: fmt.rate(f.prompt_tokens_per_second)),
    ("OUT TOK/S", lambda f: fmt.rate(f.generation_tokens_per_second)),
    ("RUN", lambda f: fmt.count(f.running)),
    ("WAIT", lambda f: fmt.count(f.waiting)),
    ("KV", lambda f: fmt.share(f.kv_usage)),
    ("PREEMPT/S", lambda f: fmt.rate(f.preemptions_per_second)),
    ("HIT", lambda f: fmt.share(f.prefix_hit_share)),
    ("TTFT50", lambda f: fmt.seconds(f.ttft_p50_seconds)),
    ("TTFT95", lambda f: fmt.seconds(f.ttft_p95_seconds)),
    ("TTFT99", lambda f: fmt.seconds(f.ttft_p99_seconds)),
    ("ITL95", lambda f: fmt.seconds(f.itl_p95_seconds)),
    ("TPOT95", lambda f: fmt.seconds(f.tpot_p95_seconds)),
    ("E2E95", lambda f: fmt.seconds(f.e2e_p95_seconds)),
    ("QUEUE95", lambda f: fmt.seconds(f.queue_p95_seconds)),
    ("IN/REQ", lambda f: fmt.tokens(f.mean_input_tokens)),
    ("OUT/REQ", lambda f: fmt.tokens(f.mean_output_tokens)),
    ("AGE", lambda f: fmt.age(f.data_age_seconds)),
)


# Columns given up first when the table is wider than the terminal (as the console does): the
# least urgent figures during a peak go before state, load, queue, KV and latency.
DROP_ORDER = ("TTFT99", "AGE", "IN/REQ", "OUT/REQ", "HIT", "ITL95", "TTFT50", "IN TOK/S", "QUEUE95", "E2E95", "PREEMPT/S", "RUN")


def _terminal_width() -> int | None:
    """The terminal's width when printing to one; None (every column) for a pipe or a file."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def render_table(figures: FleetFigures, width: int | None = None) -> str:
    """The fleet table: one row per replica, then the fleet total, then the reasons for odd states.

    With `width` (a terminal's), the least urgent columns are left out until the table fits.
    """
    columns = list(COLUMNS)
    while True:
        rows = [[cell(r) for _, cell in columns] for r in figures.replicas]
        total = [cell(figures.fleet) for _, cell in columns]
        header = [title for title, _ in columns]
        widths = [max(len(row[i]) for row in [header, total, *rows]) for i in range(len(header))]
        droppable = [title for title in DROP_ORDER if title in header]
        if width is None or sum(widths) + 2 * (len(widths) - 1) <= width or not droppable:
            break
        columns = [column for column in columns if column[0] != droppable[0]]

    def line(row: list[str]) -> str:
        return "  ".join(text.ljust(width) if i < 2 else text.rjust(width) for i, (text, width) in enumerate(zip(row, widths))).rstrip()

    out = [f"capcon watch · source {figures.source} · window {fmt.window(figures.window_seconds)}", line(header)]
    out += [line(row) for row in rows]
    out.append(line(["-" * w for w in widths]))
    out.append(line(total))
    notes = [f"{r.name}: {r.error}" for r in figures.replicas if r.error]
    if figures.fleet.error:
        notes.append(f"fleet: {figures.fleet.error}")
    if figures.source_error:
        notes.append(f"source: {figures.source_error}")
    return "\n".join(out + [printable(note) for note in notes])
