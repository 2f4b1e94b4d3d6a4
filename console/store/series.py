"""Per-minute series of a fleet's replicas, read from the history file for `capcon history`.

Raw `samples` give, per replica and minute, the last sample of the minute and the
minute's peaks of running, waiting and KV usage (SQLite does the grouping, so only
one row per replica-minute is decoded); the `minutes` rollup table holds the same
for spans whose raw samples retention has already folded away. Both are merged
(raw wins where both hold a minute) and ordered by sample time.

A minute's last sample leaves out the requests served between a recording's first poll
and the end of its first minute: `stretch_starts=True` adds each replica's first sample
of a minute that follows no recorded minute (a recording's start, or its restart after a
gap), so a run counts from its first poll. A 150 s recording started during an incident
had dropped three quarters of its requests, the slow ones.

    series = minute_series(store, "chat", start, end)   # {replica url: [MinutePoint, ...]}
"""

from __future__ import annotations

import math
from bisect import bisect_right

from console.fleet.hourly import MinutePoint
from console.store.database import SAMPLE_READ_COLUMNS, Store, sample_from_columns
from console.store.json_out import finite


def _finite_max(column: str) -> str:
    """SQL for the largest finite value of `column` (an older capcon could store Infinity; SQLite writes it 9e999)."""
    return f"max(CASE WHEN abs({column}) < 9e999 THEN {column} END)"


def _queries(columns: tuple[str, ...]) -> tuple[str, str, str]:
    """The raw-sample, rollup and stretch-start queries for a file's sample columns (a version-2 file has fewer)."""
    found = _QUERIES.get(columns)
    if found is None:
        s_columns = ", ".join(f"s.{c}" for c in columns)
        m_columns = ", ".join(f"m.{c}" for c in columns)
        # The last poll of each replica-minute with the minute's peaks, then that one row of samples.
        raw = f"""
WITH last AS (
    SELECT s.replica_id AS replica_id, CAST(p.at / 60 AS INTEGER) AS minute, max(p.at) AS last_at,
           {_finite_max("s.running")} AS running_max, {_finite_max("s.waiting")} AS waiting_max,
           {_finite_max("s.kv_usage")} AS kv_usage_max
    FROM polls p JOIN samples s ON s.poll_id = p.id
    WHERE p.fleet_id = ? AND p.at >= ? AND p.at < ? AND s.sampled_at IS NOT NULL
    GROUP BY s.replica_id, minute
)
SELECT last.replica_id, last.minute, last.running_max, last.waiting_max, last.kv_usage_max, {s_columns}
FROM last
JOIN polls p ON p.fleet_id = ? AND p.at = last.last_at
JOIN samples s ON s.poll_id = p.id AND s.replica_id = last.replica_id
WHERE s.sampled_at IS NOT NULL
"""
        rollup = f"""
SELECT m.replica_id, CAST(m.minute / 60 AS INTEGER), m.running_max, m.waiting_max, m.kv_usage_max, {m_columns}
FROM minutes m
WHERE m.fleet_id = ? AND m.minute >= ? AND m.minute < ? AND m.sampled_at IS NOT NULL
"""
        # The first poll of each replica-minute that follows no recorded minute of that replica, when the
        # minute holds later polls too (else its last sample is that first one).
        starts = f"""
WITH per_minute AS (
    SELECT s.replica_id AS replica_id, CAST(p.at / 60 AS INTEGER) AS minute, min(p.at) AS first_at,
           max(p.at) AS last_at
    FROM polls p JOIN samples s ON s.poll_id = p.id
    WHERE p.fleet_id = ? AND p.at >= ? AND p.at < ? AND s.sampled_at IS NOT NULL
    GROUP BY s.replica_id, minute
), stretch AS (
    SELECT replica_id, minute, first_at, last_at,
           lag(minute) OVER (PARTITION BY replica_id ORDER BY minute) AS previous
    FROM per_minute
)
SELECT stretch.replica_id, stretch.minute, {s_columns}
FROM stretch
JOIN polls p ON p.fleet_id = ? AND p.at = stretch.first_at
JOIN samples s ON s.poll_id = p.id AND s.replica_id = stretch.replica_id
WHERE (stretch.previous IS NULL OR stretch.previous < stretch.minute - 1)
  AND stretch.first_at < stretch.last_at AND s.sampled_at IS NOT NULL
"""
        found = _QUERIES[columns] = (raw, rollup, starts)
    return found


_QUERIES: dict[tuple[str, ...], tuple[str, str, str]] = {}


def replica_urls(store: Store, fleet_id: int) -> dict[int, str]:
    return dict(store.connection.execute("SELECT id, url FROM replicas WHERE fleet_id = ?", (fleet_id,)).fetchall())


