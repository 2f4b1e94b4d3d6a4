"""The history file: one SQLite database in WAL mode, read and written through sqlite-utils.

A writer (the recorder's thread) and any number of readers (replay, history,
export, a second console) can use one file at once: WAL lets readers see the last
committed poll while the writer adds the next. Each poll is one transaction, so a
recorder killed mid-write loses at most that poll.

    store = Store.open(path)                  # creates or migrates the file
    store.write_poll(record)                  # one transaction
    store = Store.open(path, read_only=True)  # a reader; never creates or migrates

Hostile input stops here: a writer refuses a damaged file (PRAGMA quick_check, DamagedHistory);
a NaN or infinite figure is stored as unknown (NULL), text that is not UTF-8 with its odd bytes as
`\\xNN`, a poll without a usable time is refused whole (UnstorableRecord); readers get back only
finite figures, whatever an older capcon left in the file, and `reading_errors` turns an SQLite
error met while reading into one line.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlite_utils

from console.errors import UserError
from console.metrics.figures import FleetFigures
from console.metrics.vllm import Histogram, ReplicaSample
from console.plan.model import Plan
from console.redact import redact
from console.store import codec, json_out
from console.store.checkpoints import CheckpointWriter, rules_digest
from console.store.json_out import finite, text
from console.store.records import Event, FlagChange, FlagEvent, FleetInfo, PlanVersion, PollRecord, RecordedPoll
from console.store.schema import (
    COUNTER_COLUMNS,
    HISTOGRAM_COLUMNS,
    OLDEST_READABLE,
    SCHEMA_VERSION,
    SchemaError,
    migrate,
    version,
)
from console.targets import TargetResult

BUSY_TIMEOUT_MS = 2000  # a writer waits this long for another writer's lock before reporting "locked"
# Opening for writing checks the whole file for damage (PRAGMA quick_check: every page read once)
# for at most this long; a bigger file's check is finished by the recorder's thread before its
# first write (`Store.unchecked`). Measured on a 1 GB history: 1.2 s from the page cache, 15 s
# from a cold disk (67 MB/s). quick_check(N) would not bound it: N caps the errors listed, not the pages read.
CHECK_SECONDS = 1.0
# Times a history can hold: 1970 to 9999, what every reader can show as a date.
LATEST_TIME = 253402300799.0


class HistoryError(UserError):
    """A history file that cannot be opened or read: the message says which and why."""


class DamagedHistory(HistoryError):
    """SQLite found the file damaged (a page overwritten, cut short): never written to, never half-read."""


class UnstorableRecord(ValueError):
    """A poll or event that can never be stored (an impossible time): counted and reported, not retried."""


def plan_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json(value: object) -> str | None:
    """A map or list as stored JSON: strict (no NaN, no Infinity: such entries are left out), valid UTF-8."""
    value = json_out.stored(value) if value else value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False) if value else None


def _time(value: object, what: str) -> float:
    """A time the file must hold (NOT NULL, and shown as a date by every reader)."""
    if not isinstance(value, (int, float)) or not (0.0 <= value <= LATEST_TIME):  # NaN fails both comparisons
        raise UnstorableRecord(f"{what} {value!r} is not a time between 1970 and 9999")
    return float(value)


def _number(value: object, what: str) -> float:
    """A figure the file must hold (NOT NULL): a finite number."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UnstorableRecord(f"{what} {value!r} is not a finite number")
    return value


def _text(value: str | None) -> str | None:
    return text(value) if isinstance(value, str) else value


def damaged_words(path: str, found: str) -> str:
    """One line: which file is damaged, what SQLite found, and how to save what can still be read."""
    quoted = shlex.quote(str(path))
    found = " ".join(found.split())[:200]
    return (
        f"{path}: the history file is damaged ({found}); expected an undamaged file: copy what can still be read"
        f" with `capcon history --db {quoted} --salvage NEW` (or SQLite's `sqlite3 {quoted} .recover`), then use --db NEW"
    )


def is_damage(error: BaseException) -> bool:
    """Whether an SQLite error says the file's content is damaged (not locked, not full, not unwritable)."""
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_CORRUPT:
        return True
    return "malformed" in str(error).lower() or isinstance(error, codec.CodecError)


@contextmanager
def reading_errors(path: str) -> Iterator[None]:
    """A history that fails while it is read (a damaged page, a blob that does not decode) is one line
    naming the file and what to do (HistoryError: exit 2), never a traceback: `history`, `export`, `replay`."""
    try:
        yield
    except (sqlite3.Error, codec.CodecError) as error:
        if is_damage(error):
            raise DamagedHistory(damaged_words(path, str(error))) from None
        raise HistoryError(f"{path}: cannot be read (SQLite: {error}); expected a readable history file") from None


