"""Retention is the file's: a writer without --keep-* keeps what the file keeps, and only an
explicit option changes it (saying so when it keeps less than before).

The case it guards: `capcon record --keep-raw 7d` runs on a bastion, an on-call opens
`capcon watch --db` on the same file, and three-day-old raw polls must still be there after.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from console.store.database import Store
from console.store.recorder import Recorder
from console.store.retention import MINUTES_SECONDS, Retention, retention_in_force
from tests.store.recorder_polls import (
    capcon,
    renumbered,
    sim_polls,
)

WEEK = 7 * 86400.0
RAW_POLLS = 100


@pytest.fixture(scope="module")
def polls():
    return sim_polls(4, replicas=2)


def kept_for_a_week(path: Path, polls) -> list[float]:
    """A file a `--keep-raw 7d` recorder wrote: its retention in the settings, 100 raw polls aged three days."""
    recorder = Recorder(path, Retention(raw_seconds=WEEK, minutes_seconds=MINUTES_SECONDS))
    recorder.start(detail={"fleets": [polls[0].fleet], "interval": 30.0})
    old = renumbered((polls * RAW_POLLS)[:RAW_POLLS], start=time.time() - 3 * 86400.0, step=30.0)
    for record in old:
        recorder.submit(record)
    status = recorder.close(timeout=20.0)
    assert status.written == RAW_POLLS, status
    return [record.at for record in old]


def raw_polls(path: Path) -> list[float]:
    """Every raw poll time in the file, of every fleet, oldest first."""
    store = Store.open(path, read_only=True)
    try:
        return sorted(at for fleet in store.fleets() for _, at in store.poll_times(fleet.name))
    finally:
        store.close()


def kept(path: Path) -> Retention | None:
    store = Store.open(path, read_only=True)
    try:
        return retention_in_force(store)
    finally:
        store.close()


def test_a_recorder_without_a_retention_keeps_what_the_file_keeps(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    times = kept_for_a_week(path, polls)
    recorder = Recorder(path)
    assert recorder.retention == Retention(WEEK, MINUTES_SECONDS) and not recorder.retention_explicit
    recorder.start(detail={"fleets": ["other"], "interval": 2.0})
    recorder.close()
    assert raw_polls(path) == times
    assert kept(path) == Retention(WEEK, MINUTES_SECONDS)


def test_a_new_file_gets_the_defaults(tmp_path):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start()
    recorder.close()
    assert kept(path) == Retention()


def test_watch_on_a_file_a_week_long_recorder_keeps_leaves_its_raw_polls(tmp_path, polls, targets):
    path = tmp_path / "history.sqlite"
    times = kept_for_a_week(path, polls)
    done = capcon("watch", *targets, "--once", "--interval", "0.5", "--db", str(path), data_home=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert kept(path) == Retention(WEEK, MINUTES_SECONDS)
    assert [at for at in raw_polls(path) if at in set(times)] == times  # all 100 three-day-old raw polls


def test_an_explicit_shorter_retention_applies_and_says_what_the_file_kept(tmp_path, polls, targets):
    path = tmp_path / "history.sqlite"
    times = kept_for_a_week(path, polls)
    done = capcon(
        "record", *targets, "--duration", "2", "--keep-raw", "2d", "--db", str(path), data_home=tmp_path / "data"
    )
    assert done.returncode == 0, done.stderr
    start_line = done.stdout.splitlines()[0]
    assert "keeping raw 48h, rollups 90d (shortened: the file kept raw 7d, rollups 90d)" in start_line
    assert kept(path) == Retention(2 * 86400.0, MINUTES_SECONDS)
    assert not set(times) & set(raw_polls(path))  # rolled up into minutes, as asked


def test_an_explicit_longer_retention_is_not_called_shortened(tmp_path, targets):
    path = tmp_path / "history.sqlite"
    done = capcon(
        "record", *targets, "--duration", "2", "--keep-raw", "7d", "--db", str(path), data_home=tmp_path / "data"
    )
    assert done.returncode == 0, done.stderr
    assert "keeping raw 7d, rollups 90d" in done.stdout and "shortened" not in done.stdout
    assert kept(path) == Retention(WEEK, MINUTES_SECONDS)


def test_keep_raw_alone_keeps_the_files_rollup_span(tmp_path, polls, targets):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path, Retention(raw_seconds=86400.0, minutes_seconds=365 * 86400.0))
    recorder.start()
    recorder.close()
    done = capcon(
        "record", *targets, "--duration", "2", "--keep-raw", "3d", "--db", str(path), data_home=tmp_path / "data"
    )
    assert done.returncode == 0, done.stderr
    assert kept(path) == Retention(3 * 86400.0, 365 * 86400.0)
