"""The recording options `capcon watch`, `capcon record` and `capcon demo` share, and opening the recorder.

    add_recording_options(parser, default_on=True)   # --db, --no-record, --keep-raw, --keep-minutes
    path = history_path(args)                        # None: not recording
    recorder = open_recorder(path, args)             # HistoryError (exit 2) for a file that is no history

Retention: without --keep-* a recorder keeps what the file already keeps (a `capcon record
--keep-raw 7d` on the bastion is not undone by an on-call's `capcon watch`); the defaults
apply to a new file. Only an explicit option changes the file's retention.

One writer per fleet and file: a fleet another live process records into the file is refused by
`capcon record` (exit 2) and left unrecorded by `capcon watch` / `capcon demo` (the header says
which pid records it), so two writers never interleave one fleet's polls.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from console.errors import UserError
from console.when import parse_duration, show_duration

if TYPE_CHECKING:
    from console.store.recorder import Recorder, RecorderStatus
    from console.store.retention import Retention

# Shown in --help without importing the store (which `capcon --help` should not load);
# tests check they match console.store.retention.
RAW_DEFAULT = "48h"
MINUTES_DEFAULT = "90d"
CLOSE_TIMEOUT_SECONDS = 5.0  # on exit, queued polls get this long to land; the exit never waits longer


def polls(count: int) -> str:
    return f"{count} poll{'' if count == 1 else 's'}"


def add_recording_options(parser: argparse.ArgumentParser, default_on: bool, offer_no_record: bool = True) -> None:
    """--db and retention; `default_on`: the command records unless --no-record (watch), else only with --db (demo)."""
    group = parser.add_argument_group("recording (the history file: replay, history, export read it)")
    if default_on:
        group.add_argument(
            "--db",
            metavar="PATH",
            help="history file to record to (default: history.sqlite in the user's data directory, "
            "e.g. ~/.local/share/capcon/)",
        )
        if offer_no_record:
            group.add_argument("--no-record", action="store_true", help="do not record this session")
    else:
        group.add_argument("--db", metavar="PATH", help="record to this history file (off unless given)")
    group.add_argument(
        "--keep-raw",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help="keep every raw sample this long, then only one-minute rollups (default: what the file already keeps; "
        f"{RAW_DEFAULT} for a new file; units s m h d w)",
    )
    group.add_argument(
        "--keep-minutes",
        type=parse_duration,
        default=None,
        metavar="DURATION",
        help=f"keep the one-minute rollups this long (default: what the file already keeps; {MINUTES_DEFAULT} for a new file)",
    )


def retention_of(args: argparse.Namespace, kept: Retention | None = None) -> Retention | None:
    """The Retention the options ask for (console.store.retention.Retention), None without --keep-*:
    the file's own. An option given alone takes the other from `kept` (the file's) or the defaults."""
    from console.store.retention import MINUTES_SECONDS, RAW_SECONDS, Retention  # see RAW_DEFAULT

    if args.keep_raw is None and args.keep_minutes is None:
        return None
    raw = args.keep_raw if args.keep_raw is not None else (kept.raw_seconds if kept else RAW_SECONDS)
    minutes = (
        args.keep_minutes if args.keep_minutes is not None else (kept.minutes_seconds if kept else MINUTES_SECONDS)
    )
    if args.keep_minutes is None and minutes < raw:
        minutes = raw  # --keep-raw alone beyond the rollups' span: the rollups follow it
    if minutes < raw:
        raise UserError(
            f"--keep-minutes {show_duration(minutes)}: shorter than --keep-raw {show_duration(raw)}; "
            "expected the one-minute rollups to be kept at least as long as the raw samples"
        )
    return Retention(raw_seconds=raw, minutes_seconds=minutes)


def history_path(args: argparse.Namespace, default_on: bool = True) -> Path | None:
    """The file this run records to, or None. `watch --once` records only with an explicit --db."""
    if getattr(args, "no_record", False):
        if args.db:
            raise UserError("--db with --no-record: expected one of them")
        return None
    if args.db:
        path = Path(args.db).expanduser()
        # An explicit path in a folder that is not there is most likely a typo: a history
        # started somewhere unexpected is worse than a refusal. The default folder is created.
        if not path.parent.is_dir() and not path.parent.exists():
            raise UserError(f"--db {args.db}: folder {path.parent} does not exist; expected an existing folder")
        return path
    if not default_on or getattr(args, "once", False):
        return None
    from console.store.paths import default_history_path

    return default_history_path()


def open_recorder(
    path: Path, args: argparse.Namespace, on_change: Callable[[RecorderStatus], None] | None = None
) -> Recorder:
    """A started-later Recorder on `path`; a file that is no capcon history raises HistoryError (exit 2).

    Without --keep-* it keeps what the file keeps; `say_shortened(recorder, verb)` says when the options cut that."""
    from console.store.recorder import Recorder

    recorder = Recorder(path, None, on_change=on_change)
    try:
        wanted = retention_of(args, recorder.stored_retention)
    except UserError:
        recorder.close(0)
        raise
    if wanted is not None:
        recorder.set_retention(wanted)
    return recorder


def retention_words(recorder: Recorder) -> str:
    """ "raw 7d, rollups 90d" and, when the options keep less than the file kept, what it kept."""
    kept, now = recorder.stored_retention, recorder.retention
    words = f"raw {show_duration(now.raw_seconds)}, rollups {show_duration(now.minutes_seconds)}"
    if shortened(recorder) and kept is not None:
        words += (
            f" (shortened: the file kept raw {show_duration(kept.raw_seconds)},"
            f" rollups {show_duration(kept.minutes_seconds)})"
        )
    return words


def shortened(recorder: Recorder) -> bool:
    kept, now = recorder.stored_retention, recorder.retention
    return bool(
        recorder.retention_explicit
        and kept is not None
        and (now.raw_seconds < kept.raw_seconds or now.minutes_seconds < kept.minutes_seconds)
    )


def say_shortened(recorder: Recorder, verb: str) -> None:
    if shortened(recorder):
        print(
            f"capcon {verb}: history {recorder.path}: keeping {retention_words(recorder)}", file=sys.stderr, flush=True
        )


@contextmanager
def _sigint_gives_up(recorder: Recorder) -> Iterator[None]:
    """Ctrl+C during the close ends the wait (what is queued is counted) instead of a traceback.
    Left alone when the caller already handles SIGINT (`capcon record`), or off the main thread."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, frame: recorder.give_up())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Named(Protocol):
    """What a recording needs of a fleet: its name (a FleetHandle, or the demo's fleet before its handle exists)."""

    @property
    def name(self) -> str: ...


