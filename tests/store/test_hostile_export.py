"""`capcon export --output` never destroys recorded polls and never leaves a file that looks whole but is not.

Real history files, real `capcon export` subprocesses, real faults: the history itself (by its name, a
symlink, a hard link, its -wal and -shm), another SQLite file, /dev/full, a file-size limit
(RLIMIT_FSIZE), a reader that goes away.
"""

from __future__ import annotations

import csv
import io
import os
import resource
import shutil
import sqlite3
import stat
import subprocess
import sys

import pytest

from tests.store.hostile import EVERYTHING, build_history, capcon, digest, one_line, poll_count
from tests.store.recorder_polls import REPO, cli_env


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return build_history(tmp_path_factory.mktemp("export") / "history.sqlite", polls=300)


@pytest.fixture
def history(pristine, tmp_path):
    path = tmp_path / "history.sqlite"
    shutil.copyfile(pristine, path)
    return path


def export(history, output, *extra, data_home, **options):
    return capcon(
        "export",
        "--db",
        str(history),
        *EVERYTHING,
        "--format",
        "csv",
        "--output",
        str(output),
        *extra,
        data_home=data_home,
        **options,
    )


def untouched(history, before: str, polls: int = 300) -> None:
    assert digest(history) == before
    assert poll_count(history) == polls
    connection = sqlite3.connect(history)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        connection.close()


def held_open(path) -> subprocess.Popen:
    """Another process reading `path` until its stdin closes (in its own process: a fault to the -shm it maps
    must not take the test runner down with it)."""
    viewer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.execute('SELECT count(*) FROM polls').fetchone()\n"
            "print('ready', flush=True)\nsys.stdin.read()\nc.execute('SELECT count(*) FROM polls').fetchone()\nc.close()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert viewer.stdout.readline().strip() == "ready"
    return viewer


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


@pytest.mark.parametrize("name", ["itself", "symlink", "hard link", "relative", "-wal", "-shm", "-journal"])
def test_an_output_that_is_the_history_file_is_refused_and_every_poll_stays(history, tmp_path, name):
    before = digest(history)
    viewer = held_open(history)  # keeps the -wal and -shm in place, as a running recorder would
    output = {
        "itself": history,
        "relative": os.path.relpath(history, REPO),
        "-wal": f"{history}-wal",
        "-shm": f"{history}-shm",
        "-journal": f"{history}-journal",  # not there: still never written
    }.get(name)
    if name == "symlink":
        output = tmp_path / "last-hour.csv"
        output.symlink_to(history)
    elif name == "hard link":
        output = tmp_path / "last-hour.csv"
        os.link(history, output)
    done = export(history, output, data_home=tmp_path / "data")
    assert done.returncode == 2
    line = one_line(done.stderr, "export")
    assert str(history) in line and "the history file" in line, line
    assert done.stdout == b""
    viewer.stdin.close()
    assert viewer.wait(timeout=30) == 0  # had its -shm been cut short under it, it would have died of SIGBUS
    untouched(history, before)
    assert not (tmp_path / "history.sqlite-journal").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("form", ["database", "its -wal"])
def test_an_output_that_is_another_sqlite_file_is_refused(history, pristine, tmp_path, form):
    other = tmp_path / "other.db"
    shutil.copyfile(pristine, other)
    output = other
    viewer = held_open(other)  # keeps other.db-wal on disk
    if form == "its -wal":
        output = tmp_path / "other.db-wal"
        assert output.exists()
    before = digest(other) if form == "database" else digest(output)
    done = export(history, output, data_home=tmp_path / "data")
    assert done.returncode == 2
    line = one_line(done.stderr, "export")
    assert "SQLite" in line, line
    assert (digest(other) if form == "database" else digest(output)) == before
    viewer.stdin.close()
    assert viewer.wait(timeout=30) == 0


def test_standard_output_appended_to_the_history_is_refused(history, tmp_path):
    before = digest(history)
    with open(history, "ab") as appended:  # `capcon export ... >> history.sqlite`
        done = capcon(
            "export", "--db", str(history), *EVERYTHING, "--format", "csv", data_home=tmp_path / "data", stdout=appended
        )
    assert done.returncode == 2
    assert "standard output is" in one_line(done.stderr, "export")
    untouched(history, before)


def test_dev_full_is_one_line_and_exit_1(history, tmp_path):
    done = export(history, "/dev/full", data_home=tmp_path / "data")
    assert done.returncode == 1
    line = one_line(done.stderr, "export")
    assert "No space left on device" in line and "incomplete" in line, line
    with open("/dev/full", "w") as full:  # and as standard output
        done = capcon(
            "export", "--db", str(history), *EVERYTHING, "--format", "jsonl", data_home=tmp_path / "data", stdout=full
        )
    assert done.returncode == 1
    assert one_line(done.stderr, "export").startswith("capcon export: standard output: write failed")


def _file_size_limit(limit: int):
    def apply() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    return apply


def test_a_write_that_fails_half_way_leaves_the_old_file_whole_and_no_partial_one(history, tmp_path):
    full = export(history, tmp_path / "full.csv", data_home=tmp_path / "data")
    assert full.returncode == 0
    size = (tmp_path / "full.csv").stat().st_size
    assert size > 40_000
    old = tmp_path / "last-hour.csv"
    old.write_text("time,unix\nkept,1\n")
    for output, left in ((old, "was left as it was"), (tmp_path / "new.csv", "was not created")):
        done = export(history, output, data_home=tmp_path / "data", preexec_fn=_file_size_limit(size // 3))
        assert done.returncode == 1
        line = one_line(done.stderr, "export")
        assert "write failed" in line and "File too large" in line and f"{output} {left}" in line, line
    assert old.read_text() == "time,unix\nkept,1\n"
    assert not (tmp_path / "new.csv").exists()
    assert leftovers(tmp_path) == []


def test_a_whole_export_replaces_the_file_a_symlink_names_keeping_its_mode(history, tmp_path):
    target = tmp_path / "exports" / "week.csv"
    target.parent.mkdir()
    target.write_text("stale\n")
    target.chmod(0o640)
    link = tmp_path / "week.csv"
    link.symlink_to(target)
    done = export(history, link, data_home=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(rows) == 600  # 300 polls of two replicas
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert leftovers(target.parent) == []


def test_an_output_directory_or_missing_folder_is_bad_input(history, tmp_path):
    for output, words in (
        (tmp_path, "is a folder; expected a file path"),
        (tmp_path / "no-such-folder" / "x.csv", "cannot write"),
    ):
        done = export(history, output, data_home=tmp_path / "data")
        assert done.returncode == 2
        assert words in one_line(done.stderr, "export")


def test_a_reader_that_goes_away_is_not_an_error(history, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "export", "--db", str(history), *EVERYTHING, "--format", "jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=cli_env(tmp_path / "data"),
    )
    process.stdout.readline()
    process.stdout.close()  # `| head -1`
    err = process.stderr.read()
    assert process.wait(timeout=60) == 0
    assert err == b""
