"""Hostile history files: a damaged page, a -shm cut short or made immutable under a running recorder,
a file-size limit. Real SQLite files damaged on disk, real `capcon` subprocesses, real faults (a page
overwritten, truncate(2), chattr +i, RLIMIT_FSIZE); no mocks.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from console.commands.replay import open_app
from console.store.database import CHECK_SECONDS, DamagedHistory, Store, quick_check
from console.store.recorder import Recorder
from tests.cpu_time import cpu_seconds
from tests.store.hostile import (
    EVERYTHING,
    build_history,
    capcon,
    damaged_copy,
    digest,
    one_line,
    poll_count,
)
from tests.store.recorder_polls import RECENT, REPO, cli_env, integrity, renumbered, sim_polls, stored_times, wait_for

DEAD_TARGET = ["--target", "http://127.0.0.1:9"]  # nothing listens: the file is refused before any poll


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    # 1,200 polls of two replicas: every table and index of interest spans several leaf pages.
    return build_history(tmp_path_factory.mktemp("damage") / "pristine.sqlite", polls=1200)


# --- a damaged page ----------------------------------------------------------------

READERS = {
    "history": ["history", *EVERYTHING],
    "history --json": ["history", *EVERYTHING, "--json"],
    "history --by day": ["history", *EVERYTHING, "--by", "day"],
    "export samples": ["export", *EVERYTHING, "--format", "csv"],
    "export figures": ["export", *EVERYTHING, "--format", "jsonl", "--what", "figures"],
    "export flags": ["export", *EVERYTHING, "--format", "jsonl", "--what", "flags"],
}
# Which reader must meet which damage (the others may not read that page at all: exit 0 is right then).
MUST_FAIL = {
    "samples": {"history", "history --json", "history --by day", "export samples", "export figures"},
    "polls_fleet_at": {"history", "history --json", "history --by day", "export samples", "export figures"},
    "flag_events": {"export flags"},
}


@pytest.mark.parametrize("table", sorted(MUST_FAIL))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_of_a_damaged_file_says_so_in_one_line_and_exit_2(pristine, tmp_path, table, reader):
    path = damaged_copy(pristine, tmp_path, table)
    verb = READERS[reader][0]
    done = capcon(READERS[reader][0], "--db", str(path), *READERS[reader][1:], data_home=tmp_path / "data")
    if reader in MUST_FAIL[table]:
        assert done.returncode == 2, done.stderr
    if done.returncode == 0:
        assert b"Traceback" not in done.stderr
        return
    assert done.returncode == 2
    line = one_line(done.stderr, verb)
    assert f"{path}: the history file is damaged" in line and ".recover" in line, line


def test_replay_of_a_damaged_file_is_one_line_and_exit_2(pristine, tmp_path):
    path = damaged_copy(pristine, tmp_path, "polls_fleet_at")  # read while the replay indexes the polls
    done = capcon("replay", "--db", str(path), data_home=tmp_path / "data", timeout=60)
    assert done.returncode == 2
    assert ".recover" in one_line(done.stderr, "replay")


def test_a_replay_that_meets_the_damage_while_playing_says_what_to_do(pristine, tmp_path):
    import argparse

    path = damaged_copy(pristine, tmp_path, "samples")
    args = argparse.Namespace(db=str(path), fleet=[], start=None, end=None, speed=1.0, paused=True, theme=None)
    app = open_app(args)  # opens: the damaged page is in the middle of the recording
    try:
        controller = app.driver.controller
        with pytest.raises(DamagedHistory, match="the history file is damaged"):  # noqa: PT012 - steps to the damaged page
            for _ in range(2000):  # the console shows this error's words and stays on the last frame
                controller.step(1)
    finally:
        app.driver.controller.replay.close()


@pytest.mark.parametrize("verb", ["record", "watch"])
def test_a_writer_refuses_a_damaged_file_before_writing_anything(pristine, tmp_path, verb):
    path = damaged_copy(pristine, tmp_path, "samples")
    before = digest(path)
    extra = ["--duration", "3"] if verb == "record" else ["--once", "--interval", "0.5"]
    done = capcon(verb, *DEAD_TARGET, "--interval", "1", *extra, "--db", str(path), data_home=tmp_path / "data")
    assert done.returncode == 2
    line = one_line(done.stderr, verb)
    assert f"{path}: the history file is damaged" in line and "--salvage NEW" in line, line
    assert b"polls written" not in done.stdout
    assert digest(path) == before
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


@pytest.mark.slow  # a big damaged file: a long run
def test_the_salvage_the_words_give_keeps_every_row_off_the_damaged_page(pristine, tmp_path):
    path = damaged_copy(pristine, tmp_path, "samples")
    line = one_line(capcon("history", "--db", str(path), *EVERYTHING, data_home=tmp_path / "data").stderr, "history")
    assert f"capcon history --db {path} --salvage NEW" in line, line
    new = tmp_path / "saved.sqlite"
    done = capcon("history", "--db", str(path), "--salvage", str(new), data_home=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert b"1200 polls" in done.stdout and b"damaged pages of samples are lost" in done.stdout, done.stdout
    connection = sqlite3.connect(new)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        kept = connection.execute("SELECT count(*) FROM samples").fetchone()[0]
    finally:
        connection.close()
    assert 2400 - 40 < kept < 2400  # one 4 KB page of ~500-byte samples lost, no more
    for reader in READERS.values():
        done = capcon(reader[0], "--db", str(new), *reader[1:], data_home=tmp_path / "data")
        assert done.returncode == 0, done.stderr
    refused = capcon("history", "--db", str(path), "--salvage", str(new), data_home=tmp_path / "data")
    assert refused.returncode == 2 and "already exists" in one_line(refused.stderr, "history")


def test_a_big_files_check_finishes_on_the_writer_thread_before_the_first_write(pristine, tmp_path):
    """Past its time budget at open, the check goes on before anything is written; a damaged file is then written no more."""
    path = damaged_copy(pristine, tmp_path, "samples")
    before = digest(path)

    def slow_open(target, **options):
        options.setdefault("check_seconds", 0.0)  # as a file too big to read in CHECK_SECONDS
        return Store.open(target, **options)

    recorder = Recorder(path, open_store=slow_open, retry_seconds=0.1)
    assert recorder.checking
    recorder.start()
    records = renumbered(sim_polls(2, replicas=1), start=RECENT)
    for record in records:
        recorder.submit(record)
    wait_for(lambda: recorder.status.state == "error", "the damaged state")
    assert "the history file is damaged" in recorder.status.detail
    status = recorder.close(timeout=0.5)
    assert status.waiting == len(records) and status.written == 0
    assert digest(path) == before  # not one byte written into the damaged file

    whole = tmp_path / "whole.sqlite"
    shutil.copyfile(pristine, whole)
    recorder = Recorder(whole, open_store=slow_open, retry_seconds=0.1)
    recorder.start()
    for record in records:
        recorder.submit(record)
    wait_for(lambda: recorder.status.written == len(records), "the polls, once the check passed")
    assert recorder.close().state == "stopped"
    assert [at for at in stored_times(whole) if at >= RECENT] == [r.at for r in records]


def test_the_damage_check_fits_its_time_budget_on_this_file(pristine):
    connection = sqlite3.connect(pristine)
    try:
        started = cpu_seconds()
        assert quick_check(connection, None) is None
        # The budget is wall time against a cold disk; its CPU share here must leave a wide margin.
        assert cpu_seconds() - started < CHECK_SECONDS / 4
    finally:
        connection.close()


# --- the -shm file under a running recorder -------------------------------------------


def _immutable_available(path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    probe = path.parent / "chattr-probe"
    probe.write_bytes(b"")
    made = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True)
    subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    probe.unlink()
    if made.returncode != 0:
        pytest.skip(f"chattr +i refused here: {made.stderr.strip()}")


class RunningRecorder:
    """`capcon record` on a file, one poll a second, observed without opening the file (the test's own
    SQLite connection would map the -shm too, and die of the faults made to it)."""

    def __init__(self, path: Path, targets: list[str], data_home: Path) -> None:
        self.path = path
        self.wal = Path(f"{path}-wal")
        self.shm = Path(f"{path}-shm")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "console", "record", *targets, "--interval", "1", "--db", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=cli_env(data_home),
        )

    def between_polls(self, writes: int = 1) -> None:
        """Return just after the recorder wrote `writes` more times, in the idle second before its next poll
        (a fault made during the millisecond of a transaction is the window this cannot cover)."""
        wait_for(lambda: self.wal.exists() and self.shm.exists(), "the -wal and -shm", seconds=30)
        for _ in range(writes):
            before = self.wal.stat().st_mtime_ns
            wait_for(lambda before=before: self.wal.stat().st_mtime_ns != before, "a write", seconds=30, every=0.005)
        time.sleep(0.25)

    def stop(self) -> tuple[int, str, str]:
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=30)
        return self.process.returncode, out, err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _written(out: str) -> int:
    return int(re.search(r"stopped: (\d+) polls? written", out).group(1))


@pytest.fixture
def recording(tmp_path, targets):
    runs: list[RunningRecorder] = []

    def start() -> RunningRecorder:
        run = RunningRecorder(tmp_path / "history.sqlite", targets, tmp_path / "data")
        runs.append(run)
        return run

    yield start
    for run in runs:
        subprocess.run(["chattr", "-i", str(run.shm)], capture_output=True)
        run.kill()


def test_a_shm_cut_short_under_the_recorder_is_grown_back_and_nothing_is_lost(recording):
    run = recording()
    run.between_polls(2)
    os.truncate(run.shm, 0)  # what `: > history.sqlite-shm` or a clean-up script does
    run.between_polls(2)
    os.truncate(run.shm, 4096)
    run.between_polls(2)
    code, out, err = run.stop()
    assert code == 0, err  # not -SIGBUS (-7), which it was
    assert _written(out) == poll_count(run.path) >= 4
    assert integrity(run.path) == "ok"


def test_an_immutable_shm_is_read_only_the_polls_wait_and_land_once_it_takes_writes(recording, tmp_path):
    _immutable_available(tmp_path)
    run = recording()
    run.between_polls(2)
    subprocess.run(["chattr", "+i", str(run.shm)], check=True)
    time.sleep(3.5)  # three or four polls wait in memory
    subprocess.run(["chattr", "-i", str(run.shm)], check=True)
    run.between_polls(1)
    code, out, err = run.stop()
    assert code == 0, err
    assert f"history read-only: not writable: {run.shm} (immutable" in err
    assert "recording again" in err
    assert _written(out) == poll_count(run.path) >= 5
    assert integrity(run.path) == "ok"


def test_a_shm_still_immutable_at_exit_counts_the_polls_not_written_exit_1(recording, tmp_path):
    _immutable_available(tmp_path)
    run = recording()
    run.between_polls(2)
    subprocess.run(["chattr", "+i", str(run.shm)], check=True)
    time.sleep(2.5)
    code, out, err = run.stop()  # waits its 5 s for the file, then gives up on it: never touches the mapping
    subprocess.run(["chattr", "-i", str(run.shm)], check=True)
    assert code == 1, err
    waiting = int(re.search(r"history \S+: (\d+) polls? not written", err).group(1))
    assert waiting >= 2
    assert _written(out) == poll_count(run.path)
    assert integrity(run.path) == "ok"


def test_a_deleted_shm_is_reopened_and_every_poll_lands(recording):
    run = recording()
    run.between_polls(2)
    run.shm.unlink()
    run.between_polls(4)
    code, out, err = run.stop()
    assert code == 0, err
    # Polls went on after the deletion (more than the two before it; on a loaded machine one of the writes the
    # test waits for can be the start event or a checkpoint), and each one taken is in the file.
    assert _written(out) == poll_count(run.path) >= 4
    assert integrity(run.path) == "ok"


# --- a file-size limit ---------------------------------------------------------------------

SIZE_LIMITED = textwrap.dedent(
    """
    import resource, sys
    from console.metrics.vllm import ReplicaSample
    from console.targets import TargetResult
    from console.store.database import Store
    from console.store.records import PollRecord
    from console.store.recorder import state_of

    store = Store.open(sys.argv[1])
    store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # SIGXFSZ is ignored by Python: the write fails with EFBIG
    sample = ReplicaSample(at=5.0, counters={"requests": 1.0}, running=1.0)
    results = tuple(TargetResult(f"r{i}", f"http://r{i}/metrics", "up", sample, "", 5.0) for i in range(40))
    try:
        store.write_poll(PollRecord("f", 5.0, 5.0, "scrape", 60.0, 1.0, results))
    except Exception as error:
        print("|".join([error.__class__.__name__, str(error), *state_of(error, sys.argv[1])]))
    """
)


def test_a_write_past_the_file_size_limit_is_the_full_state_not_a_disk_error(tmp_path):
    path = tmp_path / "history.sqlite"
    Store.open(path).close()
    run = subprocess.run(
        [sys.executable, "-c", SIZE_LIMITED, str(path)], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    kind, sqlite_words, state, words = run.stdout.strip().split("|")
    assert (kind, sqlite_words) == ("OperationalError", "disk I/O error")  # what SQLite says
    assert state == "full" and words == "the file-size limit (ulimit -f) of 4096 bytes is reached", (
        run.stdout + run.stderr
    )


@pytest.mark.slow  # a recorder run: a long run
def test_record_under_a_file_size_limit_is_full_and_every_poll_lands_when_it_is_raised(tmp_path, targets):
    path = tmp_path / "history.sqlite"
    Store.open(path).close()
    limit = path.stat().st_size + 24 * 1024  # room for a few polls of two replicas in the log

    def limited() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    process = subprocess.Popen(
        [sys.executable, "-m", "console", "record", *targets, "--interval", "1", "--db", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cli_env(tmp_path / "data"),
        preexec_fn=limited,
    )
    try:
        said: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            said.append(line)
            if "history full" in line:
                break
        assert "history full: the file-size limit (ulimit -f)" in said[-1] and "polls wait in memory" in said[-1], said
        time.sleep(2.5)  # more polls wait
        resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        wait_for(lambda: "recording again" in process.stderr.readline(), "recording again", seconds=30)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert _written(out) == len(stored_times(path)) >= 4  # none lost while the limit held
    assert integrity(path) == "ok"
