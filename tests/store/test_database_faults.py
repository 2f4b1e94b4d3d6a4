"""The history file under faults a real SQLite file can be put in: a COMMIT that fails, a folder no reader may write."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from console.cli import main
from console.metrics.vllm import ReplicaSample
from console.store.database import Store
from console.store.records import PollRecord
from console.targets import TargetResult

# A writer whose file-size limit stops the write-ahead log from growing: the INSERTs land in the page
# cache, the COMMIT has to write its frames and fails (EFBIG), and SQLite rolls the transaction back.
COMMIT_FAILS = textwrap.dedent(
    """
    import resource, signal, sys
    from console.metrics.vllm import ReplicaSample
    from console.targets import TargetResult
    from console.store.database import Store
    from console.store.records import PollRecord

    def poll(fleet, at):
        sample = ReplicaSample(at=at, counters={"requests": at}, running=1.0, waiting=0.0, kv_usage_by_engine={"0": 0.5})
        results = tuple(TargetResult(f"{fleet}-{i}", f"http://{fleet}-{i}/metrics", "up", sample, "", at) for i in range(40))
        return PollRecord(fleet, at, at, "scrape", 60.0, 1.0, results)

    store = Store.open(sys.argv[1])
    store.write_poll(poll("a", 1.0))
    store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing the process
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        store.write_poll(poll("b", 2.0))
        print("commit did not fail")
        sys.exit(3)
    except Exception as error:
        print("failed:", type(error).__name__, error)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    store.write_poll(poll("c", 3.0))  # a fleet first seen after the failure
    store.write_poll(poll("b", 4.0))  # the refused poll, written again
    """
)


def test_a_failed_commit_forgets_the_ids_it_cached(tmp_path):
    path = tmp_path / "h.sqlite"
    run = subprocess.run([sys.executable, "-c", COMMIT_FAILS, str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "failed:" in run.stdout
    store = Store.open(path, read_only=True)
    assert [f.name for f in store.fleets()] == ["a", "c", "b"]
    for fleet, at in (("a", 1.0), ("c", 3.0), ("b", 4.0)):
        ((poll_id, when),) = store.poll_times(fleet)
        assert when == at
        names = {r.name for r in store.poll(poll_id).results}
        assert names == {f"{fleet}-{i}" for i in range(40)}, fleet  # every sample's replica exists, in its own fleet
    dangling = store.connection.execute(
        "SELECT count(*) FROM samples WHERE replica_id NOT IN (SELECT id FROM replicas)"
        " OR poll_id NOT IN (SELECT id FROM polls)"
    ).fetchone()[0]
    assert dangling == 0


@pytest.fixture
def immutable_folder(tmp_path):
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed: cannot make a folder nobody may write")
    folder = tmp_path / "readers-cannot-write"
    folder.mkdir()
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=False)


def test_a_reader_who_cannot_write_the_folder_still_reads_a_file_no_recorder_has_open(
    immutable_folder, tmp_path, capsys
):
    path = immutable_folder / "h.sqlite"
    source = Store.open(path)
    sample = ReplicaSample(
        at=100.0, counters={"requests": 7.0}, running=2.0, waiting=0.0, kv_usage_by_engine={"0": 0.25}
    )
    source.write_poll(
        PollRecord(
            "f", 100.0, 100.0, "scrape", 60.0, 1.0, (TargetResult("r", "http://r/metrics", "up", sample, "", 100.0),)
        )
    )
    source.close()  # the last connection: the write-ahead log is folded in and removed
    locked = subprocess.run(["chattr", "+i", str(immutable_folder)], capture_output=True, text=True)
    if locked.returncode != 0:
        pytest.skip(f"chattr +i refused here: {locked.stderr.strip()}")
    assert not (immutable_folder / "h.sqlite-shm").exists()
    store = Store.open(path, read_only=True)
    ((poll_id, _),) = store.poll_times("f")
    assert store.poll(poll_id).results[0].sample.counters["requests"] == 7.0
    store.close()
    assert main(["export", "--db", str(path), "--from", "0", "--to", "now", "--format", "jsonl"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 7.0


def test_an_empty_db_path_is_refused_not_taken_for_the_default(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["history", "--db", ""])
    assert stop.value.code == 2
    assert "--db: empty path" in capsys.readouterr().err