class Unfinished(Exception):
    """The damage check ran out of its time budget before reading the whole file."""


def quick_check(connection: sqlite3.Connection, seconds: float | None = None) -> str | None:
    """None when SQLite's quick_check finds the file whole, else its words; Unfinished past `seconds`.

    Bounded by sqlite3_interrupt from a timer: the progress handler is not called while SQLite walks a
    b-tree (one VM instruction for the whole file), so it could not stop a check reading a cold disk."""
    timer = None
    if seconds is not None and seconds <= 0:
        raise Unfinished()  # no time now: all of it later (Store.finish_check)
    guard = threading.Lock()
    running = [True]
    if seconds is not None:

        def stop() -> None:
            with guard:
                if running[0]:
                    connection.interrupt()

        timer = threading.Timer(max(seconds, 0.0), stop)
        timer.daemon = True
        timer.start()
    try:
        rows = connection.execute("PRAGMA quick_check").fetchall()
    except sqlite3.OperationalError as error:
        if "interrupt" in str(error):
            raise Unfinished() from None
        if is_damage(error):
            return str(error)
        raise
    except sqlite3.DatabaseError as error:
        return str(error)  # damaged so badly the check itself stops
    finally:
        if timer is not None:
            with guard:
                running[0] = False
            timer.cancel()
    found = [str(row[0]) for row in rows if not str(row[0]).startswith("*** in database")]
    if found == ["ok"]:
        return None
    return "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")


