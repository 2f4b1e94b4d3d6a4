"""Retention: raw samples for a while, one-minute rollups for longer, then nothing.

    done = apply_retention(store, now, Retention(raw_seconds=48 * 3600, minutes_seconds=90 * 86400))

Raw samples older than `raw_seconds` are rolled up into `minutes`: per replica and
minute (of the poll's time), the LAST sample of the minute that carried data, whole
(counters and histogram blobs stay cumulative, so a rate or a percentile over any
span of whole minutes is recomputed exactly from two rollups, as from two raw
samples), with how many raw rows the minute had and the minute's peaks of running,
waiting and KV usage. Then those raw samples and their polls go (a figure source's
polls too: their figures are not samples, and have no rollup). Rollups, flag events
and events older than `minutes_seconds` go.

A restart inside a minute leaves the post-restart sample as the minute's last, with
smaller counters than the minute before: readers see the restart the way they see it
in raw samples (`console.metrics.vllm.restarted`), and give no rate across it.

The work is done in small transactions (one hour of one fleet's raw data, one day of
rollups), so the recorder's next poll and any reader wait at most one chunk. Running
it twice changes nothing the second time; a minute whose raw rows are rolled in two
runs (the retention changed, or a late poll) is merged: counts add, peaks take the
larger, the later sample wins.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from console.store.database import SAMPLE_READ_COLUMNS, HistoryError, Store

RAW_SECONDS = 48 * 3600.0
MINUTES_SECONDS = 90 * 86400.0
RAW_CHUNK_SECONDS = 3600.0
ROLLUP_CHUNK_SECONDS = 86400.0
EVENT_BATCH = 5000

RAW_SETTING = "raw_seconds"
MINUTES_SETTING = "minutes_seconds"


def _positive_seconds(value: object) -> bool:
    """Whether a duration given at run time (from options or a file, whatever its declared type) is usable."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class Retention:
    raw_seconds: float = RAW_SECONDS
    minutes_seconds: float = MINUTES_SECONDS

    def __post_init__(self) -> None:
        for name, value in (("raw samples", self.raw_seconds), ("one-minute rollups", self.minutes_seconds)):
            if not _positive_seconds(value):
                raise ValueError(
                    f"retention of {name}: {value!r} is not a duration; expected a positive number of seconds"
                )
        if self.minutes_seconds < self.raw_seconds:
            raise ValueError(
                f"one-minute rollups kept {self.minutes_seconds:g} s, less than raw samples ({self.raw_seconds:g} s);"
                " expected rollups to be kept at least as long"
            )


@dataclass(frozen=True)
class RetentionDone:
    rolled: int = 0  # minute rows written or merged
    deleted_raw: int = 0  # raw sample rows
    deleted_polls: int = 0
    deleted_rollups: int = 0
    deleted_events: int = 0  # flag events and events
    finished: bool = True  # False when `max_chunks` stopped it early: call again


def retention_in_force(store: Store) -> Retention | None:
    """The retention last applied to this file (what `capcon history` can say is kept), None if never."""
    raw, minutes = store.setting(RAW_SETTING), store.setting(MINUTES_SETTING)
    if raw is None or minutes is None:
        return None
    try:
        return Retention(float(raw), float(minutes))
    except ValueError:
        return None


def minute_of(at: float) -> float:
    return math.floor(at / 60.0) * 60.0


def apply_retention(
    store: Store, now: float, retention: Retention = Retention(), max_chunks: int | None = None
) -> RetentionDone:
    """Roll up and delete what `retention` no longer keeps at `now`.

    `max_chunks` bounds the transactions of one call (a recorder with a long backlog
    calls again later and keeps writing polls in between). sqlite3 errors (a locked
    file) propagate for the caller to report.
    """
    if store.read_only:
        raise HistoryError(f"{store.path}: opened read-only; retention needs a writer")
    _remember(store, retention)
    # Whole minutes only: a minute is rolled in one go, never half now and half next run.
    raw_cutoff = minute_of(now - retention.raw_seconds)
    rollup_cutoff = minute_of(now - retention.minutes_seconds)
    budget = _Budget(max_chunks)
    totals = {"rolled": 0, "deleted_raw": 0, "deleted_polls": 0, "deleted_rollups": 0, "deleted_events": 0}
    fleet_ids = [row[0] for row in store.connection.execute("SELECT id FROM fleets ORDER BY id")]
    for fleet_id in fleet_ids:
        for start, end in _chunks(
            store,
            "SELECT min(at) FROM polls WHERE fleet_id = ? AND at >= ? AND at < ?",
            fleet_id,
            raw_cutoff,
            RAW_CHUNK_SECONDS,
            budget,
        ):
            with store._transaction():
                rolled, raw, polls = _roll_chunk(store, fleet_id, start, end)
            totals["rolled"] += rolled
            totals["deleted_raw"] += raw
            totals["deleted_polls"] += polls
        for start, end in _chunks(
            store,
            "SELECT min(minute) FROM minutes WHERE fleet_id = ? AND minute >= ? AND minute < ?",
            fleet_id,
            rollup_cutoff,
            ROLLUP_CHUNK_SECONDS,
            budget,
        ):
            with store._transaction():
                totals["deleted_rollups"] += store.connection.execute(
                    "DELETE FROM minutes WHERE fleet_id = ? AND minute >= ? AND minute < ?", (fleet_id, start, end)
                ).rowcount
    for table in ("flag_events", "events"):
        while _any_before(store, table, rollup_cutoff) and budget.take():
            with store._transaction():
                deleted = store.connection.execute(
                    f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE at < ? LIMIT {EVENT_BATCH})",
                    (rollup_cutoff,),
                ).rowcount
            totals["deleted_events"] += deleted
            if deleted < EVENT_BATCH:
                break
    return RetentionDone(**totals, finished=not budget.exhausted)


