"""`capcon history`: recorded hours and days of a fleet, and a recorded week against the plan."""

from __future__ import annotations

import argparse
import math
import sys
import time
from bisect import bisect_right
from collections.abc import Sequence
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from zoneinfo import ZoneInfo

from console.args import SubParsers
from console.commands.history_import import add_import_options, check_not_import, run_import
from console.errors import UserError
from console.fleet import format as fmt
from console.fleet.hourly import (
    BUSY_WINDOW_SECONDS,
    MINUTE,
    PlanHour,
    Summary,
    combine,
    day_starts,
    hour_starts,
    plan_hour,
    plan_hour_at_clock,
    summarise,
    with_plan,
)
from console.plan.model import DAYS, Plan
from console.store import json_out
from console.store.paths import default_history_path
from console.when import format_when, iso_when, local_zone, parse_when, zone_named

if TYPE_CHECKING:
    from console.fleet.week_fit import WeekFit
    from console.overflow.tally import DayModes
    from console.store.database import Store

# SQLite, the plan reader and the estimate are imported by the steps that read them, so that
# `capcon history --help` starts without them.

LEAD_IN_SECONDS = BUSY_WINDOW_SECONDS + MINUTE  # the first window of an hour reaches back five minutes
# A longer range is tabulated only where something was recorded: an hour grid to the year 2200 is not built.
LONGEST_TABULATED_SECONDS = 366 * 86400.0

DESCRIPTION = """\
Summarise a recorded fleet per hour or per day: the busiest five-minute request rate,
p95 TTFT and TPOT, peak KV usage, preemptions, flags raised, and load against the
capacity the plan schedules for that hour (the plan recorded with the polls, read at
the plan clock they recorded: a `demo --db` week is read at its simulated hours).
Hours without data are shown as unknown (–), never as 0. An hour or day the recording
covers only in part (it started, stopped or broke off inside it, or the range cuts it)
is marked `partial`: its figures are for the part recorded, from the first poll on.
Without --to the range ends at the last recorded poll (included); typed times are read
against the real now.

With --plan FILE, compare the recorded week with that plan instead: each hour of the
week (Monday first, on the plan's clock) observed against the plan's total rps
(interactive plus deferrable arrivals) and token means, then a `workloads:` section
with the suggested profile to paste over the plan's (deferrable arrivals taken out).
"""

EPILOG = """\
times (--from, --to): 2026-11-30 14:00 (local), 2026-11-30T13:00Z, 14:00 (today), -2h, -3d, now, unix seconds.

examples:
  capcon history --by day                       the last 7 days, a line a day
  capcon history --from -6h --fleet chat        the last 6 hours of fleet chat, a line an hour
  capcon history --plan plans/chat.yaml         the last 7 days against the plan, with a suggested profile
  capcon history --by day --json                for scripts
  capcon history --backtest --plan plans/chat.yaml   how wrong the forecast has been on this fleet
  capcon history import --prometheus http://prometheus:9090 --selector 'job="vllm"' --from -7d --to now
                                                fill the history file from Prometheus

a damaged history file (the error says so) is copied, as far as it can be read, with
  capcon history --db FILE --salvage NEW     then use --db NEW

exit status: 0 shown (also "no samples from A to B", or nothing recorded yet; --salvage: copied);
2 bad input: a time, a zone, a plan, an unknown fleet or a missing, unreadable or damaged history file.
"""


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "history",
        help="recorded hours and days: busiest rps, p95s, KV, flags, load; --plan: a week against the plan",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    add_history_options(parser)
    parser.add_argument(
        "--from",
        dest="start",
        metavar="WHEN",
        help="start (default: 24 hours before the end; 7 days with --by day or --plan)",
    )
    parser.add_argument("--to", dest="end", metavar="WHEN", help="end (default: the last recorded poll, included)")
    parser.add_argument("--by", choices=("hour", "day"), default=None, help="a line per hour (default) or per day")
    parser.add_argument(
        "--plan",
        metavar="FILE",
        help="compare the recorded week with this plan (with --by: summarise against its capacity)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument(
        "--tz", metavar="ZONE", help="the clock hours and days are cut on (default: the plan's time zone, else local)"
    )
    parser.add_argument(
        "--backtest",
        action="store_true",
        help="how wrong the forecast has been: its error at 5, 15 and 30 minutes beside the naive forecast and the plan's profile",
    )
    parser.add_argument(
        "--salvage",
        metavar="NEW",
        help="copy what can still be read of a damaged history file into the new file NEW, then exit",
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=("import",),
        help="import: fill the history file from Prometheus' range queries (--prometheus, --selector, --from, --to)",
    )
    add_import_options(parser)
    parser.set_defaults(run=run)
    return parser