class Store:
    def __init__(self, connection: sqlite3.Connection, path: str, read_only: bool) -> None:
        self.connection = connection
        self.unchecked = False  # a writer whose damage check ran past CHECK_SECONDS: see `finish_check`
        self.version = version(connection)
        # The sample columns this file has (a version-2 file, read without migrating, lacks the page shapes).
        self.read_columns = SAMPLE_READ_COLUMNS if self.version >= 3 else SAMPLE_READ_COLUMNS_V2
        self.db = sqlite_utils.Database(connection)
        self.path = path
        self.read_only = read_only
        self._fleets: dict[str, int] = {}
        self._replicas: dict[tuple[int, str], int] = {}
        self._layouts: dict[tuple[float, ...], int] = {}
        self._bounds: dict[int, tuple[float, ...]] = {}
        self._plans: dict[str, int] = {}
        self._shapes: dict[tuple, int] = {}
        self._shape_rows: dict[int, tuple] = {}
        self._replica_names: dict[int, tuple[str, str]] = {}
        self._fleet_names: dict[int, str] = {}
        self._checkpoints = CheckpointWriter()

    # --- opening -------------------------------------------------------------

    @classmethod
    def open(
        cls, path: str | Path, read_only: bool = False, create: bool = True, check_seconds: float | None = CHECK_SECONDS
    ) -> Store:
        """Open (and for a writer, create or migrate) the history at `path`; HistoryError says what is wrong.

        A writer first checks the file for damage (DamagedHistory: never written to) for at most
        `check_seconds`; past that the store is `unchecked` until `finish_check` (the recorder's thread
        does it before its first write). None: no check at all (a file this process found whole already)."""
        shown = str(path)
        target = Path(path)
        if read_only or not create:
            if not target.exists():
                raise HistoryError(
                    f"{shown}: no such history file; expected a file written by `capcon watch` or `capcon record`"
                )
        elif not target.parent.exists():
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise HistoryError(f"{shown}: cannot create its directory ({error.strerror})") from None
        if target.is_dir():
            raise HistoryError(f"{shown}: is a directory; expected a history file")
        connection, unchecked = None, False
        try:
            if read_only:
                connection = _open_read_only(target)
            else:
                connection = sqlite3.connect(str(target), check_same_thread=False, isolation_level=None)
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            found = version(connection)
            if read_only:
                if found == 0:
                    raise SchemaError(
                        "not a capcon history (no history tables); expected a file written by `capcon watch` or `capcon record`"
                    )
                if found > SCHEMA_VERSION:
                    raise SchemaError(
                        f"written by a newer capcon (history schema {found}); expected at most {SCHEMA_VERSION}"
                    )
                if found < OLDEST_READABLE:
                    raise SchemaError(
                        f"history schema {found} is older than this capcon's ({SCHEMA_VERSION}); "
                        "open it once with `capcon record --db` or `capcon watch --db` to migrate it"
                    )
            else:
                if check_seconds is not None and found:  # a new or empty file has nothing to check
                    try:
                        damage = quick_check(connection, check_seconds)
                    except Unfinished:
                        unchecked = True
                    else:
                        if damage is not None:
                            raise DamagedHistory(damaged_words(shown, damage))
                connection.execute("PRAGMA journal_mode = WAL")
                # WAL + NORMAL: a crash of this process loses nothing committed; power loss at most the last polls.
                connection.execute("PRAGMA synchronous = NORMAL")
                migrate(connection)
        except HistoryError:
            _close(connection)
            raise
        except sqlite3.DatabaseError as error:
            _close(connection)
            if is_damage(error):
                raise DamagedHistory(damaged_words(shown, str(error))) from None
            raise HistoryError(f"{shown}: {_sqlite_words(error)}; expected a capcon history file") from None
        except SchemaError as error:
            _close(connection)
            raise HistoryError(f"{shown}: {error}") from None
        store = cls(connection, shown, read_only)
        store.unchecked = unchecked
        return store

    def finish_check(self) -> None:
        """The damage check a big file's opening left unfinished (no time limit; `connection.interrupt()` stops it).

        Raises DamagedHistory; Unfinished when interrupted."""
        if not self.unchecked:
            return
        damage = quick_check(self.connection, None)
        self.unchecked = False
        if damage is not None:
            raise DamagedHistory(damaged_words(self.path, damage))

    def close(self) -> None:
        self.connection.close()

    # --- writing -------------------------------------------------------------

    def write_poll(self, record: PollRecord) -> int:
        """Store one poll (its samples, plan version and flag changes) in one transaction; returns its id.

        What is stored is what every reader can read back: a figure that is NaN or infinite is stored
        as unknown (NULL), text that is not valid UTF-8 with its odd bytes as `\\xNN`. A poll without
        a time or window a reader could use raises UnstorableRecord before the file is touched."""
        at = _time(record.at, "poll time")
        watched_at = _time(record.watched_at, "watcher time")
        window = _number(record.window_seconds, "window")
        interval = _number(record.interval_seconds, "interval")
        figures = None
        if record.results is None and record.figures is not None:
            figures = json.dumps(json_out.stored(record.figures.to_json()), separators=(",", ":"), allow_nan=False)
        flag_rows = [self._flag_row(change, at) for change in record.flag_changes]
        with self._transaction():
            fleet_id = self._fleet_id(record.fleet, at)
            plan_id = self._plan_id(record.plan, at) if record.plan is not None else None
            cursor = self.connection.execute(
                "INSERT INTO polls (fleet_id, at, watched_at, plan_id, source, window_seconds, interval_seconds, source_error, figures, plan_clock)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fleet_id,
                    at,
                    watched_at,
                    plan_id,
                    text(record.source),
                    window,
                    interval,
                    _text(record.source_error) or None,
                    figures,
                    finite(record.plan_clock),
                ),
            )
            poll_id = _inserted_id(cursor)
            if record.results:
                rows = [self._sample_row(poll_id, fleet_id, result) for result in record.results]
                self.db.table("samples").insert_all(rows, replace=True)  # the same URL twice in one poll: the last wins
            for row in flag_rows:
                self.connection.execute(
                    "INSERT INTO flag_events (fleet_id, poll_id, at, change, flag_id, kind, subject, severity, since, why, todo, figures)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (fleet_id, poll_id, *row),
                )
            checkpoint = self._write_checkpoint(fleet_id, poll_id, at, record)
        if checkpoint and record.state is not None:
            self._checkpoints.written(fleet_id, poll_id, record.state)
        return poll_id

    def _write_checkpoint(self, fleet_id: int, poll_id: int, at: float, record: PollRecord) -> bool:
        """A replay checkpoint with the poll, when the record carries the console's state (and it can be named)."""
        self._checkpoints.seen(fleet_id, poll_id, record)
        if record.state is None:
            return False
        blob = self._checkpoints.encode(fleet_id, poll_id, record.state)
        if blob is None:
            return False
        self.connection.execute(
            "INSERT INTO checkpoints (poll_id, fleet_id, at, format, state) VALUES (?, ?, ?, ?, ?)",
            (poll_id, fleet_id, at, rules_digest(), blob),
        )
        return True

    @staticmethod
    def _flag_row(change: FlagChange, at: float) -> tuple[object, ...]:
        flag = change.flag
        since = finite(flag.since)
        return (
            at,
            text(change.change),
            text(flag.id),
            text(flag.kind),
            text(flag.subject),
            text(flag.severity),
            since if isinstance(since, (int, float)) else at,  # a flag's start is known: at the latest, now
            _text(flag.why),
            _text(flag.todo),
            _json(change.figures.to_json()) if change.figures else None,
        )

    def write_event(
        self, at: float, kind: str, fleet: str | None = None, subject: str | None = None, detail: dict | None = None
    ) -> None:
        """An event beside the polls: recording started or stopped, a policy switched (the overflow console), ..."""
        at = _time(at, "event time")
        with self._transaction():
            fleet_id = self._fleet_id(fleet, at) if fleet is not None else None
            self.connection.execute(
                "INSERT INTO events (at, fleet_id, kind, subject, detail) VALUES (?, ?, ?, ?, ?)",
                (at, fleet_id, text(kind), _text(subject), _json(detail)),
            )

    def _transaction(self) -> _Transaction:
        # isolation_level=None: transactions are explicit. IMMEDIATE takes the write lock up front,
        # so "locked" is reported at BEGIN, never halfway through a poll.
        return _Transaction(self.connection, self._forget_ids)

    def _forget_ids(self) -> None:
        # Ids cached inside a rolled-back transaction no longer exist in the file.
        for cache in (
            self._fleets,
            self._replicas,
            self._layouts,
            self._bounds,
            self._plans,
            self._shapes,
            self._shape_rows,
        ):
            cache.clear()

    def _fleet_id(self, name: str, at: float) -> int:
        name = text(name)
        found = self._fleets.get(name)
        if found is None:
            row = self.connection.execute("SELECT id FROM fleets WHERE name = ?", (name,)).fetchone()
            if row is None:
                row = (
                    self.connection.execute(
                        "INSERT INTO fleets (name, created_at) VALUES (?, ?)", (name, at)
                    ).lastrowid,
                )
            found = self._fleets[name] = row[0]
        return found

    def _replica_id(self, fleet_id: int, name: str, url: str) -> int:
        name, url = text(name), text(url)
        key = (fleet_id, url)
        found = self._replicas.get(key)
        if found is None:
            row = self.connection.execute(
                "SELECT id, name FROM replicas WHERE fleet_id = ? AND url = ?", (fleet_id, url)
            ).fetchone()
            if row is None:
                row = (
                    self.connection.execute(
                        "INSERT INTO replicas (fleet_id, name, url) VALUES (?, ?, ?)", (fleet_id, name, url)
                    ).lastrowid,
                    name,
                )
            elif row[1] != name:
                self.connection.execute("UPDATE replicas SET name = ? WHERE id = ?", (name, row[0]))
            found = self._replicas[key] = row[0]
        return found

    def _layout_id(self, bounds: tuple[float, ...]) -> int:
        found = self._layouts.get(bounds)
        if found is None:
            text = codec.bounds_text(bounds)
            row = self.connection.execute("SELECT id FROM bucket_layouts WHERE bounds = ?", (text,)).fetchone()
            if row is None:
                row = (self.connection.execute("INSERT INTO bucket_layouts (bounds) VALUES (?)", (text,)).lastrowid,)
            found = self._layouts[bounds] = row[0]
            self._bounds[found] = bounds
        return found

    def _plan_id(self, plan: Plan, at: float) -> int:
        # The plan as written, less its secrets: a target's `user:password@` or `?token=` never reaches the file.
        source = text(redact(plan.source_text or ""))
        digest = plan_hash(source)
        found = self._plans.get(digest)
        if found is None:
            row = self.connection.execute("SELECT id FROM plans WHERE hash = ?", (digest,)).fetchone()
            if row is None:
                row = (
                    self.connection.execute(
                        "INSERT INTO plans (hash, name, path, text, first_seen) VALUES (?, ?, ?, ?, ?)",
                        (
                            digest,
                            text(plan.name),
                            _text(str(plan.source_path)) if plan.source_path else None,
                            source,
                            at,
                        ),
                    ).lastrowid,
                )
            found = self._plans[digest] = row[0]
        return found

    def _sample_row(self, poll_id: int, fleet_id: int, result: TargetResult) -> dict:
        fetched_at = finite(result.fetched_at)
        row = {
            "poll_id": poll_id,
            "replica_id": self._replica_id(fleet_id, result.name, result.url),
            "state": text(result.state),
            "error": _text(result.error) or None,
            # NOT NULL: a fetch time nobody could take is the poll's own.
            "fetched_at": fetched_at if isinstance(fetched_at, (int, float)) else self._poll_at(poll_id),
        }
        sample = result.sample
        if sample is None:
            return row
        row.update(sample_columns(sample, self._layout_id, self._shape_id if self.version >= 3 else None))
        return row

    def _shape_id(self, sample: ReplicaSample) -> int | None:
        """The page shape (model and engine labels, series per figure) a sample's page had, stored once."""
        models, engines = tuple(getattr(sample, "model_names", ()) or ()), tuple(getattr(sample, "engines", ()) or ())
        series = getattr(sample, "shape", None) or {}
        if not (models or engines or series):
            return None
        key = (models, engines, tuple(sorted(series.items())))
        found = self._shapes.get(key)
        if found is None:
            shape = json.dumps(
                json_out.stored({"models": list(models), "engines": list(engines), "series": dict(series)}),
                separators=(",", ":"),
                sort_keys=True,
                allow_nan=False,
            )
            row = self.connection.execute("SELECT id FROM page_shapes WHERE shape = ?", (shape,)).fetchone()
            if row is None:
                row = (self.connection.execute("INSERT INTO page_shapes (shape) VALUES (?)", (shape,)).lastrowid,)
            found = self._shapes[key] = row[0]
        return found

    def shape(self, shape_id: int) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, int]]:
        """(model names, engine labels, series per figure) of a stored page shape."""
        found = self._shape_rows.get(shape_id)
        if found is None:
            row = self.connection.execute("SELECT shape FROM page_shapes WHERE id = ?", (shape_id,)).fetchone()
            data = json_out.loads(row[0]) if row else {}
            data = data if isinstance(data, dict) else {}
            series = data.get("series")
            series = series if isinstance(series, dict) else {}
            found = self._shape_rows[shape_id] = (
                tuple(str(m) for m in data.get("models") or ()),
                tuple(str(e) for e in data.get("engines") or ()),
                {str(k): int(v) for k, v in series.items() if isinstance(v, int)},
            )
        return found

    def _poll_at(self, poll_id: int) -> float:
        return self.connection.execute("SELECT at FROM polls WHERE id = ?", (poll_id,)).fetchone()[0]

    # --- reading -------------------------------------------------------------

    def fleets(self) -> list[FleetInfo]:
        rows = self.connection.execute(
            "SELECT f.id, f.name, min(p.at), max(p.at), count(p.id) FROM fleets f LEFT JOIN polls p ON p.fleet_id = f.id"
            " GROUP BY f.id ORDER BY f.id"
        ).fetchall()
        return [FleetInfo(*row) for row in rows]

    def fleet_id(self, name: str) -> int | None:
        row = self.connection.execute("SELECT id FROM fleets WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def poll_times(self, fleet: str, start: float | None = None, end: float | None = None) -> list[tuple[int, float]]:
        """(poll id, at) of a fleet's polls in [start, end], oldest first."""
        fleet_id = self.fleet_id(fleet)
        if fleet_id is None:
            return []
        return self.connection.execute(
            "SELECT id, at FROM polls WHERE fleet_id = ? AND at >= ? AND at <= ? ORDER BY at, id",
            (fleet_id, start if start is not None else float("-inf"), end if end is not None else float("inf")),
        ).fetchall()

    def poll(self, poll_id: int) -> RecordedPoll:
        row = self.connection.execute(
            "SELECT p.id, f.name, p.at, p.watched_at, p.source, p.window_seconds, p.interval_seconds, p.source_error, p.plan_id, p.figures, p.plan_clock"
            " FROM polls p JOIN fleets f ON f.id = p.fleet_id WHERE p.id = ?",
            (poll_id,),
        ).fetchone()
        if row is None:
            raise KeyError(poll_id)
        found, fleet, at, watched_at, source, window, interval, source_error, plan_id, figures_json, plan_clock = row
        figures_map = _json_map(figures_json)
        figures = FleetFigures.from_json(figures_map) if figures_map is not None else None
        results = None if figures is not None else tuple(self._results(poll_id))
        return RecordedPoll(
            found,
            fleet,
            at,
            watched_at,
            source,
            window,
            interval,
            source_error or "",
            plan_id,
            results,
            figures,
            plan_clock,
        )

    def _results(self, poll_id: int) -> Iterator[TargetResult]:
        # Replica ids grow in the order replicas were first seen: the source's order.
        columns = self.read_columns
        cursor = self.connection.execute(
            f"SELECT replica_id, {', '.join(columns)} FROM samples WHERE poll_id = ? ORDER BY replica_id",
            (poll_id,),
        )
        for replica_id, *values in cursor:
            name, url = self._replica(replica_id)
            yield result_from_row(name, url, dict(zip(columns, values)), self.bounds, self.shape)

    def _replica(self, replica_id: int) -> tuple[str, str]:
        found = self._replica_names.get(replica_id)
        if found is None:
            found = self._replica_names[replica_id] = self.connection.execute(
                "SELECT name, url FROM replicas WHERE id = ?", (replica_id,)
            ).fetchone()
        return found

    def bounds(self, layout_id: int) -> tuple[float, ...]:
        found = self._bounds.get(layout_id)
        if found is None:
            row = self.connection.execute("SELECT bounds FROM bucket_layouts WHERE id = ?", (layout_id,)).fetchone()
            if row is None:
                raise codec.CodecError(f"bucket layout {layout_id} is missing")
            found = self._bounds[layout_id] = codec.bounds_from_text(row[0])
        return found

    def plan_version(self, plan_id: int) -> PlanVersion | None:
        row = self.connection.execute(
            "SELECT id, hash, name, path, text, first_seen FROM plans WHERE id = ?", (plan_id,)
        ).fetchone()
        return PlanVersion(*row) if row else None

    def flag_events(
        self, fleet: str | None = None, start: float | None = None, end: float | None = None
    ) -> list[FlagEvent]:
        rows = self.connection.execute(
            "SELECT f.name, e.at, e.change, e.flag_id, e.kind, e.subject, e.severity, e.since, e.why, e.todo, e.figures"
            " FROM flag_events e JOIN fleets f ON f.id = e.fleet_id"
            " WHERE (? IS NULL OR f.name = ?) AND e.at >= ? AND e.at <= ? ORDER BY e.at, e.id",
            (fleet, fleet, _low(start), _high(end)),
        ).fetchall()
        return [
            FlagEvent(
                fleet, at, change, flag_id, kind, subject, severity, since, why or "", todo or "", _json_map(figures)
            )
            for fleet, at, change, flag_id, kind, subject, severity, since, why, todo, figures in rows
        ]

    def events(self, start: float | None = None, end: float | None = None) -> list[Event]:
        rows = self.connection.execute(
            "SELECT e.at, f.name, e.kind, e.subject, e.detail FROM events e LEFT JOIN fleets f ON f.id = e.fleet_id"
            " WHERE e.at >= ? AND e.at <= ? ORDER BY e.at, e.id",
            (_low(start), _high(end)),
        ).fetchall()
        return [Event(at, fleet, kind, subject, _json_map(detail)) for at, fleet, kind, subject, detail in rows]

    def setting(self, key: str) -> str | None:
        row = self.connection.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_setting(self, key: str, value: str) -> None:
        with self._transaction():
            self.connection.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))


