"""The history file: one SQLite database in WAL mode, read and written through sqlite-utils.

A writer (the recorder's thread) and any number of readers (replay, history,
export, a second console) can use one file at once: WAL lets readers see the last
committed poll while the writer adds the next. Each poll is one transaction, so a
recorder killed mid-write loses at most that poll.

    store = Store.open(path)                  # creates or migrates the file
    store.write_poll(record)                  # one transaction
    store = Store.open(path, read_only=True)  # a reader; never creates or migrates
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Iterator

import sqlite_utils

from console.errors import UserError
from console.metrics.figures import FleetFigures
from console.metrics.vllm import ReplicaSample
from console.sources.base import TargetResult
from console.store import codec
from console.store.records import Event, FlagEvent, FleetInfo, PlanVersion, PollRecord, RecordedPoll
from console.store.schema import COUNTER_COLUMNS, HISTOGRAM_COLUMNS, SCHEMA_VERSION, SchemaError, migrate, version

BUSY_TIMEOUT_MS = 2000  # a writer waits this long for another writer's lock before reporting "locked"


class HistoryError(UserError):
    """A history file that cannot be opened or read: the message says which and why."""


def plan_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json(value) -> str | None:
    return json.dumps(value, separators=(",", ":"), sort_keys=True) if value else None


class Store:
    def __init__(self, connection: sqlite3.Connection, path: str, read_only: bool) -> None:
        self.connection = connection
        self.db = sqlite_utils.Database(connection)
        self.path = path
        self.read_only = read_only
        self._fleets: dict[str, int] = {}
        self._replicas: dict[tuple[int, str], int] = {}
        self._layouts: dict[tuple[float, ...], int] = {}
        self._bounds: dict[int, tuple[float, ...]] = {}
        self._plans: dict[str, int] = {}
        self._replica_names: dict[int, tuple[str, str]] = {}
        self._fleet_names: dict[int, str] = {}

    # --- opening -------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path, read_only: bool = False, create: bool = True) -> Store:
        """Open (and for a writer, create or migrate) the history at `path`; HistoryError says what is wrong."""
        shown = str(path)
        target = Path(path)
        if read_only or not create:
            if not target.exists():
                raise HistoryError(f"{shown}: no such history file; expected a file written by `capcon watch` or `capcon record`")
        elif not target.parent.exists():
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise HistoryError(f"{shown}: cannot create its directory ({error.strerror})") from None
        if target.is_dir():
            raise HistoryError(f"{shown}: is a directory; expected a history file")
        try:
            if read_only:
                connection = _open_read_only(target)
            else:
                connection = sqlite3.connect(str(target), check_same_thread=False, isolation_level=None)
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            found = version(connection)
            if read_only:
                if found == 0:
                    raise SchemaError("not a capcon history (no history tables); expected a file written by `capcon watch` or `capcon record`")
                if found > SCHEMA_VERSION:
                    raise SchemaError(f"written by a newer capcon (history schema {found}); expected at most {SCHEMA_VERSION}")
                if found < SCHEMA_VERSION:
                    raise SchemaError(
                        f"history schema {found} is older than this capcon's ({SCHEMA_VERSION}); "
                        "open it once with `capcon record --db` or `capcon watch --db` to migrate it"
                    )
            else:
                connection.execute("PRAGMA journal_mode = WAL")
                # WAL + NORMAL: a crash of this process loses nothing committed; power loss at most the last polls.
                connection.execute("PRAGMA synchronous = NORMAL")
                migrate(connection)
        except sqlite3.DatabaseError as error:
            raise HistoryError(f"{shown}: {_sqlite_words(error)}; expected a capcon history file") from None
        except SchemaError as error:
            raise HistoryError(f"{shown}: {error}") from None
        return cls(connection, shown, read_only)

    def close(self) -> None:
        self.connection.close()

    # --- writing -------------------------------------------------------------

    def write_poll(self, record: PollRecord) -> int:
        """Store one poll (its samples, plan version and flag changes) in one transaction; returns its id."""
        with self._transaction():
            fleet_id = self._fleet_id(record.fleet, record.at)
            plan_id = self._plan_id(record.plan, record.at) if record.plan is not None else None
            figures = None
            if record.results is None and record.figures is not None:
                figures = json.dumps(record.figures.to_json(), separators=(",", ":"))
            cursor = self.connection.execute(
                "INSERT INTO polls (fleet_id, at, watched_at, plan_id, source, window_seconds, interval_seconds, source_error, figures, plan_clock)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (fleet_id, record.at, record.watched_at, plan_id, record.source, record.window_seconds,
                 record.interval_seconds, record.source_error or None, figures, record.plan_clock),
            )
            poll_id = cursor.lastrowid
            if record.results:
                rows = [self._sample_row(poll_id, fleet_id, result) for result in record.results]
                self.db["samples"].insert_all(rows, replace=True)  # the same URL twice in one poll: the last wins
            for change in record.flag_changes:
                flag = change.flag
                self.connection.execute(
                    "INSERT INTO flag_events (fleet_id, poll_id, at, change, flag_id, kind, subject, severity, since, why, todo, figures)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (fleet_id, poll_id, record.at, change.change, flag.id, flag.kind, flag.subject, flag.severity,
                     flag.since, flag.why, flag.todo, _json(change.figures.to_json()) if change.figures else None),
                )
        return poll_id

    def write_event(self, at: float, kind: str, fleet: str | None = None, subject: str | None = None, detail: dict | None = None) -> None:
        """An event beside the polls: recording started or stopped, a policy switched (the overflow console), ..."""
        with self._transaction():
            fleet_id = self._fleet_id(fleet, at) if fleet is not None else None
            self.connection.execute(
                "INSERT INTO events (at, fleet_id, kind, subject, detail) VALUES (?, ?, ?, ?, ?)",
                (at, fleet_id, kind, subject, _json(detail)),
            )

    def _transaction(self):
        # isolation_level=None: transactions are explicit. IMMEDIATE takes the write lock up front,
        # so "locked" is reported at BEGIN, never halfway through a poll.
        return _Transaction(self.connection, self._forget_ids)

    def _forget_ids(self) -> None:
        # Ids cached inside a rolled-back transaction no longer exist in the file.
        for cache in (self._fleets, self._replicas, self._layouts, self._bounds, self._plans):
            cache.clear()

    def _fleet_id(self, name: str, at: float) -> int:
        found = self._fleets.get(name)
        if found is None:
            row = self.connection.execute("SELECT id FROM fleets WHERE name = ?", (name,)).fetchone()
            if row is None:
                row = (self.connection.execute("INSERT INTO fleets (name, created_at) VALUES (?, ?)", (name, at)).lastrowid,)
            found = self._fleets[name] = row[0]
        return found

    def _replica_id(self, fleet_id: int, name: str, url: str) -> int:
        key = (fleet_id, url)
        found = self._replicas.get(key)
        if found is None:
            row = self.connection.execute("SELECT id, name FROM replicas WHERE fleet_id = ? AND url = ?", (fleet_id, url)).fetchone()
            if row is None:
                row = (self.connection.execute("INSERT INTO replicas (fleet_id, name, url) VALUES (?, ?, ?)", (fleet_id, name, url)).lastrowid, name)
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

    def _plan_id(self, plan, at: float) -> int:
        text = plan.source_text or ""
        digest = plan_hash(text)
        found = self._plans.get(digest)
        if found is None:
            row = self.connection.execute("SELECT id FROM plans WHERE hash = ?", (digest,)).fetchone()
            if row is None:
                row = (self.connection.execute(
                    "INSERT INTO plans (hash, name, path, text, first_seen) VALUES (?, ?, ?, ?, ?)",
                    (digest, plan.name, plan.source_path or None, text, at),
                ).lastrowid,)
            found = self._plans[digest] = row[0]
        return found

    def _sample_row(self, poll_id: int, fleet_id: int, result: TargetResult) -> dict:
        row = {
            "poll_id": poll_id,
            "replica_id": self._replica_id(fleet_id, result.name, result.url),
            "state": result.state,
            "error": result.error or None,
            "fetched_at": result.fetched_at,
        }
        sample = result.sample
        if sample is None:
            return row
        row.update(sample_columns(sample, self._layout_id))
        return row

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
        figures_json = row[9]
        figures = FleetFigures.from_json(json.loads(figures_json)) if figures_json else None
        results = None if figures is not None else tuple(self._results(poll_id))
        return RecordedPoll(*row[:7], row[7] or "", row[8], results, figures, row[10])

    def _results(self, poll_id: int) -> Iterator[TargetResult]:
        # Replica ids grow in the order replicas were first seen: the source's order.
        cursor = self.connection.execute(
            f"SELECT replica_id, {', '.join(SAMPLE_READ_COLUMNS)} FROM samples WHERE poll_id = ? ORDER BY replica_id",
            (poll_id,),
        )
        for replica_id, *values in cursor:
            name, url = self._replica(replica_id)
            yield result_from_row(name, url, dict(zip(SAMPLE_READ_COLUMNS, values)), self.bounds)

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
        row = self.connection.execute("SELECT id, hash, name, path, text, first_seen FROM plans WHERE id = ?", (plan_id,)).fetchone()
        return PlanVersion(*row) if row else None

    def flag_events(self, fleet: str | None = None, start: float | None = None, end: float | None = None) -> list[FlagEvent]:
        rows = self.connection.execute(
            "SELECT f.name, e.at, e.change, e.flag_id, e.kind, e.subject, e.severity, e.since, e.why, e.todo, e.figures"
            " FROM flag_events e JOIN fleets f ON f.id = e.fleet_id"
            " WHERE (? IS NULL OR f.name = ?) AND e.at >= ? AND e.at <= ? ORDER BY e.at, e.id",
            (fleet, fleet, _low(start), _high(end)),
        ).fetchall()
        return [FlagEvent(*row[:8], row[8] or "", row[9] or "", json.loads(row[10]) if row[10] else None) for row in rows]

    def events(self, start: float | None = None, end: float | None = None) -> list[Event]:
        rows = self.connection.execute(
            "SELECT e.at, f.name, e.kind, e.subject, e.detail FROM events e LEFT JOIN fleets f ON f.id = e.fleet_id"
            " WHERE e.at >= ? AND e.at <= ? ORDER BY e.at, e.id",
            (_low(start), _high(end)),
        ).fetchall()
        return [Event(row[0], row[1], row[2], row[3], json.loads(row[4]) if row[4] else None) for row in rows]

    def setting(self, key: str) -> str | None:
        row = self.connection.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_setting(self, key: str, value: str) -> None:
        with self._transaction():
            self.connection.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))


SAMPLE_READ_COLUMNS = (
    "state", "error", "fetched_at", "sampled_at", "start_time", *COUNTER_COLUMNS, "requests_by_reason",
    "running", "waiting", "kv_usage", "kv_usage_by_engine", "kv_capacity_tokens", "kv_capacity_by_engine",
    *HISTOGRAM_COLUMNS,
)


def sample_columns(sample: ReplicaSample, layout_id) -> dict:
    """A sample's columns: counters and gauges as numbers, per-engine maps as JSON only when not one engine "0"."""
    row: dict = {"sampled_at": sample.at, "start_time": sample.start_time}
    for name in COUNTER_COLUMNS:
        row[name] = sample.counters.get(name)
    row["requests_by_reason"] = _json(dict(sample.requests_by_reason))
    row["running"] = sample.running
    row["waiting"] = sample.waiting
    usage = dict(sample.kv_usage_by_engine)
    row["kv_usage"] = max(usage.values()) if usage else None
    row["kv_usage_by_engine"] = _json(usage) if set(usage) - {"0"} else None
    row["kv_capacity_tokens"] = sample.kv_capacity_tokens
    capacity = dict(sample.kv_capacity_tokens_by_engine)
    row["kv_capacity_by_engine"] = _json(capacity) if set(capacity) - {"0"} or (capacity and sample.kv_capacity_tokens is None) else None
    for name in HISTOGRAM_COLUMNS:
        histogram = sample.histograms.get(name)
        row[name] = codec.encode(histogram, layout_id(histogram.bounds)) if histogram is not None else None
    return row