# --- shared with `capcon export` ---------------------------------------------


def add_history_options(parser: argparse.ArgumentParser) -> None:
    # `--from -2h` reaches the option as a value: console.cli.joined_values writes it `--from=-2h`.
    parser.add_argument(
        "--db", metavar="PATH", help="the history file (default: history.sqlite in the user's data directory)"
    )
    parser.add_argument("--fleet", metavar="NAME", help="one fleet (default: every recorded fleet)")


def default_db_path() -> Path:
    return default_history_path()


def open_history(db: str | None) -> Store:
    from console.store.database import Store

    return Store.open(db if db else default_db_path(), read_only=True)


def when_option(option: str, text: str | None, default: str, now: float, zone: tzinfo | None = None) -> float:
    try:
        return parse_when(text if text is not None else default, now, zone)
    except ValueError as error:
        raise UserError(f"{option} {error}") from None


def time_range(
    args: argparse.Namespace, now: float, default_from: str, zone: tzinfo | None = None
) -> tuple[float, float]:
    start = when_option("--from", args.start, default_from, now, zone)
    end = when_option("--to", args.end, "now", now, zone)
    if not end > start:
        raise UserError(
            f"--from {format_when(start, zone)} is not before --to {format_when(end, zone)}; expected an earlier --from"
        )
    return start, end


def chosen_fleets(store: Store, name: str | None) -> list[str]:
    known = [f.name for f in store.fleets()]
    if name is None:
        if not known:
            raise UserError(
                f"{store.path}: no fleet recorded yet; expected a file written by `capcon watch` or `capcon record`"
            )
        return known
    if name not in known:
        raise UserError(
            f"--fleet {name!r}: not in {store.path}; expected one of: {', '.join(known) or '(none recorded)'}"
        )
    return [name]


# --- the summary -------------------------------------------------------------


class FleetReport(NamedTuple):
    """One fleet's hours in the range, with the zone they are cut on and the plan they are read against."""

    fleet: str
    zone: tzinfo
    plan: Plan | None
    hours: list[Summary]
    recorded: tuple[float | None, float | None]  # the fleet's first and last recorded poll


