"""--output, one rule for every verb: files replaced whole, devices and pipes written through and kept, folders
and the history's own files refused. Device nodes are made in a temporary folder (this suite runs as root, as
the machines' users do; without the right to make one, that case is skipped and says why)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from console.errors import UserError
from console.output_file import refuse_output, write_whole

NULL_DEVICE = os.makedev(1, 3)  # the kernel's null device, the node /dev/null is


def null_device(folder: Path) -> Path:
    path = folder / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, NULL_DEVICE)
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD); this user has not got it")
    return path


def test_a_device_is_written_through_and_is_still_a_device_after(tmp_path):
    device = null_device(tmp_path)
    refuse_output(str(device), tmp_path / "history.sqlite", "a rule file")
    write_whole(str(device), "groups: []\n")
    assert stat.S_ISCHR(device.stat().st_mode) and device.stat().st_rdev == NULL_DEVICE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temporary file left beside it


def test_a_symlink_to_a_device_writes_through_the_device(tmp_path):
    device = null_device(tmp_path)
    link = tmp_path / "out.yml"
    link.symlink_to(device)
    write_whole(str(link), "groups: []\n")
    assert link.is_symlink() and stat.S_ISCHR(device.stat().st_mode)


def test_a_fifo_is_written_through_to_its_reader_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_whole(str(fifo), "groups: []\n")
    reader.join(10)
    assert got == ["groups: []\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_regular_file_is_replaced_whole_keeping_its_permissions(tmp_path):
    target = tmp_path / "rules.yml"
    target.write_text("old")
    target.chmod(0o640)
    write_whole(str(target), "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rules.yml"]


@pytest.mark.parametrize("side", ["", "-wal", "-shm", "-journal"])
def test_the_history_file_and_its_side_files_are_refused_by_any_name(tmp_path, side):
    history = tmp_path / "history.sqlite"
    history.write_bytes(b"SQLite format 3\x00" + bytes(100))
    (tmp_path / f"history.sqlite{side}").write_bytes(b"x") if side else None
    other_name = tmp_path / "alias"
    other_name.symlink_to(tmp_path / f"history.sqlite{side}")
    for output in (tmp_path / f"history.sqlite{side}", other_name):
        with pytest.raises(UserError, match="history file"):
            refuse_output(str(output), history, "a rule file")


def test_a_folder_is_refused_in_one_line(tmp_path):
    with pytest.raises(UserError) as refused:
        refuse_output(str(tmp_path), tmp_path / "history.sqlite", "a rule file")
    assert "is a folder; expected a file path" in str(refused.value) and "\n" not in str(refused.value)


# --- every verb that writes a file, as a user runs it -----------------------------------------------------------

PLAN = Path(__file__).resolve().parents[1] / "plans" / "chat-8b-l40s.yaml"


def capcon(*argv: str, data_home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "XDG_DATA_HOME": str(data_home)},
        check=False,
    )


def test_rules_onto_a_device_a_fifo_and_a_folder(tmp_path):
    device = null_device(tmp_path)
    done = capcon("rules", str(PLAN), "--output", str(device), data_home=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(device.stat().st_mode) and device.stat().st_rdev == NULL_DEVICE

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    done = capcon("rules", str(PLAN), "--output", str(fifo), data_home=tmp_path / "data")
    reader.join(30)
    assert done.returncode == 0, done.stderr
    assert got and got[0].startswith("# Prometheus rules for plan") and stat.S_ISFIFO(fifo.stat().st_mode)

    done = capcon("rules", str(PLAN), "--output", str(tmp_path), data_home=tmp_path / "data")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "is a folder; expected a file path" in done.stderr


def test_rules_refuses_the_default_history_file_and_writes_stdout_for_a_dash(tmp_path):
    data = tmp_path / "data"
    history = data / "capcon" / "history.sqlite"
    history.parent.mkdir(parents=True)
    history.write_bytes(b"SQLite format 3\x00" + bytes(100))
    before = history.read_bytes()
    done = capcon("rules", str(PLAN), "--output", str(history), data_home=data)
    assert done.returncode == 2 and "the history file" in done.stderr
    assert history.read_bytes() == before
    done = capcon("rules", str(PLAN), "--output", "-", data_home=data)
    assert done.returncode == 0 and done.stdout.startswith("# Prometheus rules for plan")
    assert not (Path(__file__).resolve().parents[1] / "-").exists()


def test_export_onto_a_device_keeps_the_device(tmp_path):
    device = null_device(tmp_path)
    db = tmp_path / "history.sqlite"
    from console.store.database import Store
    from tests.store.recorder_polls import sim_polls

    store = Store.open(db)
    for record in sim_polls(2, replicas=1):
        store.write_poll(record)
    store.close()
    done = capcon(
        "export", "--db", str(db), "--from", "-1h", "--to", "now", "--format", "csv", "--output", str(device),
        data_home=tmp_path / "data",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(device.stat().st_mode) and device.stat().st_rdev == NULL_DEVICE
