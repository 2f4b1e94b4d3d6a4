"""`capcon export`: recorded samples, flags, events or replayed figures as CSV or JSON lines.

Rows are streamed from the file as they are read, so a week of a large fleet never sits in memory.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from heapq import merge
from typing import Iterator

from console.errors import UserError
from console.metrics.figures import Figures
from console.store import codec
from console.store.database import SAMPLE_READ_COLUMNS, Store
from console.store.schema import COUNTER_COLUMNS, HISTOGRAM_COLUMNS
from console.commands.history import add_history_options, chosen_fleets, open_history, time_range
from console.store.when import iso_when

WHAT = ("samples", "flags", "events", "figures")

DESCRIPTION = """\
Export recorded data for spreadsheets (csv, with a header row) and notebooks (jsonl, one
JSON object a line). Times are given twice: ISO 8601 with the local offset, and unix seconds.

  samples  one row per replica per poll: state, counters, gauges, each histogram's count and
           sum (jsonl adds its buckets as {le: cumulative count}); one-minute rollups that
           retention left in place of older raw samples come first, marked resolution=minute
  flags    flags raised and cleared, with their figures
  events   recording started or stopped, overflow switches, ...
  figures  per poll, the figures the console computed (fleet and each replica: rates, p95s),
           recomputed by replaying the recorded polls as `capcon replay --from` shows them:
           warmed up on the 15 minutes before --from, each console or recorder start beginning
           with an empty window as it did live
"""

EPILOG = """\
examples:
  capcon export --from -1h --to now --format csv --output last-hour.csv
  capcon export --from "2026-11-30 09:00" --to "2026-11-30 12:00" --format jsonl --what figures | jq .
exit status: 0 written (an empty range writes only the csv header); 2 bad input.
"""


def add_parser(sub):
    parser = sub.add_parser(
        "export", help="recorded samples, flags, events or figures as csv or jsonl",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_history_options(parser)
    parser.add_argument("--from", dest="start", metavar="WHEN", required=True, help="start: ISO date-time (local unless Z/+01:00), HH:MM, -2h, now, unix seconds")
    parser.add_argument("--to", dest="end", metavar="WHEN", required=True, help="end (inclusive), same forms")
    parser.add_argument("--format", required=True, metavar="FORMAT", help="csv or jsonl")
    parser.add_argument("--output", metavar="FILE", default="-", help="file to write (default or -: standard output)")
    parser.add_argument("--what", default="samples", metavar="WHAT", help=f"what to export: {', '.join(WHAT)} (default samples)")
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    if args.format not in ("csv", "jsonl"):
        raise UserError(f"--format {args.format!r}: expected csv or jsonl")
    if args.what not in WHAT:
        raise UserError(f"--what {args.what!r}: expected one of {', '.join(WHAT)}")
    start, end = time_range(args, time.time(), "-1h")
    store = open_history(args.db)
    try:
        fleets = chosen_fleets(store, args.fleet)
        columns, rows = {
            "samples": _samples,
            "flags": _flags,
            "events": _events,
            "figures": _figures,
        }[args.what](store, fleets, start, end, args.format)
        try:
            with _output(args.output) as out:
                written = _write(out, args.format, columns, rows)
        except BrokenPipeError:
            # The reader went away (`| head`): not an error; keep Python from complaining at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    finally:
        store.close()
    if not written:
        print(f"capcon export: no {args.what} between {iso_when(start)} and {iso_when(end)}", file=sys.stderr)
    return 0


@contextmanager
def _output(path: str):
    if path in ("-", ""):
        yield sys.stdout
        sys.stdout.flush()
        return
    try:
        file = open(path, "w", encoding="utf-8", newline="")
    except OSError as error:
        raise UserError(f"--output {path}: cannot write ({error.strerror}); expected a writable file path") from None
    with file:
        yield file


def _write(out, form: str, columns: list[str], rows: Iterator[dict]) -> int:
    written = 0
    if form == "csv":
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
            written += 1
    else:
        for row in rows:
            out.write(json.dumps(row, separators=(",", ":"), allow_nan=False, default=str) + "\n")
            written += 1
    return written


def _cell(value):
    """A csv cell: numbers as Python writes them (round-trip exact), maps as JSON, unknown as empty."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return value


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


# --- samples -----------------------------------------------------------------

_SAMPLE_COLUMNS = (
    ["time", "unix", "fleet", "replica", "url", "resolution", "poll", "state", "error", "sampled_at", "start_time"]
    + list(COUNTER_COLUMNS)
    + ["running", "waiting", "kv_usage", "kv_capacity_tokens"]
    + [f"{h}_{part}" for h in HISTOGRAM_COLUMNS for part in ("count", "sum")]
)


def _fleet_filter(store: Store, fleets: list[str]) -> tuple[str, list]:
    ids = [store.fleet_id(name) for name in fleets]
    return f"({', '.join('?' for _ in ids)})", ids