class _Plans:
    """Recorded plan versions, parsed once each; a version this capcon cannot read counts as no plan."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.parsed: dict[int, Plan | None] = {}
        self.unreadable: list[str] = []

    def get(self, plan_id: int | None) -> Plan | None:
        if plan_id is None:
            return None
        if plan_id not in self.parsed:
            from console.bench.estimate import parse_plan
            from console.plan.schema import PlanError

            version = self.store.plan_version(plan_id)
            try:
                self.parsed[plan_id] = parse_plan(version.text, version.path or version.name) if version else None
            except PlanError as error:
                self.parsed[plan_id] = None
                self.unreadable.append(str(error))
        return self.parsed[plan_id]


def hour_summaries(
    store: Store, fleet: str, start: float, end: float, zone: tzinfo, plans: _Plans, file_plan: Plan | None
) -> list[Summary]:
    """One summary per hour of `zone` overlapping [start, end), read an hour at a time (memory stays small)."""
    from console.store.series import minute_series, plan_id_in_force, raised_flags

    flags = raised_flags(store, fleet, start, end)
    summaries = []
    for hour in hour_starts(start, end, zone):
        span_start, span_end = max(hour, start), min(hour + 3600.0, end)
        # Each recorded stretch counts from its first poll: the requests of its first, partial minute are real.
        series = minute_series(store, fleet, span_start - LEAD_IN_SECONDS, span_end, stretch_starts=True)
        plan = file_plan or plans.get(plan_id_in_force(store, fleet, span_start, span_end))
        summary = summarise(series, span_start, span_end, flags, period=(hour, hour + 3600.0))
        expected = _expected(store, fleet, plan, hour, span_start, span_end, summary) if plan is not None else None
        summaries.append(with_plan(summary, expected))
    return summaries


def _expected(
    store: Store, fleet: str, plan: Plan, hour: float, start: float, end: float, summary: Summary
) -> PlanHour:
    """The plan's hour as the console read it: at the recorded plan clock, else the wall clock in the plan's zone.

    A `demo --db` recording runs a simulated week: its polls carry the plan clock the console
    showed, and the busiest moment's clock is the one its load is measured against. Rolled-up
    minutes keep no plan clock, so a span already rolled up is read on the wall clock.
    """
    from console.store.series import plan_clocks

    clocks = plan_clocks(store, fleet, start, end)
    if not clocks:
        return plan_hour(plan, hour, ZoneInfo(plan.timezone))
    moment = summary.busiest_at if summary.busiest_at is not None else clocks[-1][0]
    i = max(bisect_right([at for at, _ in clocks], moment) - 1, 0)
    return plan_hour_at_clock(plan, clocks[i][1])


def day_summaries(hours: list[Summary], start: float, end: float, zone: tzinfo) -> list[Summary]:
    starts = day_starts(start, end, zone)
    grouped: list[list[Summary]] = [[] for _ in starts]
    for hour in hours:
        grouped[max(bisect_right(starts, hour.start) - 1, 0)].append(hour)
    # The midnight after the last day (a day is 23 to 25 hours): a day the range cuts is partial.
    ends = starts[1:] + day_starts(starts[-1], starts[-1] + 26 * 3600.0, zone)[1:2] if starts else []
    days: list[Summary] = []
    for day, day_end in zip(starts, ends):
        days.append(combine(grouped[len(days)], max(day, start), min(day_end, end), period=(day, day_end)))
    return days


def _zone_name(zone: tzinfo) -> str:
    key = getattr(zone, "key", None)
    return key if key and key != "localtime" else "local time"


def history_range(
    args: argparse.Namespace, now: float, default_from: str, last: float | None, zone: tzinfo | None = None
) -> tuple[float, float]:
    """[start, end) to summarise. Typed times read against the real now.

    Without --to the range ends just after the last recorded poll (a recorder stopped yesterday
    still shows its last day, last poll included), and the default --from counts back from there.
    Without --to a --from after the record is an empty range (reported), not an error.
    """
    if args.end is not None:
        end = when_option("--to", args.end, "now", now, zone)
    else:
        end = last if last is not None else now
    start = when_option(
        "--from",
        args.start if args.start is not None else default_from,
        "now",
        now if args.start is not None else end,
        zone,
    )
    if not end > start:
        if args.end is None:
            return start, start
        raise UserError(
            f"--from {format_when(start, zone)} is not before --to {format_when(end, zone)}; expected an earlier --from"
        )
    return start, end


def tabulated_range(
    start: float, end: float, spans: list[tuple[float | None, float | None]], zone: tzinfo | None
) -> tuple[float, float, str | None]:
    """A range longer than a year is cut to what was recorded in it, with a note saying so."""
    if end - start <= LONGEST_TABULATED_SECONDS:
        return start, end, None
    firsts = [first for first, _ in spans if first is not None]
    lasts = [last for _, last in spans if last is not None]
    cut_start = max(start, min(firsts)) if firsts else end
    cut_end = min(end, max(lasts)) if lasts else end
    if not cut_end > cut_start:
        cut_start = cut_end = start
    note = (
        f"the range {format_when(start, zone)[:16]} to {format_when(end, zone)[:16]} is longer than a year: "
        f"only its recorded part is shown"
    )
    return cut_start, cut_end, note


def run(args: argparse.Namespace) -> int:
    from console.bench.estimate import load_plan
    from console.commands.history_overflow import overflow_days
    from console.fleet.week_fit import fit_week
    from console.store.database import reading_errors

    if getattr(args, "action", None) == "import":
        file_plan = load_plan(args.plan) if args.plan else None
        return run_import(args, file_plan, when_option, default_db_path)
    check_not_import(args)
    if args.salvage:
        return _salvage(args)
    now = time.time()
    try:
        chosen_zone = zone_named(args.tz) if args.tz else None
    except ValueError as error:
        raise UserError(f"--tz {error}") from None
    file_plan = load_plan(args.plan) if args.plan else None
    if getattr(args, "backtest", False):
        return _backtest(args, now, chosen_zone, file_plan)
    compare = file_plan is not None and args.by is None
    by = args.by or "hour"
    default_from = "-7d" if (compare or by == "day") else "-24h"
    for option, text in (("--from", args.start), ("--to", args.end)):
        if text is not None:
            when_option(option, text, "now", now, chosen_zone)  # a typo is named before the file is opened
    store = open_history(args.db)
    try:
        with reading_errors(store.path):
            if args.fleet is None and not store.fleets():
                # A history nothing has been recorded into yet is empty, not bad input (as a range without samples).
                _print_nothing_recorded(args, store.path, file_plan)
                return 0
            reports, start, end, note, plans = _read(args, store, now, default_from, chosen_zone, file_plan, compare)
            modes = {} if compare else overflow_days(store, reports, start, end)
    finally:
        store.close()
    if note and not args.json:
        print(f"note: {note}")
    if compare and file_plan is not None:
        fits = [(fleet, zone, hours, fit_week(hours, file_plan, zone)) for fleet, zone, _, hours, _ in reports]
        _print_fits(args, start, end, file_plan, fits, note)
        return 0
    _print_summaries(args, by, start, end, reports, plans.unreadable, note, modes)
    return 0


def _read(
    args: argparse.Namespace,
    store: Store,
    now: float,
    default_from: str,
    chosen_zone: tzinfo | None,
    file_plan: Plan | None,
    compare: bool,
) -> tuple[list[FleetReport], float, float, str | None, _Plans]:
    """Everything the summary shows, read from the file: (reports, start, end, note, plans)."""
    from console.store.series import plan_id_in_force, recorded_end, recorded_span

    fleets = chosen_fleets(store, args.fleet)
    last = max((e for e in (recorded_end(store, f) for f in fleets) if e is not None), default=None)
    start, end = history_range(args, now, default_from, last, chosen_zone)
    spans = [(recorded_span(store, f)[0], recorded_end(store, f)) for f in fleets]
    start, end, note = tabulated_range(start, end, spans, chosen_zone)
    plans = _Plans(store)
    reports: list[FleetReport] = []
    for fleet in fleets:
        recorded = plans.get(plan_id_in_force(store, fleet, start, end))
        plan = file_plan or recorded
        # With no plan in the range, the fleet's latest plan still names the clock its hours are read on.
        clock = plan or plans.get(plan_id_in_force(store, fleet, -math.inf, math.inf))
        zone: tzinfo
        if compare and file_plan is not None:
            zone = ZoneInfo(file_plan.timezone)  # the week is cut on the plan's own clock
        elif chosen_zone is not None:
            zone = chosen_zone
        else:
            zone = ZoneInfo(clock.timezone) if clock is not None else local_zone()
        hours = hour_summaries(store, fleet, start, end, zone, plans, file_plan)
        first, last = recorded_span(store, fleet)
        reports.append(FleetReport(fleet, zone, plan, hours, (first, last)))
    return reports, start, end, note, plans


def _backtest(args: argparse.Namespace, now: float, chosen_zone: tzinfo | None, file_plan: Plan | None) -> int:
    """`--backtest`: the forecast walked over the recorded arrivals of each fleet (console.ahead.backtest)."""
    from console.commands import history_backtest as bt
    from console.store.database import reading_errors
    from console.store.series import plan_id_in_force, recorded_end

    for option, text in (("--from", args.start), ("--to", args.end)):
        if text is not None:
            when_option(option, text, "now", now, chosen_zone)  # a typo is named before the file is opened
    store = open_history(args.db)
    fleets: list[dict] = []
    try:
        with reading_errors(store.path):
            if args.fleet is None and not store.fleets():
                _print_nothing_recorded(args, store.path, None)
                return 0
            plans = _Plans(store)
            names = chosen_fleets(store, args.fleet)
            lasts = [recorded_end(store, fleet) for fleet in names]
            start, end = history_range(
                args, now, "-7d", max((t for t in lasts if t is not None), default=None), chosen_zone
            )
            for n, fleet in enumerate(names):
                plan = file_plan or plans.get(plan_id_in_force(store, fleet, -math.inf, math.inf))
                zone = chosen_zone or (ZoneInfo(plan.timezone) if plan is not None else local_zone())
                result = bt.fleet_backtest(store, fleet, start, end, plan)
                if args.json:
                    fleets.append(bt.fleet_json(fleet, plan, result, start, end, zone))
                else:
                    bt.print_text(fleet, plan, result, start, end, zone, first=n == 0)
    finally:
        store.close()
    if args.json:
        bt.print_json(start, end, fleets)
    return 0


def _salvage(args: argparse.Namespace) -> int:
    """`--salvage NEW`: every row still readable in the (damaged) history, into a new history file."""
    from pathlib import Path

    from console.store.salvage import salvage  # only for a damaged file

    source = Path(args.db) if args.db else default_db_path()
    if not source.is_file():
        raise UserError(f"{source}: no such history file; expected the damaged file as --db")
    target = Path(args.salvage)
    if not target.parent.is_dir():
        raise UserError(
            f"--salvage {target}: folder {target.parent} does not exist; expected a new file in an existing folder"
        )
    report = salvage(source, target)
    rows = sum(report.copied.values())
    print(
        f"salvaged {rows} rows of {source} into {target}: {report.copied.get('polls', 0)} polls,"
        f" {report.copied.get('samples', 0)} samples, {report.copied.get('minutes', 0)} rolled-up minutes"
    )
    if report.damaged:
        print(f"rows on the damaged pages of {', '.join(report.damaged)} are lost; use --db {target} from now on")
    if report.indexes_failed:
        print(
            f"note: indexes not rebuilt (garbage rows in the copy): {', '.join(report.indexes_failed)}", file=sys.stderr
        )
    return 0


def _print_nothing_recorded(args: argparse.Namespace, path: str | Path, plan: Plan | None) -> None:
    words = "no fleet recorded yet (`capcon watch --db` and `capcon record` write them)"
    if args.json:
        out: dict[str, object] = {"fleets": [], "notes": [f"{path}: {words}"]}
        if plan is not None and args.by is None:
            out.update(plan=plan.name, timezone=plan.timezone)
        print(json_out.dumps(out, indent=2))
        return
    against = f"; nothing to compare with plan {plan.name}" if plan is not None and args.by is None else ""
    print(f"{path}: {words}{against}")


def _span_text(start: float, end: float, zone: tzinfo) -> str:
    """`A to B`, or `A on` for an empty range (a --from after the last recorded poll)."""
    if not end > start:
        return f"{format_when(start, zone)[:16]} on"
    return f"{format_when(start, zone)[:16]} to {format_when(end, zone)[:16]}"


# --- output ------------------------------------------------------------------


def _label(at: float, zone: tzinfo, by: str) -> str:
    local = datetime.fromtimestamp(at, zone)
    if by == "day":
        return local.strftime("%a %m-%d")
    label = local.strftime("%a %m-%d %H:%M")
    if local.fold:  # the repeated hour when the clocks go back
        label += local.strftime(" (%z)")[:5] + ")"
    return label


def _row_json(s: Summary, zone: tzinfo) -> dict:
    return {
        "start": iso_when(s.start, zone),
        "end": iso_when(s.end, zone),
        "start_unix": s.start,
        "end_unix": s.end,
        # The recording covers only part of the row's hour or day: its figures are for that part.
        "partial": s.partial,
        "recorded_seconds": s.recorded_seconds,
        "replicas": s.replicas,
        "busiest_rps": s.busiest_rps,
        "busiest_at": iso_when(s.busiest_at, zone) if s.busiest_at is not None else None,
        "busiest_seconds": s.busiest_seconds,
        "ttft_p95_seconds": s.ttft_p95_seconds,
        "tpot_p95_seconds": s.tpot_p95_seconds,
        "tpot_from": s.tpot_from,
        "kv_usage_max": s.kv_usage_max,
        "preemptions": s.preemptions,
        "requests": s.requests,
        "restarts": s.restarts if s.has_data else None,
        "flags_raised": s.flags_raised,
        "flags_by_kind": dict(s.flags),
        "mean_input_tokens": s.mean_input_tokens,
        "mean_output_tokens": s.mean_output_tokens,
        "planned_capacity_rps": s.plan.capacity_rps if s.plan else None,
        "planned_rps": s.plan.planned_rps if s.plan else None,
        "planned_replicas": s.plan.replicas if s.plan else None,
        "load": s.load,
    }


def _trimmed(args: argparse.Namespace, rows: list[Summary]) -> list[Summary]:
    """Without --from, the default span starts with the first recorded hour, not a run of unknowns before it."""
    if args.start is not None:
        return rows
    first = next((i for i, row in enumerate(rows) if row.has_data), None)
    return rows if first is None else rows[first:]


def _print_summaries(
    args: argparse.Namespace,
    by: str,
    start: float,
    end: float,
    reports: list[FleetReport],
    unreadable: list[str],
    note: str | None = None,
    modes: dict[str, list[DayModes]] | None = None,
) -> None:
    from console.commands.history_overflow import as_json as overflow_json
    from console.commands.history_overflow import table as overflow_table

    modes = modes or {}
    if args.json:
        listed: list[dict[str, object]] = []
        out: dict[str, object] = {"from": iso_when(start), "to": iso_when(end), "by": by, "fleets": listed}
        for fleet, zone, plan, hours, _ in reports:
            rows = _trimmed(args, hours if by == "hour" else day_summaries(hours, start, end, zone))
            listed.append(
                {
                    "fleet": fleet,
                    "timezone": _zone_name(zone),
                    "plan": plan.name if plan else None,
                    "samples": any(h.has_data for h in hours),
                    "rows": [_row_json(r, zone) for r in rows],
                }
            )
            if fleet in modes:  # only with gateway tallies: a history without them reads as before
                listed[-1]["overflow_modes"] = overflow_json(modes[fleet], zone)
        notes = ([note] if note else []) + [f"a recorded plan could not be read: {text}" for text in unreadable]
        if notes:
            out["notes"] = notes
        print(json_out.dumps(out, indent=2))
        return
    for n, (fleet, zone, plan, hours, (first, last)) in enumerate(reports):
        if n:
            print()
        span = f"{_span_text(start, end, zone)} ({_zone_name(zone)})"
        if not any(h.has_data for h in hours):
            recorded = (
                f"; recorded from {format_when(first, zone)} to {format_when(last, zone)}" if first is not None else ""
            )
            print(f"fleet {fleet}: no samples from {span}{recorded}")
            if fleet in modes:
                print(overflow_table(modes[fleet], zone))
            continue
        rows = _trimmed(args, hours if by == "hour" else day_summaries(hours, start, end, zone))
        if args.start is None:
            span = f"{format_when(rows[0].start, zone)[:16]} to {format_when(end, zone)[:16]} ({_zone_name(zone)})"
        print(f"fleet {fleet} · plan {plan.name if plan else '(none recorded)'}")
        print(span)
        print(_table(rows, zone, by))
        if any(r.busiest_is_short for r in rows):
            print(_short_legend(rows))
        if any(r.partial for r in rows):
            print(_partial_legend(by))
        if any(r.tpot_from == "itl" for r in rows):
            print("TPOT95 from the inter-token histogram where the servers have no per-request TPOT.")
        restarts = sum(r.restarts for r in rows)
        if restarts:
            print(
                f"{restarts} replica restart{'s' if restarts != 1 else ''} in the span: counts resume from each new process start."
            )
        if fleet in modes:
            print(overflow_table(modes[fleet], zone))
    for text in unreadable:
        print(f"note: a recorded plan could not be read ({text}); its hours show no load", file=sys.stderr)


def _short_legend(rows: list[Summary]) -> str:
    """What `*` means, with the seconds the marked rates cover (JSON: busiest_seconds)."""
    covered = sorted(seconds for r in rows if r.busiest_is_short and (seconds := r.busiest_seconds) is not None)
    span = f"{covered[0]:.0f} s" if covered[0] == covered[-1] else f"{covered[0]:.0f}-{covered[-1]:.0f} s"
    # Two lines: the day table fits 80 columns, and so does its legend.
    return f"* under five minutes recorded in that span: the rate over what was recorded\n  ({span}), not a busiest five minutes."


def _partial_legend(by: str) -> str:
    # Two lines of at most 80 columns, as the day table's.
    return (
        f"partial: only part of that {by} is recorded (the recording started, stopped or\n"
        f"  broke off in it, or the range cuts it): its figures cover the recorded part."
    )


def _flags_text(s: Summary) -> str:
    if s.flags_raised is None:
        return fmt.UNKNOWN
    return str(s.flags_raised)


def _table(rows: list[Summary], zone: tzinfo, by: str) -> str:
    hour = by == "hour"
    headers = ["hour" if hour else "day", "busy rps", "TTFT95", "TPOT95", "KV max", "preempt", "flags", "load"]
    if hour:
        headers += ["plan cap", "flag kinds"]
    lines = []
    for s in rows:
        cells = [
            _label(s.start, zone, by) + (" partial" if s.partial else ""),
            fmt.rate(s.busiest_rps) + ("*" if s.busiest_is_short else ""),
            fmt.seconds(s.ttft_p95_seconds),
            fmt.seconds(s.tpot_p95_seconds),
            fmt.share(s.kv_usage_max),
            fmt.count(s.preemptions),
            _flags_text(s),
            fmt.share(s.load),
        ]
        if hour:
            cells += [
                fmt.rate(s.plan.capacity_rps) if s.plan else fmt.UNKNOWN,
                ", ".join(f"{k} {c}" if c > 1 else k for k, c in s.flags.items()),
            ]
        lines.append(cells)
    widths = [max(len(headers[i]), *(len(row[i]) for row in lines)) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        parts = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:-1], widths[1:-1])]
        last = cells[-1].ljust(widths[-1]) if hour else cells[-1].rjust(widths[-1])
        return "  ".join(parts + [last]).rstrip()

    return "\n".join([line(headers)] + [line(cells) for cells in lines])


def _print_fits(
    args: argparse.Namespace,
    start: float,
    end: float,
    plan: Plan,
    fits: list[tuple[str, tzinfo, list[Summary], WeekFit]],
    note: str | None = None,
) -> None:
    if args.json:
        out: dict[str, object] = {"from": iso_when(start), "to": iso_when(end), "plan": plan.name}
        out["timezone"] = plan.timezone
        out["fleets"] = [_fit_json(fleet, fit) for fleet, _zone, _hours, fit in fits]
        if note:
            out["notes"] = [note]
        print(json_out.dumps(out, indent=2))
        return
    for n, (fleet, zone, hours, fit) in enumerate(fits):
        if n:
            print()
        span = _span_text(start, end, zone)
        if not fit.hours_with_data:
            recorded = any(h.has_data for h in hours)
            why = (
                "no hour holds five recorded minutes (the busiest five minutes need them)" if recorded else "no samples"
            )
            print(f"fleet {fleet}: {why} from {span} ({plan.timezone}); nothing to compare with plan {plan.name}")
            continue
        print(f"fleet {fleet} against plan {plan.name} · hours on {plan.timezone}")
        print(f"{span} · {fit.hours_with_data} of 168 hours of the week observed")
        print(_fit_table(fit))
        print()
        deferrable = any(w.kind != "interactive" for w in plan.workloads)
        mix = " (every request, deferrable ones too)" if deferrable else ""
        print(_tokens_line("input", fit.observed_input_mean, fit.planned_input_mean) + mix)
        print(_tokens_line("output", fit.observed_output_mean, fit.planned_output_mean) + mix)
        if deferrable:
            print(_tokens_line("interactive input", fit.interactive_input_mean, fit.planned_interactive_input_mean))
            print(_tokens_line("interactive output", fit.interactive_output_mean, fit.planned_interactive_output_mean))
        print()
        print(fit.yaml, end="")


def _tokens_line(which: str, observed: float | None, planned: float | None) -> str:
    if observed is None:
        return f"mean {which} tokens: no data recorded (plan {fmt.tokens(planned)})"
    ratio = f" ({observed / planned:.2f} x plan)" if planned else ""
    return f"mean {which} tokens: observed {observed:.0f}, plan {planned:.0f}{ratio}"


def _fit_table(fit: WeekFit) -> str:
    headers = ("hour", "observed", "planned", "obs/plan", "in obs", "in plan", "out obs", "out plan")
    rows = []
    for h in fit.hours:
        rows.append(
            (
                f"{DAYS[h.weekday]} {h.hour:02d}:00",
                fmt.rate(h.observed_rps),
                fmt.rate(h.planned_rps),
                f"{h.ratio:.2f}" if h.ratio is not None else fmt.UNKNOWN,
                fmt.tokens(h.observed_input_mean),
                fmt.tokens(h.planned_input_mean),
                fmt.tokens(h.observed_output_mean),
                fmt.tokens(h.planned_output_mean),
            )
        )
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join([cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])])

    return "\n".join([line(headers)] + [line(r) for r in rows])


def _fit_json(fleet: str, fit: WeekFit) -> dict:
    return {
        "fleet": fleet,
        "hours_with_data": fit.hours_with_data,
        "hours": [
            {
                "weekday": DAYS[h.weekday],
                "hour": h.hour,
                "observed_rps": h.observed_rps,
                "planned_rps": h.planned_rps,
                "planned_interactive_rps": h.planned_interactive_rps,
                "planned_deferrable_rps": h.planned_deferrable_rps,
                "ratio": h.ratio,
                "observed_input_mean": h.observed_input_mean,
                "planned_input_mean": h.planned_input_mean,
                "observed_output_mean": h.observed_output_mean,
                "planned_output_mean": h.planned_output_mean,
                "occurrences": h.occurrences,
            }
            for h in fit.hours
        ],
        "observed_input_mean": fit.observed_input_mean,
        "planned_input_mean": fit.planned_input_mean,
        "observed_output_mean": fit.observed_output_mean,
        "planned_output_mean": fit.planned_output_mean,
        "interactive_input_mean": fit.interactive_input_mean,
        "planned_interactive_input_mean": fit.planned_interactive_input_mean,
        "interactive_output_mean": fit.interactive_output_mean,
        "planned_interactive_output_mean": fit.planned_interactive_output_mean,
        "suggested_rps": {name: [list(day) for day in table] for name, table in fit.suggested_rps.items()},
        "suggested_tokens": {
            name: {
                "input_mean": t.input_mean,
                "input_p95": t.input_p95,
                "output_mean": t.output_mean,
                "output_max": t.output_max,
            }
            for name, t in fit.suggested_tokens.items()
        },
        "suggested_yaml": fit.yaml,
    }
