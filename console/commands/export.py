"""`capcon export`: recorded samples, flags, events or replayed figures as CSV or JSON lines.

Rows are streamed from the file as they are read, so a week of a large fleet never sits in memory.

`--output FILE` is written whole or not at all: rows go to a temporary file beside FILE, renamed
over it once the last row is on disk; a failed write (a full disk, a size limit) removes it and
leaves FILE as it was. An output that is the history itself (by any name: a symlink, a hard
link), its -wal, -shm or -journal, or any SQLite file, is refused before anything is opened for
writing. Devices and pipes (`/dev/stdout`, a FIFO) are written in place.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from heapq import merge
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from console.args import SubParsers
from console.commands.history import add_history_options, chosen_fleets, default_db_path, open_history, time_range
from console.errors import UserError
from console.metrics.figures import FLEET_TOTAL, Figures
from console.output_file import OutputFailed, opened_output, os_error_words, refuse_output
from console.store import json_out
from console.store.schema import COUNTER_COLUMNS, HISTOGRAM_COLUMNS
from console.when import iso_when

if TYPE_CHECKING:
    from console.metrics.figures import FleetFigures
    from console.replay.loader import RecordedFleet
    from console.store.database import Store
    from console.store.records import RecordedPoll

# An export's columns and its rows, read as they are written out.
Rows = tuple[list[str], Iterator[dict]]

# The history file's reader (sqlite_utils) is imported by the steps that read, so that
# `capcon export --help` starts without it.


class WriteFailed(UserError):
    """The output stopped taking rows (a full disk, a size limit, an I/O error): not bad input."""

    exit_code = 1


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
exit status: 0 written (an empty range writes only the csv header); 1 the output failed (a full
disk, a size limit: --output FILE is then left as it was); 2 bad input (an output that is the
history file or another SQLite file, a damaged history).
"""


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "export",
        help="recorded samples, flags, events or figures as csv or jsonl",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_history_options(parser)
    parser.add_argument(
        "--from",
        dest="start",
        metavar="WHEN",
        required=True,
        help="start: ISO date-time (local unless Z/+01:00), HH:MM, -2h, now, unix seconds",
    )
    parser.add_argument("--to", dest="end", metavar="WHEN", required=True, help="end (inclusive), same forms")
    parser.add_argument("--format", required=True, metavar="FORMAT", help="csv or jsonl")
    parser.add_argument(
        "--output",
        metavar="FILE",
        default="-",
        help="file to write, whole or not at all (default or -: standard output); never the history file or another SQLite file",
    )
    parser.add_argument(
        "--what", default="samples", metavar="WHAT", help=f"what to export: {', '.join(WHAT)} (default samples)"
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.format not in ("csv", "jsonl"):
        raise UserError(f"--format {args.format!r}: expected csv or jsonl")
    if args.what not in WHAT:
        raise UserError(f"--what {args.what!r}: expected one of {', '.join(WHAT)}")
    from console.store.database import reading_errors

    start, end = time_range(args, time.time(), "-1h")
    history = Path(args.db) if args.db else default_db_path()
    refuse_output(args.output, history)  # before anything is opened, for reading or writing
    store = open_history(args.db)
    counted = _Counted()
    try:
        with reading_errors(store.path):
            fleets = chosen_fleets(store, args.fleet)
            columns, rows = {
                "samples": _samples,
                "flags": _flags,
                "events": _events,
                "figures": _figures,
            }[args.what](store, fleets, start, end, args.format)
            try:
                with _output(args.output, counted):
                    _write(counted, args.format, columns, rows)
            except BrokenPipeError:
                # The reader went away (`| head`): not an error; keep Python from complaining at exit.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return 0
    finally:
        store.close()
    if not counted.rows:
        print(f"capcon export: no {args.what} between {iso_when(start)} and {iso_when(end)}", file=sys.stderr)
    return 0


# --- where the rows go -----------------------------------------------------------


class _Counted:
    """The stream rows are written to, and how many made it (for the words when a write fails)."""

    def __init__(self) -> None:
        self.stream: TextIO | None = None
        self.rows = 0


def _rows_words(count: int) -> str:
    return f"{count} row{'' if count == 1 else 's'}"


def _failed_words(counted: _Counted, error: OSError) -> str:
    """A stream that cannot be taken back (standard output, a device): how far it got, at most."""
    return (
        f"write failed at row {counted.rows + 1} or before ({os_error_words(error)}); what it received is incomplete,"
        " not a whole export"
    )


@contextmanager
def _output(path: str, counted: _Counted) -> Iterator[TextIO]:
    """The stream for `path`: standard output, a device or pipe in place, else a temporary file
    beside the target renamed over it at the end. A failing write raises WriteFailed (exit 1)."""
    if path in ("-", ""):
        counted.stream = sys.stdout
        try:
            yield counted.stream
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise WriteFailed(f"standard output: {_failed_words(counted, error)}") from None
        return
    shown = f"--output {path}"
    try:
        with opened_output(path) as file:
            counted.stream = file
            yield file
    except OutputFailed as failed:
        if failed.in_place:  # a device or pipe: what it has is all there is
            raise WriteFailed(f"{shown}: {_failed_words(counted, failed.error)}") from None
        raise WriteFailed(
            f"{shown}: write failed after {_rows_words(counted.rows)} ({failed}); {path} {failed.left}"
        ) from None


def _write(counted: _Counted, form: str, columns: list[str], rows: Iterator[dict]) -> int:
    """Rows to `counted.stream`, as strict JSON lines or csv: a NaN or infinite figure is unknown (null, empty)."""
    out = counted.stream
    assert out is not None, "written inside _output, which opens the stream"
    if form == "csv":
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
            counted.rows += 1
    else:
        for row in rows:
            out.write(json_out.dumps(row, separators=(",", ":"), default=str) + "\n")
            counted.rows += 1
    return counted.rows


def _cell(value: object) -> object:
    """A csv cell: numbers as Python writes them (round-trip exact), maps as JSON, unknown (NaN, ±inf too) as empty."""
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    if isinstance(value, str):
        # Python's csv writer quotes a field holding \n but not one holding a lone \r, which readers then take
        # for a line end: a carriage return in a server's error text is written as a line break (jsonl keeps it).
        return json_out.text(value).replace("\r\n", "\n").replace("\r", "\n")
    if isinstance(value, (dict, list, tuple)):
        return json_out.dumps(value, separators=(",", ":"), sort_keys=True)
    return value


def _iso(at: object) -> str | None:
    """ISO time of a stored moment; None for one no calendar holds (a damaged or foreign row)."""
    try:
        return iso_when(at) if isinstance(at, (int, float)) and math.isfinite(at) else None
    except (OverflowError, OSError, ValueError):
        return None


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


def _samples(store: Store, fleets: list[str], start: float, end: float, form: str) -> Rows:
    from console.store.database import read_histogram

    marks, ids = _fleet_filter(store, fleets)
    read = store.read_columns  # a version-2 file, read without migrating, has fewer
    cols = ", ".join(f"s.{c}" for c in read)
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
        columns += ["requests_by_reason", "kv_usage_by_engine", "kv_capacity_by_engine"] + [
            f"{h}_buckets" for h in HISTOGRAM_COLUMNS
        ]

    def rows() -> Iterator[dict]:
        for query in (rollups, raw):
            # A cursor of its own: rows are read as they are written out.
            for at, fleet, replica, url, resolution, poll_id, *values in store.connection.cursor().execute(
                query, (*ids, start, end)
            ):
                stored = dict(zip(read, values))
                row = {
                    "time": _iso(at),
                    "unix": at,
                    "fleet": fleet,
                    "replica": replica,
                    "url": url,
                    "resolution": resolution,
                    "poll": poll_id,
                }
                for key in (
                    "state",
                    "error",
                    "sampled_at",
                    "start_time",
                    *COUNTER_COLUMNS,
                    "running",
                    "waiting",
                    "kv_usage",
                    "kv_capacity_tokens",
                ):
                    row[key] = json_out.finite(stored[key])
                for name in HISTOGRAM_COLUMNS:
                    histogram = read_histogram(stored[name], store.bounds)
                    row[f"{name}_count"] = histogram.count if histogram else None
                    row[f"{name}_sum"] = histogram.sum if histogram else None
                    if jsonl:
                        row[f"{name}_buckets"] = (
                            {_le(b): c for b, c in zip(histogram.bounds, histogram.counts)} if histogram else None
                        )
                if jsonl:
                    for key in ("requests_by_reason", "kv_usage_by_engine", "kv_capacity_by_engine"):
                        row[key] = json_out.loads(stored[key]) if stored[key] else None
                yield row

    return columns, rows()


# --- flags and events ----------------------------------------------------------

_FLAG_COLUMNS = [
    "time",
    "unix",
    "fleet",
    "change",
    "flag_id",
    "kind",
    "subject",
    "severity",
    "since_time",
    "since",
    "why",
    "todo",
    "figures",
]
_EVENT_COLUMNS = ["time", "unix", "fleet", "kind", "subject", "detail"]


def _flags(store: Store, fleets: list[str], start: float, end: float, form: str) -> Rows:
    chosen = set(fleets)

    def rows() -> Iterator[dict]:
        for event in store.flag_events(None, start, end):
            if event.fleet not in chosen:
                continue
            yield {
                "time": _iso(event.at),
                "unix": event.at,
                "fleet": event.fleet,
                "change": event.change,
                "flag_id": event.flag_id,
                "kind": event.kind,
                "subject": event.subject,
                "severity": event.severity,
                "since_time": _iso(event.since),
                "since": event.since,
                "why": event.why,
                "todo": event.todo,
                "figures": event.figures,
            }

    return _FLAG_COLUMNS, rows()


def event_fleets(fleet: str | None, detail: object) -> list[str]:
    """The fleets an event names: its fleet column, else the "fleets" of its detail (a recording's start and stop)."""
    if fleet:
        return [fleet]
    named = detail.get("fleets") if isinstance(detail, dict) else None
    return [str(name) for name in named] if isinstance(named, list) else []


def _events(store: Store, fleets: list[str], start: float, end: float, form: str) -> Rows:
    chosen = set(fleets)

    def rows() -> Iterator[dict]:
        for event in store.events(start, end):
            named = event_fleets(event.fleet, event.detail)
            if named and not chosen.intersection(named):
                continue  # another fleet's; an event that names no fleet belongs to every export
            yield {
                "time": _iso(event.at),
                "unix": event.at,
                "fleet": ",".join(named) or None,
                "kind": event.kind,
                "subject": event.subject,
                "detail": event.detail,
            }

    return _EVENT_COLUMNS, rows()


# --- figures -----------------------------------------------------------------

_FIGURE_FIELDS = [f for f in Figures.__dataclass_fields__ if f not in ("name", "url")]
_FIGURE_COLUMNS = ["time", "unix", "fleet", "poll", "subject", "url", "window_seconds", "source"] + _FIGURE_FIELDS


def _figures(store: Store, fleets: list[str], start: float, end: float, form: str) -> Rows:
    """Each poll's figures as a replay starting at --from shows them: warmed up on the polls before it, each
    console run (a recorder restart, clean or not) starting from an empty watcher as it did live."""
    from console.bench.estimate import estimate_capacity
    from console.replay.fleet_replay import FleetReplay  # only this export replays
    from console.replay.loader import recorded_fleets

    def replayed(recorded: RecordedFleet) -> Iterator[tuple[float, int, RecordedPoll, FleetFigures]]:
        fleet_replay = FleetReplay(recorded)
        for index in range(recorded.first, recorded.last + 1):
            fleet_replay.go_to(index)
            poll, view = fleet_replay.poll, fleet_replay.view
            if poll is not None and view is not None:  # always, once a recorded poll is fed
                yield poll.at, poll.id, poll, view.figures

    def rows() -> Iterator[dict]:
        # Fleets side by side in time order, as the polls were taken.
        for _, _, poll, figures in merge(
            *(replayed(f) for f in recorded_fleets(store, fleets, start, end, estimate_capacity))
        ):
            for subject, f in ((FLEET_TOTAL, figures.fleet), *((r.name, r) for r in figures.replicas)):
                row = {
                    "time": _iso(poll.at),
                    "unix": poll.at,
                    "fleet": poll.fleet,
                    "poll": poll.id,
                    "subject": subject,
                    "url": f.url,
                    "window_seconds": figures.window_seconds,
                    "source": figures.source,
                }
                for name in _FIGURE_FIELDS:
                    row[name] = getattr(f, name)
                yield row

    return _FIGURE_COLUMNS, rows()