def _samples(store: Store, fleets, start, end, form):
    marks, ids = _fleet_filter(store, fleets)
    cols = ", ".join(f"s.{c}" for c in SAMPLE_READ_COLUMNS)
    rollups = (
        f"SELECT s.minute, f.name, r.name, r.url, 'minute', NULL, {cols} FROM minutes s"
        f" JOIN fleets f ON f.id = s.fleet_id JOIN replicas r ON r.id = s.replica_id"
        f" WHERE s.fleet_id IN {marks} AND s.minute >= ? AND s.minute <= ? ORDER BY s.minute, s.replica_id"
    )
    raw = (
        f"SELECT p.at, f.name, r.name, r.url, 'poll', p.id, {cols} FROM polls p JOIN samples s ON s.poll_id = p.id"
        f" JOIN fleets f ON f.id = p.fleet_id JOIN replicas r ON r.id = s.replica_id"
        f" WHERE p.fleet_id IN {marks} AND p.at >= ? AND p.at <= ? ORDER BY p.at, p.id, s.replica_id"
    )
    jsonl = form == "jsonl"
    columns = list(_SAMPLE_COLUMNS)
    if jsonl:
        columns += ["requests_by_reason", "kv_usage_by_engine", "kv_capacity_by_engine"] + [f"{h}_buckets" for h in HISTOGRAM_COLUMNS]

    def rows():
        for query in (rollups, raw):
            # A cursor of its own: rows are read as they are written out.
            for at, fleet, replica, url, resolution, poll_id, *values in store.connection.cursor().execute(query, (*ids, start, end)):
                stored = dict(zip(SAMPLE_READ_COLUMNS, values))
                row = {
                    "time": iso_when(at), "unix": at, "fleet": fleet, "replica": replica, "url": url,
                    "resolution": resolution, "poll": poll_id,
                }
                for key in ("state", "error", "sampled_at", "start_time", *COUNTER_COLUMNS, "running", "waiting", "kv_usage", "kv_capacity_tokens"):
                    row[key] = stored[key]
                for name in HISTOGRAM_COLUMNS:
                    blob = stored[name]
                    histogram = codec.decode(blob, store.bounds(codec.layout_of(blob))) if blob is not None else None
                    row[f"{name}_count"] = histogram.count if histogram else None
                    row[f"{name}_sum"] = histogram.sum if histogram else None
                    if jsonl:
                        row[f"{name}_buckets"] = {_le(b): c for b, c in zip(histogram.bounds, histogram.counts)} if histogram else None
                if jsonl:
                    for key in ("requests_by_reason", "kv_usage_by_engine", "kv_capacity_by_engine"):
                        row[key] = json.loads(stored[key]) if stored[key] else None
                yield row

    return columns, rows()


# --- flags and events ----------------------------------------------------------

_FLAG_COLUMNS = ["time", "unix", "fleet", "change", "flag_id", "kind", "subject", "severity", "since_time", "since", "why", "todo", "figures"]
_EVENT_COLUMNS = ["time", "unix", "fleet", "kind", "subject", "detail"]


def _flags(store: Store, fleets, start, end, form):
    chosen = set(fleets)

    def rows():
        for event in store.flag_events(None, start, end):
            if event.fleet not in chosen:
                continue
            yield {
                "time": iso_when(event.at), "unix": event.at, "fleet": event.fleet, "change": event.change,
                "flag_id": event.flag_id, "kind": event.kind, "subject": event.subject, "severity": event.severity,
                "since_time": iso_when(event.since) if event.since is not None else None, "since": event.since, "why": event.why, "todo": event.todo, "figures": event.figures,
            }

    return _FLAG_COLUMNS, rows()


def event_fleets(fleet: str | None, detail) -> list[str]:
    """The fleets an event names: its fleet column, else the "fleets" of its detail (a recording's start and stop)."""
    if fleet:
        return [fleet]
    named = detail.get("fleets") if isinstance(detail, dict) else None
    return [str(name) for name in named] if isinstance(named, list) else []


def _events(store: Store, fleets, start, end, form):
    chosen = set(fleets)

    def rows():
        for event in store.events(start, end):
            named = event_fleets(event.fleet, event.detail)
            if named and not chosen.intersection(named):
                continue  # another fleet's; an event that names no fleet belongs to every export
            yield {
                "time": iso_when(event.at), "unix": event.at, "fleet": ",".join(named) or None, "kind": event.kind,
                "subject": event.subject, "detail": event.detail,
            }

    return _EVENT_COLUMNS, rows()


# --- figures -----------------------------------------------------------------

_FIGURE_FIELDS = [f for f in Figures.__dataclass_fields__ if f not in ("name", "url")]
_FIGURE_COLUMNS = ["time", "unix", "fleet", "poll", "subject", "url", "window_seconds", "source"] + _FIGURE_FIELDS


def _figures(store: Store, fleets, start, end, form):
    """Each poll's figures as a replay starting at --from shows them: warmed up on the polls before it, each
    console run (a recorder restart, clean or not) starting from an empty watcher as it did live."""
    from console.replay.fleet_replay import FleetReplay  # noqa: PLC0415 - only this export replays
    from console.replay.loader import recorded_fleets  # noqa: PLC0415

    def replayed(recorded):
        fleet_replay = FleetReplay(recorded)
        for index in range(recorded.first, recorded.last + 1):
            fleet_replay.go_to(index)
            yield fleet_replay.poll.at, fleet_replay.poll.id, fleet_replay.poll, fleet_replay.view.figures

    def rows():
        # Fleets side by side in time order, as the polls were taken.
        for _, _, poll, figures in merge(*(replayed(f) for f in recorded_fleets(store, fleets, start, end))):
            for subject, f in (("fleet", figures.fleet), *((r.name, r) for r in figures.replicas)):
                row = {
                    "time": iso_when(poll.at), "unix": poll.at, "fleet": poll.fleet, "poll": poll.id,
                    "subject": subject, "url": f.url, "window_seconds": figures.window_seconds, "source": figures.source,
                }
                for name in _FIGURE_FIELDS:
                    row[name] = getattr(f, name)
                yield row

    return _FIGURE_COLUMNS, rows()