def minute_series(
    store: Store, fleet: str, start: float, end: float, stretch_starts: bool = False
) -> dict[str, list[MinutePoint]]:
    """Per replica (by URL), one point per minute whose poll falls in [start, end), oldest first.

    With `stretch_starts`, also the first sample of each minute that follows no recorded minute
    of its replica (without the minute's peaks: those stay on the minute's last sample).
    """
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return {}
    found: dict[tuple[int, int], MinutePoint] = {}
    columns = getattr(store, "read_columns", SAMPLE_READ_COLUMNS)
    raw, rollup, starts = _queries(columns)
    # Rollups first, so the raw samples of the same minute replace them.
    for query, params in ((rollup, (fleet_id, start, end)), (raw, (fleet_id, start, end, fleet_id))):
        for replica_id, minute, running_max, waiting_max, kv_usage_max, *values in store.connection.execute(
            query, params
        ):
            sample = sample_from_columns(dict(zip(columns, values)), store.bounds, store.shape)
            found[(replica_id, minute)] = MinutePoint(
                sample, finite(running_max), finite(waiting_max), finite(kv_usage_max)
            )
    entries = list(found.items())
    if stretch_starts:
        for replica_id, minute, *values in store.connection.execute(starts, (fleet_id, start, end, fleet_id)):
            sample = sample_from_columns(dict(zip(columns, values)), store.bounds, store.shape)
            entries.append(((replica_id, minute), MinutePoint(sample)))
    urls = replica_urls(store, fleet_id)
    series: dict[str, list[MinutePoint]] = {}
    for (replica_id, _), point in entries:
        series.setdefault(urls.get(replica_id, str(replica_id)), []).append(point)
    for points in series.values():
        points.sort(key=lambda p: p.at)
    return series


def raised_flags(store: Store, fleet: str, start: float, end: float) -> list[tuple[float, str]]:
    """(at, kind) of every flag raised in [start, end), oldest first."""
    return store.connection.execute(
        "SELECT e.at, e.kind FROM flag_events e JOIN fleets f ON f.id = e.fleet_id"
        " WHERE f.name = ? AND e.change = 'raised' AND e.at >= ? AND e.at < ? ORDER BY e.at, e.id",
        (fleet, start, end),
    ).fetchall()


def flags_by_hour(store: Store, fleet: str, starts: list[float], end: float) -> dict[float, dict[str, int]]:
    """Raised flags counted by kind for each hour starting at `starts` (the last one ends at `end`)."""
    counted: dict[float, dict[str, int]] = {start: {} for start in starts}
    if not starts:
        return counted
    for at, kind in raised_flags(store, fleet, starts[0], end):
        hour = starts[bisect_right(starts, at) - 1]
        counted[hour][kind] = counted[hour].get(kind, 0) + 1
    return counted


def plan_id_in_force(store: Store, fleet: str, start: float, end: float) -> int | None:
    """The plan recorded with the fleet's last poll (or rollup) in [start, end); None without one."""
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return None
    row = store.connection.execute(
        "SELECT plan_id FROM polls WHERE fleet_id = ? AND at >= ? AND at < ? AND plan_id IS NOT NULL ORDER BY at DESC LIMIT 1",
        (fleet_id, start, end),
    ).fetchone()
    if row is None:
        row = store.connection.execute(
            "SELECT plan_id FROM minutes WHERE fleet_id = ? AND minute >= ? AND minute < ? AND plan_id IS NOT NULL"
            " ORDER BY minute DESC LIMIT 1",
            (fleet_id, start, end),
        ).fetchone()
    return row[0] if row else None


def recorded_span(store: Store, fleet: str) -> tuple[float | None, float | None]:
    """First and last recorded time of a fleet (polls and rollups)."""
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return None, None
    polls = store.connection.execute("SELECT min(at), max(at) FROM polls WHERE fleet_id = ?", (fleet_id,)).fetchone()
    rollups = store.connection.execute(
        "SELECT min(minute), max(minute) FROM minutes WHERE fleet_id = ?", (fleet_id,)
    ).fetchone()
    firsts = [v for v in (polls[0], rollups[0]) if v is not None]
    lasts = [v for v in (polls[1], rollups[1]) if v is not None]
    return (min(firsts) if firsts else None, max(lasts) if lasts else None)


def recorded_end(store: Store, fleet: str) -> float | None:
    """A time just after everything recorded for a fleet: spans ending here keep the last poll and its samples.

    Queries take [start, end): the last poll (and a sample stamped at or after it) needs an end
    above it, and a rolled-up minute holds samples up to the end of that minute.
    """
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return None
    last_poll = store.connection.execute("SELECT max(at) FROM polls WHERE fleet_id = ?", (fleet_id,)).fetchone()[0]
    last_sample = store.connection.execute(
        "SELECT max(s.sampled_at) FROM samples s"
        " WHERE s.poll_id = (SELECT id FROM polls WHERE fleet_id = ? ORDER BY at DESC, id DESC LIMIT 1)",
        (fleet_id,),
    ).fetchone()[0]
    last_minute = store.connection.execute(
        "SELECT max(minute) FROM minutes WHERE fleet_id = ?", (fleet_id,)
    ).fetchone()[0]
    lasts = [v for v in (last_poll, last_sample) if v is not None]
    ends = [math.nextafter(max(lasts), math.inf)] if lasts else []
    if last_minute is not None:
        ends.append(last_minute + 60.0)
    return max(ends) if ends else None


def plan_clocks(store: Store, fleet: str, start: float, end: float) -> list[tuple[float, float]]:
    """(at, plan_clock) of the fleet's polls in [start, end) that recorded where in its week the plan was read.

    The minutes rollup keeps no plan clock: rolled-up spans have none here.
    """
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return []
    return store.connection.execute(
        "SELECT at, plan_clock FROM polls WHERE fleet_id = ? AND at >= ? AND at < ? AND plan_clock IS NOT NULL ORDER BY at",
        (fleet_id, start, end),
    ).fetchall()
