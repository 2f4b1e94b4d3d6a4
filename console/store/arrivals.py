"""The few columns a backtest reads per replica-minute: the requests counter, its process start, the plan clock.

`capcon history --backtest` needs the fleet's request rate minute by minute over days or weeks; the
full per-minute series (console.store.series.minute_series) decodes every histogram on the way, which a
week of a large fleet does not need. Here SQLite picks each replica-minute's last sample (raw samples
win over the `minutes` rollup of the same minute, as in minute_series) and only three numbers come back.
"""

from __future__ import annotations

from console.store.database import Store
from console.store.json_out import finite

# SQLite takes a bare column of a max() aggregate from the row holding the max: the minute's last sample.
_RAW = """
SELECT s.replica_id, CAST(p.at / 60 AS INTEGER) AS minute, max(p.at), s.sampled_at, s.requests, s.start_time
FROM polls p JOIN samples s ON s.poll_id = p.id
WHERE p.fleet_id = ? AND p.at >= ? AND p.at < ? AND s.sampled_at IS NOT NULL
GROUP BY s.replica_id, minute
"""
_ROLLUP = """
SELECT replica_id, CAST(minute / 60 AS INTEGER), minute, sampled_at, requests, start_time
FROM minutes
WHERE fleet_id = ? AND minute >= ? AND minute < ? AND sampled_at IS NOT NULL
"""
_CLOCKS = """
SELECT CAST(at / 60 AS INTEGER) AS minute, max(at), plan_clock
FROM polls WHERE fleet_id = ? AND at >= ? AND at < ? AND plan_clock IS NOT NULL
GROUP BY minute ORDER BY minute
"""


def minute_requests(
    store: Store, fleet: str, start: float, end: float
) -> dict[str, list[tuple[float, float | None, float | None]]]:
    """Per replica (by URL): (sampled at, requests counter, process start) of the last sample of each minute
    whose poll falls in [start, end), oldest first. Unknown or non-finite values are None."""
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return {}
    found: dict[tuple[int, int], tuple[float, float | None, float | None]] = {}
    for query in (_ROLLUP, _RAW):  # the raw samples of a minute replace its rollup
        for replica_id, minute, _, sampled_at, requests, start_time in store.connection.execute(
            query, (fleet_id, start, end)
        ):
            at = finite(sampled_at)
            if isinstance(at, (int, float)):
                found[(replica_id, minute)] = (float(at), _number(requests), _number(start_time))
    urls = dict(store.connection.execute("SELECT id, url FROM replicas WHERE fleet_id = ?", (fleet_id,)).fetchall())
    series: dict[str, list[tuple[float, float | None, float | None]]] = {}
    for (replica_id, _), point in found.items():
        series.setdefault(urls.get(replica_id, str(replica_id)), []).append(point)
    for points in series.values():
        points.sort(key=lambda p: p[0])
    return series


def minute_plan_clocks(store: Store, fleet: str, start: float, end: float) -> list[tuple[float, float]]:
    """(at, plan clock) of the last poll of each minute in [start, end) that recorded where in its week the plan
    was read (a `demo --db` recording runs a simulated week), oldest first."""
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return []
    out = []
    for _, at, clock in store.connection.execute(_CLOCKS, (fleet_id, start, end)):
        at, clock = _number(at), _number(clock)
        if at is not None and clock is not None:
            out.append((at, clock))
    return out


def _number(value: object) -> float | None:
    value = finite(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
