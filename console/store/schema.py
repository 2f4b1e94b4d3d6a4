"""The history file's tables, and the migrations that bring an older file up to date.

The version lives in SQLite's `user_version`. Each migration takes the file from
version N-1 to N inside one transaction; a file written by a newer capcon is
refused rather than guessed at.

Version 1: fleets, replicas, plan versions, polls, raw samples (counters and gauges
as columns, one blob per histogram against a shared bucket layout), flag events,
events. Version 2: one-minute rollups (the last sample of each minute, with the
minute's peaks) and retention settings. Version 3: what a page said of the process behind it
(its model and engine labels, how many series of each figure it served: one row per distinct
shape, referenced by each sample) and the impossible values it held (`doubtful`), so a replay
detects a new process and a page cut short as the live console did. A version-2 file is still
read (those samples say nothing of their process, as before); a writer migrates it. Version 4:
replay checkpoints (console.store.checkpoints), what a replay needs to carry on from a poll without
the polls before it; a file without them replays as before, warming up on the polls before a jump.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 4
OLDEST_READABLE = 2  # readers take a file of this version on without migrating it (what is newer is additive)

COUNTER_COLUMNS = (
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "admission_rejections",
)
HISTOGRAM_COLUMNS = ("ttft", "itl", "tpot", "e2e", "queue", "prompt_length", "output_length")

# One replica at one poll. `sampled_at` is NULL when the target did not answer (state says why).
_SAMPLE_COLUMNS = (
    "state TEXT NOT NULL, error TEXT, fetched_at REAL NOT NULL, sampled_at REAL, start_time REAL, "
    + ", ".join(f"{c} REAL" for c in COUNTER_COLUMNS)
    + ", requests_by_reason TEXT, running REAL, waiting REAL, kv_usage REAL, kv_usage_by_engine TEXT, "
    "kv_capacity_tokens REAL, kv_capacity_by_engine TEXT, " + ", ".join(f"{c} BLOB" for c in HISTOGRAM_COLUMNS)
)

_V1 = f"""
CREATE TABLE fleets (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at REAL NOT NULL);
CREATE TABLE replicas (
    id INTEGER PRIMARY KEY, fleet_id INTEGER NOT NULL REFERENCES fleets(id),
    name TEXT NOT NULL, url TEXT NOT NULL, UNIQUE (fleet_id, url)
);
CREATE TABLE plans (
    id INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE, name TEXT NOT NULL, path TEXT,
    text TEXT NOT NULL, first_seen REAL NOT NULL
);
CREATE TABLE bucket_layouts (id INTEGER PRIMARY KEY, bounds TEXT NOT NULL UNIQUE);
CREATE TABLE polls (
    id INTEGER PRIMARY KEY, fleet_id INTEGER NOT NULL REFERENCES fleets(id),
    at REAL NOT NULL, watched_at REAL NOT NULL, plan_id INTEGER REFERENCES plans(id),
    source TEXT NOT NULL, window_seconds REAL NOT NULL, interval_seconds REAL NOT NULL,
    source_error TEXT, figures TEXT, plan_clock REAL
);
CREATE INDEX polls_fleet_at ON polls (fleet_id, at);
CREATE TABLE samples (
    poll_id INTEGER NOT NULL REFERENCES polls(id), replica_id INTEGER NOT NULL REFERENCES replicas(id),
    {_SAMPLE_COLUMNS},
    PRIMARY KEY (poll_id, replica_id)
) WITHOUT ROWID;
CREATE TABLE flag_events (
    id INTEGER PRIMARY KEY, fleet_id INTEGER NOT NULL REFERENCES fleets(id), poll_id INTEGER,
    at REAL NOT NULL, change TEXT NOT NULL, flag_id TEXT NOT NULL, kind TEXT NOT NULL,
    subject TEXT NOT NULL, severity TEXT NOT NULL, since REAL NOT NULL, why TEXT, todo TEXT, figures TEXT
);
CREATE INDEX flag_events_fleet_at ON flag_events (fleet_id, at);
CREATE TABLE events (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, fleet_id INTEGER REFERENCES fleets(id),
    kind TEXT NOT NULL, subject TEXT, detail TEXT
);
CREATE INDEX events_at ON events (at);
"""

_V2 = f"""
CREATE TABLE minutes (
    replica_id INTEGER NOT NULL REFERENCES replicas(id), minute REAL NOT NULL,
    fleet_id INTEGER NOT NULL REFERENCES fleets(id), plan_id INTEGER,
    samples INTEGER NOT NULL, running_max REAL, waiting_max REAL, kv_usage_max REAL,
    {_SAMPLE_COLUMNS},
    PRIMARY KEY (replica_id, minute)
) WITHOUT ROWID;
CREATE INDEX minutes_fleet_minute ON minutes (fleet_id, minute);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_V3 = """
CREATE TABLE page_shapes (id INTEGER PRIMARY KEY, shape TEXT NOT NULL UNIQUE);
ALTER TABLE samples ADD COLUMN shape_id INTEGER REFERENCES page_shapes(id);
ALTER TABLE samples ADD COLUMN doubtful TEXT;
ALTER TABLE minutes ADD COLUMN shape_id INTEGER REFERENCES page_shapes(id);
ALTER TABLE minutes ADD COLUMN doubtful TEXT;
"""

# One per checkpointed poll: `state` is compressed JSON, `format` the code it is valid for (a replay built
# from other flag or window rules would not carry on from it to what a replay from the start shows).
_V4 = """
CREATE TABLE checkpoints (
    poll_id INTEGER PRIMARY KEY REFERENCES polls(id), fleet_id INTEGER NOT NULL REFERENCES fleets(id),
    at REAL NOT NULL, format TEXT NOT NULL, state BLOB NOT NULL
);
CREATE INDEX checkpoints_fleet_at ON checkpoints (fleet_id, at);
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)  # MIGRATIONS[n - 1] takes a file from version n - 1 to n


class SchemaError(Exception):
    """The file is not a capcon history, or is one from a newer capcon."""


def version(connection: sqlite3.Connection) -> int:
    return connection.execute("PRAGMA user_version").fetchone()[0]


def migrate(connection: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring the file to `target` (the current version unless a test asks for an older one); returns the version before."""
    found = version(connection)
    if found > SCHEMA_VERSION:
        raise SchemaError(f"written by a newer capcon (history schema {found}); expected at most {SCHEMA_VERSION}")
    if found == 0:
        tables = connection.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        if tables:
            raise SchemaError("an SQLite file with other tables; expected a capcon history file (or a new path)")
    for step in range(found, target):
        # executescript commits first; BEGIN IMMEDIATE makes each step all or nothing.
        try:
            connection.executescript(
                f"BEGIN IMMEDIATE;\n{MIGRATIONS[step]}\nPRAGMA user_version = {step + 1};\nCOMMIT;"
            )
        except sqlite3.Error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
    return found
