"""Copy what can still be read of a damaged history into a new file: `capcon history --db F --salvage NEW`.

SQLite's own `.recover` needs a shell built with the sqlite_dbpage table (Debian's is not), and
`.dump` of a damaged file ends in ROLLBACK, keeping nothing. This reads each table in key order
until it meets the damage, then from the other end back to it, so only the rows on damaged pages
are lost; indexes are rebuilt from the rows copied, and the schema version is kept, so every
capcon command reads the new file.

    report = salvage(Path("history.sqlite"), Path("saved.sqlite"))   # HistoryError when nothing can be saved
    report.copied   # {table: rows}; report.damaged: the tables where rows were lost
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from console.store.database import HistoryError, quick_check
from console.store.schema import version


@dataclass
class SalvageReport:
    copied: dict[str, int] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # tables a read stopped in: rows on their damaged pages are lost
    indexes_failed: list[str] = field(default_factory=list)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _key(source: sqlite3.Connection, table: str) -> list[str]:
    """The columns rows are ordered by: the rowid, or a WITHOUT ROWID table's primary key."""
    columns = source.execute(f"PRAGMA table_info({_quoted(table)})").fetchall()
    primary = [row[1] for row in sorted(columns, key=lambda row: row[5]) if row[5]]
    without_rowid = (
        source.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,))
        .fetchone()[0]
        .upper()
        .rstrip()
        .rstrip(";")
        .endswith("WITHOUT ROWID")
    )
    return primary if without_rowid else ["rowid"]


def _copy(source: sqlite3.Connection, target: sqlite3.Connection, table: str) -> tuple[int, bool]:
    """Rows of `table` from `source` into `target`: forward to the damage, then backward to it. (rows, hit damage)."""
    key = _key(source, table)
    names = [row[1] for row in source.execute(f"PRAGMA table_info({_quoted(table)})")]
    wanted = ", ".join(_quoted(k) if k != "rowid" else "rowid" for k in key)
    selected = ", ".join([wanted] + [_quoted(n) for n in names])
    insert = (
        f"INSERT OR IGNORE INTO {_quoted(table)} ({', '.join((['rowid'] if key == ['rowid'] else []) + [_quoted(n) for n in names])})"
        f" VALUES ({', '.join('?' for _ in range((1 if key == ['rowid'] else 0) + len(names)))})"
    )
    width = len(key)
    rows = 0
    last = None
    damaged = False

    def put(row: tuple[object, ...]) -> None:
        nonlocal rows
        values = row[width:]
        target.execute(insert, ((row[0], *values) if key == ["rowid"] else values))
        rows += 1

    try:
        for row in source.execute(f"SELECT {selected} FROM {_quoted(table)} ORDER BY {wanted}"):
            put(row)
            last = row[:width]
    except sqlite3.DatabaseError:
        damaged = True
    if damaged:
        after = "" if last is None else f" WHERE ({wanted}) > ({', '.join('?' for _ in key)})"
        order = ", ".join(f"{k} DESC" for k in (wanted.split(", ")))
        try:
            for row in source.execute(
                f"SELECT {selected} FROM {_quoted(table)}{after} ORDER BY {order}", tuple(last or ())
            ):
                put(row)
        except sqlite3.DatabaseError:
            pass
    return rows, damaged


def salvage(source_path: Path, target_path: Path) -> SalvageReport:
    """Copy every readable row of the history at `source_path` into a new history at `target_path`."""
    if target_path.exists():
        raise HistoryError(f"--salvage {target_path}: already exists; expected a new file")
    source = sqlite3.connect(f"{source_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        try:
            schema = source.execute(
                "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            ).fetchall()
            found = version(source)
        except sqlite3.DatabaseError as error:
            raise HistoryError(
                f"{source_path}: its list of tables is damaged ({error}): capcon cannot tell what to copy;"
                f" expected SQLite's own `sqlite3 {source_path} .recover | sqlite3 {target_path}`"
            ) from None
        target = sqlite3.connect(target_path, isolation_level=None)
        report = SalvageReport()
        try:
            target.execute("BEGIN")
            for kind, name, sql in schema:
                if kind == "table":
                    target.execute(sql)
                    rows, hit = _copy(source, target, name)
                    report.copied[name] = rows
                    if hit:
                        report.damaged.append(name)
            for kind, name, sql in schema:
                if kind == "index":
                    try:
                        target.execute(sql)
                    except sqlite3.DatabaseError:
                        report.indexes_failed.append(name)  # garbage read as rows that break a UNIQUE index
            target.execute(f"PRAGMA user_version = {int(found)}")
            target.execute("COMMIT")
            target.execute("PRAGMA journal_mode = WAL")
            problem = quick_check(target)
        finally:
            target.close()
        if problem is not None:
            raise HistoryError(
                f"--salvage {target_path}: the copy is not whole either ({problem}); expected SQLite's own .recover"
            )
        return report
    finally:
        source.close()