def sample_from_columns(row: dict, bounds) -> ReplicaSample:
    """The ReplicaSample a row holds (`bounds(layout_id)` gives a layout's bucket bounds)."""
    usage = json.loads(row["kv_usage_by_engine"]) if row["kv_usage_by_engine"] else (
        {"0": row["kv_usage"]} if row["kv_usage"] is not None else {}
    )
    if row["kv_capacity_by_engine"]:
        capacity = json.loads(row["kv_capacity_by_engine"])
    else:
        capacity = {"0": row["kv_capacity_tokens"]} if row["kv_capacity_tokens"] is not None else {}
    histograms = {}
    for name in HISTOGRAM_COLUMNS:
        blob = row[name]
        if blob is not None:
            histograms[name] = codec.decode(blob, bounds(codec.layout_of(blob)))
    return ReplicaSample(
        at=row["sampled_at"],
        counters={name: row[name] for name in COUNTER_COLUMNS if row[name] is not None},
        requests_by_reason=json.loads(row["requests_by_reason"]) if row["requests_by_reason"] else {},
        running=row["running"],
        waiting=row["waiting"],
        kv_usage_by_engine=usage,
        kv_capacity_tokens=row["kv_capacity_tokens"],
        kv_capacity_tokens_by_engine=capacity,
        histograms=histograms,
        start_time=row["start_time"],
    )


def result_from_row(name: str, url: str, row: dict, bounds) -> TargetResult:
    sample = sample_from_columns(row, bounds) if row["sampled_at"] is not None else None
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
    def __init__(self, connection: sqlite3.Connection, on_rollback) -> None:
        self.connection = connection
        self.on_rollback = on_rollback

    def __enter__(self):
        self.connection.execute("BEGIN IMMEDIATE")
        return self.connection

    def __exit__(self, kind, error, trace) -> None:
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