SAMPLE_READ_COLUMNS_V2 = (
    "state",
    "error",
    "fetched_at",
    "sampled_at",
    "start_time",
    *COUNTER_COLUMNS,
    "requests_by_reason",
    "running",
    "waiting",
    "kv_usage",
    "kv_usage_by_engine",
    "kv_capacity_tokens",
    "kv_capacity_by_engine",
    *HISTOGRAM_COLUMNS,
)
SAMPLE_READ_COLUMNS = (*SAMPLE_READ_COLUMNS_V2, "shape_id", "doubtful")


def sample_columns(
    sample: ReplicaSample,
    layout_id: Callable[[tuple[float, ...]], int],
    shape_id: Callable[[ReplicaSample], int | None] | None = None,
) -> dict[str, object]:
    """A sample's columns: counters and gauges as numbers, per-engine maps as JSON only when not one engine "0".

    A NaN or infinite figure is stored as unknown (NULL; left out of a map); a histogram holding
    one is stored as no histogram (its sum alone: as a missing sum)."""
    row: dict[str, object] = {"sampled_at": finite(sample.at), "start_time": finite(sample.start_time)}
    for name in COUNTER_COLUMNS:
        row[name] = finite(sample.counters.get(name))
    row["requests_by_reason"] = _json(dict(sample.requests_by_reason))
    row["running"] = finite(sample.running)
    row["waiting"] = finite(sample.waiting)
    usage = _finite_map(sample.kv_usage_by_engine)
    row["kv_usage"] = max(usage.values()) if usage else None
    row["kv_usage_by_engine"] = _json(usage) if set(usage) - {"0"} else None
    row["kv_capacity_tokens"] = finite(sample.kv_capacity_tokens)
    capacity = _finite_map(sample.kv_capacity_tokens_by_engine)
    row["kv_capacity_by_engine"] = (
        _json(capacity) if set(capacity) - {"0"} or (capacity and row["kv_capacity_tokens"] is None) else None
    )
    for name in HISTOGRAM_COLUMNS:
        histogram = finite_histogram(sample.histograms.get(name))
        row[name] = codec.encode(histogram, layout_id(histogram.bounds)) if histogram is not None else None
    if shape_id is not None:  # a version-3 file: what the page said of its process, and its impossible values
        row["shape_id"] = shape_id(sample)
        doubtful = getattr(sample, "doubtful", None)
        row["doubtful"] = (
            json.dumps(json_out.strict(dict(doubtful)), sort_keys=True, separators=(",", ":")) if doubtful else None
        )
    return row


