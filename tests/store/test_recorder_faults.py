"""A history file that refuses writes is a state, never the end of watching: locked, read-only, full.

Each case uses a real SQLite file and a real refusal: another connection's exclusive lock,
an immutable file or folder (chattr +i), a real SQLITE_FULL from the page limit.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import time
from contextlib import contextmanager

import pytest

import console.store.retention as retention_module
from console.commands.recording import polls as poll_words
from console.store.database import Store
from console.store.recorder import Recorder
from console.store.retention import Retention
from console.tui.widgets.console_header import ConsoleHeader
from tests.store.recorder_polls import (
    RECENT,
    integrity,
    renumbered,
    sim_polls,
    stored_times,
    wait_for,
)
from tests.tui.conftest import make_app, poll_times, settle, shown
from tests.tui.fakes import fleet_of, replica


@pytest.fixture(scope="module")
def polls():
    return sim_polls(4, replicas=3)


@contextmanager
def write_lock(path):
    """Another program holding the history's write lock (as a second recorder mid-transaction would)."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@contextmanager
def immutable(path):
    """`chattr +i` on a file or folder (even root cannot write it), always undone."""
    if shutil.which("chattr") is None:
        print("chattr is not installed: cannot make a file read-only for root")
        pytest.skip("chattr is not installed: cannot make a file read-only for root")
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        reason = f"chattr +i failed here ({made.stderr.strip()}): this file system or user cannot make files immutable"
        print(reason)
        pytest.skip(reason)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_locked_file_is_a_state_the_polls_wait_and_all_land_on_release(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    states: list[str] = []
    recorder = Recorder(path, retry_seconds=0.2, on_change=lambda status: states.append(status.state))
    recorder.start()
    records = renumbered(polls * 3, start=RECENT + 10_000.0)
    recorder.submit(records[0])
    wait_for(lambda: recorder.status.written == 1, "the first poll")
    with write_lock(path):
        for record in records[1:5]:
            recorder.submit(record)
        wait_for(lambda: recorder.status.state == "locked", "the locked state")
        for record in records[5:]:
            recorder.submit(record)  # the console keeps polling and handing polls over
        status = recorder.status
        assert (status.written, status.waiting, status.dropped) == (1, len(records) - 1, 0)
        assert status.detail == f"another writer holds it, {len(records) - 1} waiting"
    wait_for(lambda: recorder.status.written == len(records), "the queued polls after the release")
    assert recorder.status.state == "recording"
    recorder.close()
    assert states[:2] == ["locked", "recording"]
    assert stored_times(path) == [r.at for r in records]  # none lost, none out of order
    assert integrity(path) == "ok"


def test_an_immutable_file_is_read_only_and_the_polls_land_once_it_is_writable(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    Store.open(path).close()  # a history from an earlier session
    records = renumbered(polls * 2, start=RECENT + 20_000.0)
    with immutable(path):
        recorder = Recorder(path, retry_seconds=0.2)  # opens: SQLite falls back to reading only
        recorder.start()
        for record in records[:3]:
            recorder.submit(record)
        wait_for(lambda: recorder.status.state == "read-only", "the read-only state")
        for record in records[3:]:
            recorder.submit(record)
        status = recorder.status
        assert (status.written, status.waiting) == (0, len(records))
        assert "not writable" in status.detail
    wait_for(lambda: recorder.status.written == len(records), "the queued polls once writable")
    assert recorder.status.state == "recording"
    recorder.close()
    assert stored_times(path) == [r.at for r in records]


def test_a_history_that_cannot_be_created_yet_is_read_only_not_an_error(tmp_path, polls):
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "history.sqlite"
    records = renumbered(polls, start=RECENT + 30_000.0)
    with immutable(folder):
        recorder = Recorder(path, retry_seconds=0.2)  # no exception: watching must go on
        assert recorder.status.state == "read-only"
        recorder.start()
        for record in records:
            recorder.submit(record)
        assert recorder.status.waiting == len(records)
        assert not path.exists()
    wait_for(lambda: recorder.status.written == len(records), "the polls once the folder is writable")
    recorder.close()
    assert stored_times(path) == [r.at for r in records]


def limited_store(limit: dict):
    """Store.open for a file whose writer may use at most `limit["pages"]` pages (None: no limit)."""

    class LimitedStore(Store):
        def write_poll(self, record):
            pages = limit["pages"] if limit["pages"] is not None else 2**30
            self.connection.execute(f"PRAGMA max_page_count = {pages}")
            return super().write_poll(record)

    return LimitedStore.open


def test_a_full_database_is_a_state_and_recording_resumes_when_there_is_room(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    limit = {"pages": None}
    recorder = Recorder(path, open_store=limited_store(limit), retry_seconds=0.2)
    recorder.start()
    records = renumbered(polls * 2, start=RECENT + 40_000.0)
    recorder.submit(records[0])
    wait_for(lambda: recorder.status.written == 1, "the first poll")
    with sqlite3.connect(path) as reader:
        limit["pages"] = reader.execute("PRAGMA page_count").fetchone()[0]  # not one page more
    for record in records[1:]:
        recorder.submit(record)
    wait_for(lambda: recorder.status.state == "full", "the full state")
    status = recorder.status  # what still fitted in the last pages went in; the rest waits
    assert status.waiting > 0 and status.written + status.waiting == len(records)
    assert integrity(path) == "ok"  # a refused poll leaves nothing half-written
    limit["pages"] = None
    wait_for(lambda: recorder.status.written == len(records), "the queued polls with room again")
    assert recorder.status.state == "recording"
    recorder.close()
    assert stored_times(path) == [r.at for r in records]


def test_beyond_the_bound_the_oldest_waiting_polls_are_dropped_and_counted(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path, max_waiting=3, retry_seconds=0.2)
    recorder.start()
    records = renumbered(polls * 3, start=RECENT + 50_000.0)
    recorder.submit(records[0])
    wait_for(lambda: recorder.status.written == 1, "the first poll")
    with write_lock(path):
        for record in records[1:]:
            recorder.submit(record)
        wait_for(lambda: recorder.status.state == "locked", "the locked state")
        status = recorder.status
        assert status.written + status.waiting + status.dropped == len(records)
        assert status.waiting <= 3 + 1  # the bound, plus the one poll the writer holds
    wait_for(lambda: recorder.status.waiting == 0, "the queue to empty")
    status = recorder.close()
    kept = stored_times(path)
    # The first poll, then the newest ones: the oldest waiting were given up, and counted.
    assert kept == [records[0].at] + [r.at for r in records[len(records) - (len(kept) - 1) :]]
    assert status.dropped == len(records) - len(kept) > 0


def test_polls_waiting_longer_than_the_bound_are_dropped(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path, max_waiting_seconds=0.3, retry_seconds=0.2)
    recorder.start()
    records = renumbered(polls, start=RECENT + 60_000.0)
    with write_lock(path):
        for record in records[:-1]:
            recorder.submit(record)
        time.sleep(0.5)
        recorder.submit(records[-1])  # pushes out what waited longer than the bound
        status = recorder.status
        assert status.dropped >= len(records) - 2
    recorder.close(timeout=10.0)
    assert records[-1].at in stored_times(path)


def test_close_gives_up_on_a_locked_file_within_its_timeout_and_says_what_was_lost(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start()
    records = renumbered(polls, start=RECENT + 70_000.0)
    with write_lock(path):
        for record in records:
            recorder.submit(record)
        status = recorder.close(timeout=0.5)  # the console is quitting; the lock outlives it
        assert status.state == "stopped"
        assert status.waiting == len(records) and status.detail == f"{poll_words(len(records))} not written"
    assert stored_times(path) == []
    assert integrity(path) == "ok"


def test_retention_runs_at_start_and_every_round_with_the_given_retention(tmp_path, polls, monkeypatch):
    calls = []

    def spy(store, now, retention, max_chunks=None):
        calls.append((store.path, retention, max_chunks))
        return retention_module.RetentionDone()

    monkeypatch.setattr(retention_module, "apply_retention", spy)
    keep = Retention(raw_seconds=3600.0, minutes_seconds=86400.0)
    recorder = Recorder(tmp_path / "history.sqlite", keep, retention_every=0.2)
    recorder.start()
    wait_for(lambda: len(calls) >= 3, "three retention rounds")
    status = recorder.status
    recorder.close()
    assert "retention" not in (status.detail or ""), status.detail
    assert {call[:2] for call in calls} == {(str(tmp_path / "history.sqlite"), keep)}
    assert all(call[2] for call in calls), "each round is bounded, so polls never wait behind a long backlog"


def test_a_failing_retention_is_shown_while_the_polls_still_land(tmp_path, polls, monkeypatch):
    def broken(store, now, retention, max_chunks=None):
        raise RuntimeError("rollup exploded")

    monkeypatch.setattr(retention_module, "apply_retention", broken)
    recorder = Recorder(tmp_path / "history.sqlite")
    recorder.start()
    for record in renumbered(polls, start=RECENT + 80_000.0):
        recorder.submit(record)
    wait_for(lambda: recorder.status.written == len(polls), "the polls")
    status = recorder.status
    assert (status.state, status.detail) == ("error", "retention failed: RuntimeError: rollup exploded")
    recorder.close()


def test_the_real_retention_rolls_up_old_raw_polls_when_recording_starts(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    store = Store.open(path)
    now = time.time()
    old = renumbered(polls, start=now - 5 * 86400.0, step=15.0)
    for record in old:
        store.write_poll(record)
    store.close()
    recorder = Recorder(path, Retention(raw_seconds=2 * 86400.0, minutes_seconds=30 * 86400.0))
    recorder.start()
    fresh = renumbered(polls, start=now, step=1.0)
    for record in fresh:
        recorder.submit(record)
    wait_for(lambda: recorder.status.written == len(fresh), "the fresh polls")
    recorder.close()
    assert stored_times(path) == [r.at for r in fresh]  # the raw polls past 48 h went into rollups
    with sqlite3.connect(path) as reader:
        assert reader.execute("SELECT count(*) FROM minutes").fetchone()[0] > 0


async def test_the_console_header_shows_a_locked_history_while_the_views_keep_updating(tmp_path):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path, retry_seconds=0.2)
    recorder.start()
    app = make_app(fleet_of(replica("r1"), replica("r2")), interval=60.0, recorder=recorder)
    try:
        async with app.run_test() as pilot:
            await settle(pilot)
            with write_lock(path):
                await poll_times(pilot, 1)
                for _ in range(400):
                    if recorder.status.state == "locked":
                        break
                    await pilot.pause(0.02)
                before = app.views[0]
                await poll_times(pilot, 2)  # the console keeps polling while the file is locked
                assert app.views[0] is not before and app.views[0].now > before.now
                header = shown(app.screen.query_one(ConsoleHeader))
                assert "rec locked (" in header and "waiting)" in header
                for _ in range(100):  # the notice comes with the next second's check
                    if any("locked" in n.message for n in app._notifications):
                        break
                    await pilot.pause(0.02)
                said = [n.message for n in app._notifications if "locked" in n.message]
                assert said and str(path) in said[0] and "watching goes on" in said[0]
            for _ in range(400):
                if recorder.status.written == app.fleets[0].watcher.polls:
                    break
                await pilot.pause(0.02)
            await poll_times(pilot, 1)
            header = shown(app.screen.query_one(ConsoleHeader))
            assert "rec" in header and "locked" not in header
            for _ in range(100):
                if any("recording again" in n.message for n in app._notifications):
                    break
                await pilot.pause(0.02)
            assert any("recording again" in n.message for n in app._notifications)
            polls_made = app.fleets[0].watcher.polls
    finally:
        recorder.close()
    assert len(stored_times(path)) == polls_made


def test_a_disk_io_error_on_a_file_that_takes_no_writes_is_read_only_naming_the_file(tmp_path):
    from console.store.recorder import state_of

    path = tmp_path / "history.sqlite"
    Store.open(path).close()
    refused = sqlite3.OperationalError("disk I/O error")
    # A writable file: SQLite's words are kept, without blaming the hardware.
    state, words = state_of(refused, str(path))
    assert state == "error" and "a write failed (SQLite: disk I/O error)" in words
    shm = tmp_path / "history.sqlite-shm"
    shm.write_bytes(b"")
    with immutable(shm):
        assert state_of(refused, str(path)) == ("read-only", f"not writable: {shm}")


def test_files_made_immutable_mid_run_are_read_only_not_a_disk_error(tmp_path, polls):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path, retry_seconds=0.2)
    recorder.start()
    records = renumbered(polls * 2, start=RECENT + 50_000.0)
    recorder.submit(records[0])
    wait_for(lambda: recorder.status.written == 1, "the first poll")
    wal = tmp_path / "history.sqlite-wal"
    assert wal.exists()
    with immutable(path), immutable(wal):
        for record in records[1:]:
            recorder.submit(record)
        wait_for(lambda: recorder.status.state != "recording", "a state")
        status = recorder.status
        assert status.state == "read-only", status
        assert status.detail.startswith(f"not writable: {path}")  # which file, not "disk I/O error"
    wait_for(lambda: recorder.status.written == len(records), "the queued polls once writable")
    recorder.close()
    assert stored_times(path) == [r.at for r in records]
    assert integrity(path) == "ok"


def test_a_log_that_cannot_be_folded_into_the_file_is_shown_and_nothing_is_lost(tmp_path, polls, monkeypatch):
    import console.store.recorder as recorder_module

    monkeypatch.setattr(recorder_module, "CHECKPOINT_EVERY", 2)
    path = tmp_path / "history.sqlite"
    seen: list = []
    recorder = Recorder(path, retry_seconds=0.2, on_change=seen.append)
    recorder.start()
    records = renumbered(polls * 3, start=RECENT + 60_000.0)
    recorder.submit(records[0])
    wait_for(lambda: recorder.status.written == 1, "the first poll")
    half = len(records) // 2
    with immutable(path):  # only the main file: writes still land in the -wal, checkpoints cannot
        for record in records[1:half]:
            recorder.submit(record)
        wait_for(
            lambda: recorder.status.written == half and recorder.status.state != "recording", "the checkpoint state"
        )
        status = recorder.status
        assert status.state == "read-only" and status.waiting == 0, status
        assert status.detail.startswith(f"cannot fold the log into {path.name} (not writable: {path})")
        assert status.detail.endswith(f"polls still land in {path.name}-wal, nothing lost yet")
    for record in records[half:]:
        recorder.submit(record)
    wait_for(
        lambda: recorder.status.written == len(records) and recorder.status.state == "recording",
        "the fold once writable",
    )
    recorder.close()
    assert "read-only" in [s.state for s in seen]
    assert stored_times(path) == [r.at for r in records]
    assert integrity(path) == "ok"