def _any_before(store: Store, table: str, cutoff: float) -> bool:
    return store.connection.execute(f"SELECT 1 FROM {table} WHERE at < ? LIMIT 1", (cutoff,)).fetchone() is not None


def _remember(store: Store, retention: Retention) -> None:
    wanted = {RAW_SETTING: repr(float(retention.raw_seconds)), MINUTES_SETTING: repr(float(retention.minutes_seconds))}
    if any(store.setting(key) != value for key, value in wanted.items()):
        with store._transaction():
            store.connection.executemany(
                "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", list(wanted.items())
            )


class _Budget:
    def __init__(self, chunks: int | None) -> None:
        self.left = chunks
        self.exhausted = False

    def take(self) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            self.exhausted = True
            return False
        self.left -= 1
        return True


def _chunks(
    store: Store, first_sql: str, fleet_id: int, cutoff: float, size: float, budget: _Budget
) -> Iterator[tuple[float, float]]:
    """[start, end) ranges of `size` (aligned to it) holding data before `cutoff`, skipping empty ones."""
    low = -math.inf
    while True:
        first = store.connection.execute(first_sql, (fleet_id, low, cutoff)).fetchone()[0]
        if first is None or not budget.take():
            return
        start = math.floor(first / size) * size
        end = min(start + size, cutoff)
        yield start, end
        low = end


# The last answered sample of each (replica, minute) wins; among equals, the later one.
_SAMPLE_LIST = ", ".join(SAMPLE_READ_COLUMNS)
_ROLL_UP = f"""
WITH chunk AS (
    SELECT s.replica_id, {", ".join("s." + c for c in SAMPLE_READ_COLUMNS)},
           p.fleet_id, p.plan_id, p.id AS poll_id,
           CAST(p.at / 60 AS INTEGER) * 60.0 AS minute  -- truncation is floor for unix times (positive)
    FROM polls p JOIN samples s ON s.poll_id = p.id
    WHERE p.fleet_id = ? AND p.at >= ? AND p.at < ?
), ranked AS (
    SELECT chunk.*,
           row_number() OVER (PARTITION BY replica_id, minute
                              ORDER BY sampled_at IS NOT NULL DESC, fetched_at DESC, poll_id DESC) AS rank,
           count(*) OVER whole AS n,
           max(CASE WHEN abs(running) < 9e999 THEN running END) OVER whole AS running_peak,  -- finite peaks only
           max(CASE WHEN abs(waiting) < 9e999 THEN waiting END) OVER whole AS waiting_peak,
           max(CASE WHEN abs(kv_usage) < 9e999 THEN kv_usage END) OVER whole AS kv_peak
    FROM chunk
    WINDOW whole AS (PARTITION BY replica_id, minute)
)
INSERT INTO minutes (replica_id, minute, fleet_id, plan_id, samples, running_max, waiting_max, kv_usage_max, {
    _SAMPLE_LIST
})
SELECT replica_id, minute, fleet_id, plan_id, n, running_peak, waiting_peak, kv_peak, {_SAMPLE_LIST}
FROM ranked WHERE rank = 1
ON CONFLICT (replica_id, minute) DO UPDATE SET
    samples = minutes.samples + excluded.samples,
    {
    ", ".join(
        f"{c} = coalesce(max(minutes.{c}, excluded.{c}), minutes.{c}, excluded.{c})"
        for c in ("running_max", "waiting_max", "kv_usage_max")
    )
},
    {
    ", ".join(
        f"{c} = CASE WHEN (excluded.sampled_at IS NOT NULL, excluded.fetched_at)"
        f" >= (minutes.sampled_at IS NOT NULL, minutes.fetched_at) THEN excluded.{c} ELSE minutes.{c} END"
        for c in ("fleet_id", "plan_id", *SAMPLE_READ_COLUMNS)
    )
}
"""


def _roll_chunk(store: Store, fleet_id: int, start: float, end: float) -> tuple[int, int, int]:
    """Roll up and delete one fleet's raw polls in [start, end); returns (rolled, raw deleted, polls deleted)."""
    connection = store.connection
    connection.execute(_ROLL_UP, (fleet_id, start, end))
    rolled = connection.execute("SELECT changes()").fetchone()[0]  # rowcount misses statements that open with WITH
    raw = connection.execute(
        "DELETE FROM samples WHERE poll_id IN (SELECT id FROM polls WHERE fleet_id = ? AND at >= ? AND at < ?)",
        (fleet_id, start, end),
    ).rowcount
    connection.execute(  # a checkpoint is no use without the samples it names
        "DELETE FROM checkpoints WHERE poll_id IN (SELECT id FROM polls WHERE fleet_id = ? AND at >= ? AND at < ?)",
        (fleet_id, start, end),
    )
    polls = connection.execute(
        "DELETE FROM polls WHERE fleet_id = ? AND at >= ? AND at < ?", (fleet_id, start, end)
    ).rowcount
    return rolled, raw, polls
