"""The recording options `capcon watch`, `capcon record` and `capcon demo` share, and opening the recorder.

    add_recording_options(parser, default_on=True)   # --db, --no-record, --keep-raw, --keep-minutes
    path = history_path(args)                        # None: not recording
    recorder = open_recorder(path, args)             # HistoryError (exit 2) for a file that is no history
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from contextlib import contextmanager
from pathlib import Path

from console.errors import UserError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", re.IGNORECASE)
# Shown in --help without importing the store (which `capcon --help` should not load);
# tests check they match console.store.retention.
RAW_DEFAULT = "48h"
MINUTES_DEFAULT = "90d"
CLOSE_TIMEOUT_SECONDS = 5.0  # on exit, queued polls get this long to land; the exit never waits longer


def parse_duration(text: str) -> float:
    """'48h' -> 172800.0; units s, m, h, d, w. A bare number is refused: 48 what?"""
    found = _DURATION.fullmatch(text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration with a unit, like 30m, 48h, 90d or 2w")
    seconds = float(found.group(1)) * UNITS[found.group(2).lower()]
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration longer than zero, like 48h")
    return seconds


def show_duration(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= UNITS[unit] and seconds % UNITS[unit] == 0:
            return f"{seconds / UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def add_recording_options(parser, default_on: bool, offer_no_record: bool = True) -> None:
    """--db and retention; `default_on`: the command records unless --no-record (watch), else only with --db (demo)."""
    group = parser.add_argument_group("recording (the history file: replay, history, export read it)")
    if default_on:
        group.add_argument("--db", metavar="PATH", help="history file to record to (default: history.sqlite in the user's data directory, "
                           "e.g. ~/.local/share/capcon/)")
        if offer_no_record:
            group.add_argument("--no-record", action="store_true", help="do not record this session")
    else:
        group.add_argument("--db", metavar="PATH", help="record to this history file (off unless given)")
    group.add_argument("--keep-raw", type=parse_duration, default=None, metavar="DURATION",
                       help=f"keep every raw sample this long, then only one-minute rollups (default {RAW_DEFAULT}; units s m h d w)")
    group.add_argument("--keep-minutes", type=parse_duration, default=None, metavar="DURATION",
                       help=f"keep the one-minute rollups this long (default {MINUTES_DEFAULT})")


def retention_of(args):
    """The Retention the options ask for (console.store.retention.Retention)."""
    from console.store.retention import MINUTES_SECONDS, RAW_SECONDS, Retention  # noqa: PLC0415 - see RAW_DEFAULT

    raw = args.keep_raw if args.keep_raw is not None else RAW_SECONDS
    minutes = args.keep_minutes if args.keep_minutes is not None else MINUTES_SECONDS
    if minutes < raw:
        raise UserError(
            f"--keep-minutes {show_duration(minutes)}: shorter than --keep-raw {show_duration(raw)}; "
            "expected the one-minute rollups to be kept at least as long as the raw samples"
        )
    return Retention(raw_seconds=raw, minutes_seconds=minutes)


def history_path(args, default_on: bool = True) -> Path | None:
    """The file this run records to, or None. `watch --once` records only with an explicit --db."""
    if getattr(args, "no_record", False):
        if args.db:
            raise UserError("--db with --no-record: expected one of them")
        return None
    if args.db:
        return Path(args.db).expanduser()
    if not default_on or getattr(args, "once", False):
        return None
    from console.store.paths import default_history_path  # noqa: PLC0415 - platformdirs only when recording

    return default_history_path()


def open_recorder(path: Path, args, on_change=None):
    """A started-later Recorder on `path`; a file that is no capcon history raises HistoryError (exit 2)."""
    retention = retention_of(args)
    from console.store.recorder import Recorder  # noqa: PLC0415 - sqlite only when recording

    return Recorder(path, retention, on_change=on_change)


@contextmanager
def recording(path: Path | None, args, handles, verb: str):
    """A started recorder for the `handles` (None when `path` is None), closed (bounded) on the way out."""
    if path is None:
        yield None
        return
    recorder = open_recorder(path, args)
    recorder.start(detail={"command": verb, "fleets": [handle.name for handle in handles], "interval": args.interval})
    try:
        yield recorder
    finally:
        close_recorder(recorder, verb)


def close_recorder(recorder, verb: str) -> None:
    """Close within CLOSE_TIMEOUT_SECONDS; polls that could not be written are said, not silently lost."""
    status = recorder.close(CLOSE_TIMEOUT_SECONDS)
    lost = []
    if status.waiting:
        lost.append(f"{status.waiting} polls not written")
    if status.dropped:
        lost.append(f"{status.dropped} polls dropped while the file refused writes")
    if lost:
        print(f"capcon {verb}: history {status.path}: {'; '.join(lost)}", file=sys.stderr)
