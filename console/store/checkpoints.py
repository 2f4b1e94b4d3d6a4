"""Replay checkpoints: what the console carried from a poll to the next, so a replay can start there.

A replay that jumps into a recording cannot skip polls: the flags and trends remember the
last minutes, and the window math the samples of the last window. A checkpoint stored with a
poll holds all of it, as the live console had it after that poll:

  - the flag trackers (console.fleet.flags.FlagState), as they are;
  - the trends ring, as the points added since the previous checkpoint (`base`): a point per
    poll, never the whole ring again; a reader follows `base` back as far as the trend span;
  - the watcher's memory, its samples named by the poll that stored them (poll id and sample
    time), never copied: a reader reads them back from those polls.

    writer = CheckpointWriter()                    # one per writing Store
    writer.seen(fleet_id, poll_id, record)         # every poll written: which poll holds which sample
    blob = writer.encode(fleet_id, poll_id, state) # None when a sample it names was not written
    state = read_state(store, poll_id)             # StoredState, or None when it cannot be used

A checkpoint is valid only for the code that wrote it (`FORMAT`: a digest of the modules that
compute figures, flags and trends); a replay built from other rules ignores it and warms up.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import zlib
from dataclasses import astuple, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from console.fleet.flags import FlagState, Tracker
from console.fleet.trends import TrendPoint, Trends
from console.store.records import PollRecord, PollState

CHECKPOINT_POLLS = 15  # a checkpoint every this many polls of a fleet: a jump then computes at most as many
# The code a checkpoint's state comes from, relative to the console package: the window math, the figures,
# the flag rules and trends, the plan's numbers, and the watcher that keeps the samples.
_RULES = ("fleet", "metrics", "plan", "live/watcher.py")
_CONSOLE = Path(__file__).resolve().parents[1]


@cache
def rules_digest() -> str:
    """What the checkpoints of this build are stamped with; "" (none written, none read) without its sources."""
    digest = hashlib.sha256()
    for part in _RULES:
        path = _CONSOLE / part
        sources = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        if not sources or not all(source.is_file() for source in sources):
            return ""  # an install without its sources cannot tell its rules from another build's
        for source in sources:
            digest.update(source.relative_to(_CONSOLE).as_posix().encode())
            digest.update(source.read_bytes())
    return "1:" + digest.hexdigest()[:32]


@dataclass(frozen=True)
class StoredState:
    """A checkpoint read back: the trends and flags as they were, and the watcher's samples by poll."""

    trends: Trends
    flag_state: FlagState
    watcher: dict[str, Any] | None  # source, window, interval, rings, last_good, restarted, latest (refs)

    def polls(self) -> list[int]:
        """The polls holding the samples the watcher kept, oldest first."""
        if self.watcher is None:
            return []
        found = {ref[0] for ring in self.watcher["rings"].values() for ref in ring}
        found |= {ref[0] for ref in self.watcher["latest"].values()}
        return sorted(found)