def _finite_map(values: Mapping[str, object] | None) -> dict[str, float]:
    """A per-engine (or per-reason) map without its NaN, infinite or non-numeric readings, keys as valid text."""
    found: dict[str, float] = {}
    for key, value in dict(values or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            found[text(str(key))] = value
    return found


def _all_finite(values: Iterable[float]) -> bool:
    """Whether a sequence of floats holds no NaN or infinity (one C-level sum: NaN and inf propagate)."""
    total = sum(values)
    return total - total == 0.0  # False for NaN and ±inf (a sum of huge counts that overflows counts as infinite)


def finite_histogram(histogram: Histogram | None) -> Histogram | None:
    """The histogram a reader can use, or None: NaN or infinite counts (or a NaN bound) make it unknown;
    a NaN or infinite sum or count alone is kept as missing. +Inf stays a bound (the last bucket)."""
    if histogram is None:
        return None
    bounds = sum(histogram.bounds)  # +Inf is a bound; a NaN (or -Inf beside +Inf) is none
    if bounds != bounds or not _all_finite(histogram.counts):
        return None
    total, count = finite(histogram.sum), finite(histogram.count)
    if total is histogram.sum and count is histogram.count:
        return histogram
    return replace(histogram, sum=total, count=count)


# A samples row as sqlite3 reads it, by column name: its values are untyped (whatever the file holds,
# an older capcon's NaN included), and each is checked where it is read (_real, read_histogram, ...).
SampleRow = Mapping[str, Any]
BoundsOf = Callable[[int], tuple[float, ...]]
ShapeOf = Callable[[int], tuple[tuple[str, ...], tuple[str, ...], dict[str, int]]]


def read_histogram(blob: bytes | None, bounds: BoundsOf) -> Histogram | None:
    """The histogram a stored blob holds (`bounds(layout_id)` gives a layout's bounds), as `finite_histogram`
    makes it: a file written before the store refused NaN still reads. CodecError for a damaged blob."""
    if blob is None:
        return None
    histogram = codec.decode(blob, bounds(codec.layout_of(blob)))
    if blob[0] == codec.WHOLE:  # whole counts are finite by construction: only the sum and the bounds can be odd
        total, layout = histogram.sum, sum(histogram.bounds)
        if (total is None or total - total == 0.0) and layout == layout:
            return histogram
    return finite_histogram(histogram)


def _json_map(raw: str | bytes | None) -> dict[str, object] | None:
    """A stored JSON map (a poll's figures, a flag's figures, an event's detail) read back; None when there is
    none, or the text holds something other than a map (the file is written with maps only)."""
    if not raw:
        return None
    found = json_out.loads(raw)
    return found if isinstance(found, dict) else None


def _stored_map(raw: str | bytes | None) -> dict[str, float]:
    """A stored JSON map read back: only finite numbers (an older file may hold NaN or Infinity)."""
    if not raw:
        return {}
    found = json_out.loads(raw)
    return _finite_map(found) if isinstance(found, dict) else {}


def sample_from_columns(row: SampleRow, bounds: BoundsOf, shapes: ShapeOf | None = None) -> ReplicaSample:
    """The ReplicaSample a row holds (`bounds(layout_id)` gives a layout's bounds, `shapes(shape_id)` a
    page shape's (models, engines, series); without it, or in a version-2 file, the shape is unknown).

    Figures a reader cannot use (NaN, infinities, left by an older capcon) come back as unknown."""
    kv_usage, kv_capacity = _real(row["kv_usage"]), _real(row["kv_capacity_tokens"])
    usage = (
        _stored_map(row["kv_usage_by_engine"])
        if row["kv_usage_by_engine"]
        else ({"0": kv_usage} if kv_usage is not None else {})
    )
    if row["kv_capacity_by_engine"]:
        capacity = _stored_map(row["kv_capacity_by_engine"])
    else:
        capacity = {"0": kv_capacity} if kv_capacity is not None else {}
    histograms = {}
    for name in HISTOGRAM_COLUMNS:
        histogram = read_histogram(row[name], bounds)
        if histogram is not None:
            histograms[name] = histogram
    # Inline, not through finite(): this runs for every sample a replay or history reads.
    counters = {name: value for name in COUNTER_COLUMNS if type(value := row[name]) is float and value - value == 0.0}
    models: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    series: dict[str, int] = {}
    shape_id = row.get("shape_id")
    if shapes is not None and shape_id is not None:
        models, engines, series = shapes(shape_id)
    doubtful: dict[str, str] = {}
    stored_doubtful = row.get("doubtful")
    if stored_doubtful:
        found = json_out.loads(stored_doubtful)
        if isinstance(found, dict):
            doubtful = {str(k): str(v) for k, v in found.items()}
    return ReplicaSample(
        model_names=models,
        engines=engines,
        shape=series,
        doubtful=doubtful,
        at=row["sampled_at"],
        counters=counters,
        requests_by_reason=_stored_map(row["requests_by_reason"]),
        running=_real(row["running"]),
        waiting=_real(row["waiting"]),
        kv_usage_by_engine=usage,
        kv_capacity_tokens=kv_capacity,
        kv_capacity_tokens_by_engine=capacity,
        histograms=histograms,
        start_time=_real(row["start_time"]),
    )


def _real(value: object) -> float | None:
    """A REAL column read back: a finite number, else unknown (Infinity left by an older capcon, a foreign value)."""
    return value if type(value) is float and value - value == 0.0 else (float(value) if type(value) is int else None)


def result_from_row(
    name: str, url: str, row: SampleRow, bounds: BoundsOf, shapes: ShapeOf | None = None
) -> TargetResult:
    sample = sample_from_columns(row, bounds, shapes) if finite(row["sampled_at"]) is not None else None
    return TargetResult(name, url, row["state"], sample, row["error"] or "", row["fetched_at"])


def _open_read_only(target: Path) -> sqlite3.Connection:
    """A reader's connection. A WAL file's reader must create its `-shm` beside it; a reader who may not
    write that folder (an on-call user reading a service's history) can still read a file no recorder
    has open, as an immutable file."""
    uri = target.resolve().as_uri()
    connection = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
    try:
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return connection
    except sqlite3.OperationalError as error:
        connection.close()
        wal = target.with_name(target.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise HistoryError(
                f"{target}: cannot be read while a recorder writes it ({error}); expected write access to "
                f"{target.parent} (a reader of a file being written shares memory with the writer there)"
            ) from None
    # No recorder has the file open (no write-ahead log left): nothing can change under this reader.
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def _close(connection: sqlite3.Connection | None) -> None:
    if connection is not None:
        try:
            connection.close()
        except sqlite3.Error:
            pass


def _inserted_id(cursor: sqlite3.Cursor) -> int:
    """The id SQLite gave the row an INSERT just added (always set after a successful INSERT)."""
    if cursor.lastrowid is None:
        raise sqlite3.DatabaseError("no row id after an INSERT")
    return cursor.lastrowid


def _low(value: float | None) -> float:
    return value if value is not None else float("-inf")


def _high(value: float | None) -> float:
    return value if value is not None else float("inf")


def _sqlite_words(error: sqlite3.Error) -> str:
    text = str(error)
    if "file is not a database" in text or "file is encrypted" in text:
        return "not an SQLite file"
    return text


class _Transaction:
    def __init__(self, connection: sqlite3.Connection, on_rollback: Callable[[], None]) -> None:
        self.connection = connection
        self.on_rollback = on_rollback

    def __enter__(self) -> sqlite3.Connection:
        self.connection.execute("BEGIN IMMEDIATE")
        return self.connection

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            try:
                # On a full disk the COMMIT itself fails (WAL frames are written at commit) and SQLite
                # rolls back on its own: that must undo the cached ids like any other failure.
                self.connection.execute("COMMIT")
                return
            except BaseException:
                self._undo()
                raise
        self._undo()

    def _undo(self) -> None:
        try:
            if self.connection.in_transaction:
                self.connection.execute("ROLLBACK")
        finally:
            self.on_rollback()