@contextmanager
def recording(
    path: Path | None, args: argparse.Namespace, handles: Sequence[Named], verb: str
) -> Iterator[Recorder | None]:
    """A started recorder for the `handles` (None when `path` is None), closed (bounded) on the way out.

    A fleet another live process records into the file is left out (watch and demo go on without
    recording it; the header says which pid records it; with an explicit --db a stderr line too)."""
    if path is None:
        yield None
        return
    recorder = open_recorder(path, args)
    say_shortened(recorder, verb)
    fleets = [handle.name for handle in handles]
    taken = recorder.other_writers(fleets)
    if taken:
        recorder.leave_out(taken, fleets)
        if args.db:
            for writer in taken.values():
                print(
                    f"capcon {verb}: {writer.words(str(path))}; not recording it in this session",
                    file=sys.stderr,
                    flush=True,
                )
    mine = [name for name in fleets if name not in taken]
    if mine:
        recorder.start(detail={"command": verb, "fleets": mine, "interval": args.interval})
    try:
        yield recorder
    finally:
        close_recorder(recorder, verb)


def close_recorder(recorder: Recorder, verb: str, give_up: str = "Ctrl+C gives up") -> None:
    """Close within CLOSE_TIMEOUT_SECONDS; polls that could not be written are said, not silently lost.

    While the file refuses writes the wait is said at once (the terminal is not left blank), and
    Ctrl+C ends it (unless the caller handles SIGINT itself and says so in `give_up`)."""

    def say_wait(waiting: int, seconds: float) -> None:
        print(
            f"capcon {verb}: writing {waiting} queued poll{'' if waiting == 1 else 's'} to {recorder.path}; waiting up to {math.ceil(seconds)} s"
            f" for the file ({give_up})",
            file=sys.stderr,
            flush=True,
        )

    with _sigint_gives_up(recorder):
        status = recorder.close(CLOSE_TIMEOUT_SECONDS, on_wait=say_wait)
    lost = []
    if status.waiting:
        lost.append(f"{polls(status.waiting)} not written")
    if status.dropped:
        lost.append(f"{polls(status.dropped)} dropped while the file refused writes")
    unstored = getattr(status, "unstored", 0)
    if unstored:
        lost.append(f"{polls(unstored)} could not be stored (see the error above)")
    if lost:
        print(f"capcon {verb}: history {status.path}: {'; '.join(lost)}", file=sys.stderr)
