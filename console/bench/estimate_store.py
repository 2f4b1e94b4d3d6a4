"""Capacity estimates kept in the data directory: computed once per plan content and capcon version.

An estimate sweeps the plan's simulated replica several times (seconds of CPU); every command that reads a plan
without a measured capacity needs it (`watch --once`, `rules`, `history --plan`, `overflow status`, the replay).
The first command computes it and writes it here; later ones read it in milliseconds.

The key is a hash of what the estimate depends on: the plan as parsed (everything but where it was read from),
capcon's version and the source of the modules that compute it (so a changed simulator never serves an old
figure). A file that cannot be read, parsed or written is passed over: the estimate is computed again, and the
command never fails on its store.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, replace
from importlib import util
from pathlib import Path

from console.plan.model import Plan

FOLDER = "estimates"
# What the estimate is computed by: a change to any of them is a new estimate.
MODULES = (
    "console.bench.estimate",
    "console.bench.reach",
    "console.bench.simulated",
    "console.bench.sweep",
    "console.bench.arrivals",
    "console.bench.runner",
    "console.sim.engine",
    "console.sim.kv",
    "console.sim.shape",
    "console.sim.traffic",
    "console.plan.sizing",
    "console.plan.catalog",
)


@dataclass(frozen=True)
class Kept:
    """An estimate as the store keeps it: the figures and the words, without the plan's path."""

    rps: float
    low: float | None
    high: float | None
    note: str
    computed_at: float  # seconds since the epoch
    version: str


@functools.cache  # the sources and the version do not change while a process runs
def _source_digest() -> str:
    digest = hashlib.sha256()
    for name in MODULES:
        spec = util.find_spec(name)
        if spec is not None and spec.origin:
            try:
                digest.update(Path(spec.origin).read_bytes())
            except OSError:
                digest.update(name.encode())
    return digest.hexdigest()


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("capcon")
    except PackageNotFoundError:
        return "unversioned"


def key(plan: Plan) -> str:
    """The plan's content (not its path), capcon's version and the estimator's source, hashed."""
    content = repr(replace(plan, source_path="", name=""))
    return hashlib.sha256(f"{content}\n{_version()}\n{_source_digest()}".encode()).hexdigest()[:32]


def folder() -> Path:
    import platformdirs  # noqa: PLC0415

    return platformdirs.user_data_path("capcon") / FOLDER


def read(plan: Plan) -> Kept | None:
    """The kept estimate of `plan`, or None (none kept, or unreadable)."""
    path = folder() / f"{key(plan)}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        kept = Kept(
            rps=float(raw["rps"]),
            low=None if raw["low"] is None else float(raw["low"]),
            high=None if raw["high"] is None else float(raw["high"]),
            note=str(raw["note"]),
            computed_at=float(raw["computed_at"]),
            version=str(raw["version"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return kept if kept.rps > 0 else None


def write(plan: Plan, rps: float, low: float | None, high: float | None, note: str) -> Kept:
    """Keep an estimate of `plan` (atomically; an unwritable folder is passed over)."""
    kept = Kept(rps, low, high, note, time.time(), _version())
    target = folder() / f"{key(plan)}.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump(kept.__dict__, f)
        os.replace(f.name, target)
    except OSError:
        pass
    return kept


def computed_words(kept: Kept) -> str:
    """'computed 2026-12-07 21:40 UTC by capcon 0.9.0': when and by what an estimate was made."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(kept.computed_at))
    return f"computed {when} by capcon {kept.version}, kept in {folder()}"
