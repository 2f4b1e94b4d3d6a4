"""--output, one rule for every verb: files replaced whole, devices and pipes written through and kept, folders
and the history's own files refused. Device nodes are made in a temporary folder (this suite runs as root, as
the machines' users do; without the right to make one, that case is skipped and says why)."""

from __future__ import annotations

import os
import stat
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