class CheckpointWriter:
    """The writing side: remembers which poll stored each recent sample, and each fleet's last trends."""

    def __init__(self) -> None:
        # fleet id -> url -> {sample time: poll id}, for the samples a watcher may still keep
        self._recent: dict[int, dict[str, dict[float, int]]] = {}
        self._latest: dict[int, dict[str, tuple[float, int]]] = {}  # the newest sample of each url
        self._trends: dict[int, tuple[int, tuple[TrendPoint, ...]]] = {}  # the last checkpoint's poll and ring

    def seen(self, fleet_id: int, poll_id: int, record: PollRecord) -> None:
        if not record.results:
            return
        recent = self._recent.setdefault(fleet_id, {})
        latest = self._latest.setdefault(fleet_id, {})
        # A watcher keeps samples back to its window or two intervals (plus slack): twice that is plenty.
        keep = 2.0 * max(record.window_seconds, 2.0 * record.interval_seconds) + 10.0
        for result in record.results:
            sample = result.sample
            if sample is None or not math.isfinite(sample.at):
                continue
            by_time = recent.setdefault(result.url, {})
            by_time[sample.at] = poll_id
            latest[result.url] = (sample.at, poll_id)
            if len(by_time) > 8 and min(by_time) < sample.at - keep:
                for at in [at for at in by_time if at < sample.at - keep]:
                    del by_time[at]

    def encode(self, fleet_id: int, poll_id: int, state: PollState) -> bytes | None:
        """The checkpoint of `state` (after poll `poll_id`), or None when a sample it keeps cannot be named."""
        if not rules_digest():
            return None
        watcher = None if state.watcher is None else self._watcher(fleet_id, state.watcher)
        if state.watcher is not None and watcher is None:
            return None
        points = state.trends.points
        base = self._trends.get(fleet_id)
        delta, base_id, base_at = points, None, None
        if base is not None and base[1]:
            before = base[1]
            last = before[-1].at
            fresh = tuple(p for p in points if p.at > last)
            carried = points[: len(points) - len(fresh)]
            # The ring carried on from the last checkpoint's (nothing reset it since): only the new points.
            # (With none carried, there is nothing to look back for: a reset ring, or one older than its span.)
            if carried and len(carried) <= len(before) and before[len(before) - len(carried) :] == carried:
                delta, base_id, base_at = fresh, base[0], last
        body = {
            "point_fields": [f.name for f in fields(TrendPoint)],
            "tracker_fields": [f.name for f in fields(Tracker)],
            "trends": {
                "span": state.trends.span_seconds,
                "limit": state.trends.limit,
                "points": [astuple(p) for p in delta],
                "base": base_id,
                "base_at": base_at,
            },
            "trackers": [[key, *astuple(t)] for key, t in state.flag_state.trackers.items()],
            "watcher": watcher,
        }
        try:
            text = json.dumps(body, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            return None  # a value JSON cannot hold exactly: no checkpoint rather than a wrong one
        return zlib.compress(text.encode(), 6)

    def written(self, fleet_id: int, poll_id: int, state: PollState) -> None:
        """The checkpoint of `poll_id` is in the file: the next one stores the trend points after it."""
        self._trends[fleet_id] = (poll_id, state.trends.points)

    def _watcher(self, fleet_id: int, memory: Any) -> dict[str, Any] | None:
        recent = self._recent.get(fleet_id, {})
        latest = self._latest.get(fleet_id, {})
        rings: dict[str, list[tuple[int, float]]] = {}
        for url, ring in memory.rings.items():
            named = recent.get(url, {})
            refs: list[tuple[int, float]] = []
            for sample in ring:
                poll = named.get(sample.at)
                if poll is None:
                    return None  # a sample of a poll this writer has not seen stored: no checkpoint
                refs.append((poll, sample.at))
            rings[url] = refs
        newest: dict[str, tuple[int, float]] = {}
        for url, sample in memory.latest.items():
            found = latest.get(url)
            poll = found[1] if found is not None and found[0] == sample.at else recent.get(url, {}).get(sample.at)
            if poll is None:
                return None
            newest[url] = (poll, sample.at)
        return {
            "source": memory.source,
            "window": memory.window_seconds,
            "interval": memory.interval_seconds,
            "rings": rings,
            "last_good": dict(memory.last_good),
            "restarted": sorted(memory.restarted),
            "latest": newest,
        }


def checkpoint_polls(connection: sqlite3.Connection, fleet_id: int) -> list[int]:
    """The polls of a fleet with a checkpoint this code can use (none in a file older than checkpoints)."""
    if not rules_digest():
        return []
    try:
        rows = connection.execute(
            "SELECT poll_id FROM checkpoints WHERE fleet_id = ? AND format = ? ORDER BY at", (fleet_id, rules_digest())
        ).fetchall()
    except sqlite3.OperationalError:
        return []  # a file from before checkpoints, read without migrating
    return [row[0] for row in rows]


def _body(connection: sqlite3.Connection, poll_id: int) -> dict | None:
    row = connection.execute(
        "SELECT state FROM checkpoints WHERE poll_id = ? AND format = ?", (poll_id, rules_digest())
    ).fetchone()
    if row is None:
        return None
    try:
        body = json.loads(zlib.decompress(row[0]))
    except (zlib.error, ValueError):
        return None
    return body if isinstance(body, dict) else None


def read_state(connection: sqlite3.Connection, poll_id: int) -> StoredState | None:
    """The checkpoint stored with `poll_id`, its trends rebuilt from the chain of checkpoints before it.

    None when it is missing, damaged, or its trends reach back to a checkpoint no longer in the file.
    """
    body = _body(connection, poll_id)
    if body is None:
        return None
    try:
        if body["point_fields"] != [f.name for f in fields(TrendPoint)] or body["tracker_fields"] != [
            f.name for f in fields(Tracker)
        ]:
            return None
        trends = _trends(connection, body["trends"])
        if trends is None:
            return None
        trackers = {item[0]: Tracker(*item[1:]) for item in body["trackers"]}
        watcher = body["watcher"]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return StoredState(trends, FlagState(trackers), watcher)


def _trends(connection: sqlite3.Connection, stored: dict) -> Trends | None:
    span, limit = float(stored["span"]), int(stored["limit"])
    chunks = [[TrendPoint(*p) for p in stored["points"]]]
    newest = next((c[-1].at for c in chunks if c), None)
    base, base_at = stored["base"], stored["base_at"]
    # Back through the checkpoints before this one until the ring's span (or its limit) is covered.
    while base is not None:
        held = sum(len(c) for c in chunks)
        oldest = next((c[0].at for c in chunks if c), None)
        if newest is None:
            newest = base_at
        if held >= limit or (oldest is not None and oldest <= newest - span):
            break
        body = _body(connection, base)
        if body is None:
            return None
        earlier = body["trends"]
        points = [TrendPoint(*p) for p in earlier["points"]]
        if (points[-1].at if points else earlier["base_at"]) != base_at:
            return None  # not the checkpoint this one carried on from
        chunks.insert(0, points)
        base, base_at = earlier["base"], earlier["base_at"]
    every = [p for c in chunks for p in c]
    if not every:
        return Trends(span_seconds=span, limit=limit)
    oldest_kept = every[-1].at - span
    kept = tuple(p for p in every if p.at >= oldest_kept)[-limit:]
    return Trends(span_seconds=span, limit=limit, points=kept)
