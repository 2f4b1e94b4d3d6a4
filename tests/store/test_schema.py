"""The history file's schema on real SQLite files: creation, migration from version 1, and files refused."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from console.metrics.exposition import parse
from console.metrics.vllm import FAMILIES, sample_from_page
from console.store.database import HistoryError, Store
from console.store.records import PollRecord
from console.store.schema import SCHEMA_VERSION, migrate
from console.targets import TargetResult
from tests.metrics.pages import V010, V032_SMALL_KV, advance, sample_text, whole_window

V1_TABLES = {"fleets", "replicas", "plans", "bucket_layouts", "polls", "samples", "flag_events", "events"}
V2_TABLES = {"minutes", "settings"}
V3_TABLES = {"page_shapes"}
V4_TABLES = {"checkpoints"}


def names(connection: sqlite3.Connection, kind: str) -> set[str]:
    return {
        row[0]
        for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%'", (kind,)
        )
    }


def comparable(result: TargetResult, kept_shape: bool = True) -> TargetResult:
    """The result as the file keeps it: which wire name carried a figure, and parser duplicates, are not stored;
    a file written before version 3 kept nothing of the page's shape."""
    if result.sample is None:
        return result
    sample = replace(result.sample, wire_names={}, duplicates=0)
    if not kept_shape:
        sample = replace(sample, model_names=(), engines=(), shape={}, doubtful={})
    return replace(result, sample=sample)


def real_results(at: float, requests: float = 0.0) -> tuple[TargetResult, ...]:
    """Two replicas from real captures (vLLM 0.32 and 0.10) and one that did not answer."""
    newer = advance(
        sample_text(V032_SMALL_KV),
        counters={"vllm:request_success_total": requests},
        observations={"vllm:time_to_first_token_seconds": [0.02] * int(requests)},
    )
    older = whole_window(V010)  # an excerpt: read as far as it is whole
    return (
        TargetResult("a", "http://10.0.0.1:8000/metrics", "up", sample_from_page(parse(newer, FAMILIES), at), "", at),
        TargetResult("b", "http://10.0.0.2:8000/metrics", "up", sample_from_page(parse(older, FAMILIES), at), "", at),
        TargetResult("c", "http://10.0.0.3:8000/metrics", "timeout", None, "no answer in 2 s", at),
    )


def test_a_new_file_gets_every_table_its_indexes_wal_and_the_current_version(tmp_path):
    path = tmp_path / "deep" / "er" / "history.sqlite"
    Store.open(path).close()
    connection = sqlite3.connect(path)
    assert names(connection, "table") == V1_TABLES | V2_TABLES | V3_TABLES | V4_TABLES
    assert {"polls_fleet_at", "flag_events_fleet_at", "events_at", "minutes_fleet_minute"} <= names(connection, "index")
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    # Time-range reads use the indexes, not a scan of every poll.
    plan = " ".join(
        row[-1]
        for row in connection.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM polls WHERE fleet_id = 1 AND at >= 0 AND at <= 9"
        )
    )
    assert "USING" in plan and "polls_fleet_at" in plan


def test_a_version_1_file_is_migrated_and_its_polls_read_back_unchanged(tmp_path):
    path = tmp_path / "v1.sqlite"
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    assert migrate(connection, target=1) == 0
    assert names(connection, "table") == V1_TABLES
    # write_poll touches only version-1 tables: this is what a version-1 capcon wrote.
    old = Store(connection, str(path), read_only=False)
    first = old.write_poll(PollRecord("f", 1000.5, 1000.4, "scrape", 60.0, 1.0, real_results(1000.0)))
    second = old.write_poll(PollRecord("f", 1001.5, 1001.4, "scrape", 60.0, 1.0, real_results(1001.0, requests=7)))
    old.write_event(1000.0, "recording_started", fleet="f", detail={"pid": 1})
    connection.close()

    with pytest.raises(HistoryError, match="history schema 1 is older"):
        Store.open(path, read_only=True)
    store = Store.open(path)
    assert store.connection.execute("PRAGMA user_version").fetchone()[0] == 4
    assert names(store.connection, "table") == V1_TABLES | V2_TABLES | V3_TABLES | V4_TABLES
    store.close()

    reader = Store.open(path, read_only=True)
    for poll_id, at, requests in ((first, 1000.0, 0.0), (second, 1001.0, 7.0)):
        poll = reader.poll(poll_id)
        assert (poll.fleet, poll.watched_at, poll.source) == ("f", at + 0.4, "scrape")
        assert poll.results == tuple(comparable(r, kept_shape=False) for r in real_results(at, requests))
    ttft = [reader.poll(p).results[0].sample.histograms["ttft"] for p in (first, second)]
    assert ttft[1].count == ttft[0].count + 7 and ttft[1].counts[3] == ttft[0].counts[3] + 7, (
        "the two polls are told apart"
    )
    assert [(e.kind, e.detail) for e in reader.events()] == [("recording_started", {"pid": 1})]


def test_a_failed_migration_step_leaves_the_file_at_its_version(tmp_path, monkeypatch):
    path = tmp_path / "v1.sqlite"
    connection = sqlite3.connect(path, isolation_level=None)
    migrate(connection, target=1)
    connection.execute("CREATE TABLE minutes (x)")  # the step's first table already exists: the step must fail whole
    with pytest.raises(sqlite3.OperationalError):
        migrate(connection)
    assert connection.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "settings" not in names(connection, "table")


def test_a_file_from_a_newer_capcon_is_refused_in_one_line(tmp_path):
    path = tmp_path / "newer.sqlite"
    Store.open(path).close()
    newer = SCHEMA_VERSION + 1
    connection = sqlite3.connect(path)
    connection.execute(f"PRAGMA user_version = {newer}")
    connection.close()
    for read_only in (False, True):
        with pytest.raises(HistoryError) as error:
            Store.open(path, read_only=read_only)
        message = str(error.value)
        assert (
            "\n" not in message and str(path) in message and "newer capcon" in message and f"schema {newer}" in message
        )
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == newer, (
        "a refused file is left as it was"
    )


def test_a_version_2_file_is_read_as_it_is_and_a_writer_adds_the_page_shapes(tmp_path):
    """Version 3 only adds: a reader (history, export, replay of a file an older recorder still writes) takes a
    version-2 file on without migrating it; the next writer migrates it, and its new samples keep their shape."""
    path = tmp_path / "v2.sqlite"
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    migrate(connection, target=2)
    old = Store(connection, str(path), read_only=False)  # what a version-2 capcon wrote
    first = old.write_poll(PollRecord("f", 1000.5, 1000.4, "scrape", 60.0, 1.0, real_results(1000.0)))
    connection.close()
    reader = Store.open(path, read_only=True)
    assert reader.version == 2
    assert reader.poll(first).results == tuple(comparable(r, kept_shape=False) for r in real_results(1000.0))
    reader.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2, "a reader never migrates"

    store = Store.open(path)
    assert store.version == 4
    second = store.write_poll(PollRecord("f", 1001.5, 1001.4, "scrape", 60.0, 1.0, real_results(1001.0, requests=7)))
    back = store.poll(second).results
    assert back == tuple(comparable(r) for r in real_results(1001.0, requests=7))
    assert back[0].sample.model_names and back[0].sample.engines and back[0].sample.shape, "the page's process is kept"
    assert store.poll(first).results[0].sample.shape == {}  # its older samples still say nothing of it
    assert store.connection.execute("SELECT count(*) FROM page_shapes").fetchone()[0] == 2  # one per distinct page


@pytest.mark.parametrize("read_only", [False, True])
def test_a_file_that_is_not_sqlite_is_refused(tmp_path, read_only):
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 50)
    with pytest.raises(HistoryError) as error:
        Store.open(path, read_only=read_only)
    assert str(error.value) == f"{path}: not an SQLite file; expected a capcon history file"
    assert path.read_text().startswith("these are my notes"), "a refused file is never written"


@pytest.mark.parametrize("read_only", [False, True])
def test_an_sqlite_file_of_another_program_is_refused(tmp_path, read_only):
    path = tmp_path / "other.sqlite"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    connection.commit()
    connection.close()
    with pytest.raises(HistoryError) as error:
        Store.open(path, read_only=read_only)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and "capcon history" in message
    assert names(sqlite3.connect(path), "table") == {"invoices"}


def test_a_missing_file_is_refused_for_reading_and_not_created(tmp_path):
    path = tmp_path / "nothing-here.sqlite"
    with pytest.raises(HistoryError) as error:
        Store.open(path, read_only=True)
    assert str(error.value).startswith(f"{path}: no such history file")
    assert not path.exists()


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(HistoryError, match="is a directory"):
        Store.open(tmp_path)
