"""Where a verb's --output goes: one rule for every verb that writes a file.

- a regular file (or a new path) is replaced whole and at once: written beside it, renamed over it, so a failure
  leaves it as it was, and its permissions are kept;
- a character device, FIFO or socket (`/dev/stdout`, `/dev/null`, a pipe) is written through and never replaced;
- a folder, the history file or one of its -wal/-shm/-journal files (by any name), or any other SQLite file is
  refused in one line before anything is written.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from console.errors import UserError

# The first bytes of an SQLite database, of a write-ahead log (two byte orders) and of a rollback journal.
SQLITE_HEADER = b"SQLite format 3\x00"
WAL_MAGICS = (bytes.fromhex("377f0682"), bytes.fromhex("377f0683"))
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
SIDE_FILES = ("-wal", "-shm", "-journal")


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _head(path: str | int, size: int = 16) -> bytes | None:
    """The first bytes of a regular file (a path, or a descriptor read through /proc); None when unreadable."""
    try:
        if isinstance(path, int):
            path = f"/proc/self/fd/{path}"
        with open(path, "rb") as file:
            return file.read(size)
    except OSError:
        return None


def _sqlite_kind(head: bytes | None) -> str | None:
    if not head:
        return None
    if head.startswith(SQLITE_HEADER):
        return "an SQLite database"
    if head[:4] in WAL_MAGICS:
        return "an SQLite write-ahead log"
    if head.startswith(JOURNAL_MAGIC):
        return "an SQLite rollback journal"
    return None


def refuse_output(output: str | None, history: Path, wanted: str = "a csv or jsonl file") -> None:
    """UserError (exit 2) when writing `output` would overwrite the history (under any name), one of
    its -wal, -shm, -journal, any other SQLite file, or is a folder: no output destroys recorded polls.
    `wanted`: what the output is, in words ("a csv or jsonl file", "a rule file"). None or "-": stdout."""
    base = str(history)
    guarded = [base] + [base + side for side in SIDE_FILES]
    names = {os.path.realpath(path): path for path in guarded}
    identities = {identity: path for path in guarded if (identity := _identity(path)) is not None}
    found: os.stat_result | None  # what is at the output now: nothing yet, a file, a device, a pipe
    if output in (None, "-", ""):
        try:
            found = os.fstat(sys.stdout.fileno())
        except (OSError, ValueError):
            return
        if not stat.S_ISREG(found.st_mode):
            return
        if (found.st_dev, found.st_ino) in identities:
            raise UserError(
                f"standard output is {_which(identities[(found.st_dev, found.st_ino)], base)}; expected another file (--output FILE)"
            )
        kind = _sqlite_kind(_head(sys.stdout.fileno())) if found.st_size else None
        if kind:
            raise UserError(f"standard output is {kind}; expected {wanted}, or a pipe")
        return
    shown = f"--output {output}"
    real = os.path.realpath(output)
    if real in names:
        raise UserError(f"{shown}: is {_which(names[real], base)}; expected another file")
    try:
        found = os.stat(output)
    except FileNotFoundError:
        found = None
    except OSError as error:
        raise UserError(f"{shown}: cannot write ({error.strerror}); expected a writable file path") from None
    if found is not None and (found.st_dev, found.st_ino) in identities:
        raise UserError(
            f"{shown}: is {_which(identities[(found.st_dev, found.st_ino)], base)} (by another name); expected another file"
        )
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise UserError(f"{shown}: is a folder; expected a file path (a new one, {wanted} to replace, or a device)")
    if found is not None and stat.S_ISREG(found.st_mode) and found.st_size:
        head = _head(real)
        if head is None:
            raise UserError(
                f"{shown}: cannot be read to make sure it is no SQLite file; expected a file this user can read, or a new path"
            )
        kind = _sqlite_kind(head)
        if kind:
            raise UserError(f"{shown}: is {kind}; expected {wanted} to replace, or a new path")
    for side in SIDE_FILES:
        if real.endswith(side) and _sqlite_kind(_head(real[: -len(side)])):
            raise UserError(
                f"{shown}: is the {side[1:]} file of the SQLite file {output[: -len(side)]}; expected another file"
            )


def _which(path: str, base: str) -> str:
    if path == base:
        return f"{base}, the history file"
    return f"{path}, the {path[len(base) :]} file of the history file"


def os_error_words(error: OSError) -> str:
    return error.strerror or errno.errorcode.get(error.errno or 0, str(error))


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class OutputFailed(Exception):
    """A write to --output that failed once it had begun: a device or pipe (`in_place`) has part of it; a file
    replaced whole is as it was before, or not created (`left`), and the temporary file is gone."""

    def __init__(self, error: OSError, in_place: bool, left: str) -> None:
        super().__init__(os_error_words(error))
        self.error = error
        self.in_place = in_place
        self.left = left


@contextmanager
def opened_output(path: str) -> Iterator[TextIO]:
    """The stream for --output `path` by the module's rule (call `refuse_output` first): a device, FIFO or socket
    opened in place; else a temporary file beside the target, on disk and renamed over it when the block ends.
    Cannot be opened: UserError. A write, flush or rename that fails: OutputFailed. BrokenPipeError passes."""
    shown = f"--output {path}"
    target = os.path.realpath(path)  # through a symlink: the file it names is replaced, not the link
    try:
        found: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        found = None
    except OSError as error:
        raise UserError(f"{shown}: cannot write ({error.strerror}); expected a writable file path") from None
    if found is not None and not stat.S_ISREG(found.st_mode):
        # Renaming over a device would replace it with a regular file: written as it comes instead.
        try:
            file = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed by the `with file:` below, once opening is known to work
        except OSError as error:
            raise UserError(f"{shown}: cannot write ({error.strerror}); expected a writable file path") from None
        try:
            with file:
                yield file
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputFailed(error, True, "") from None
        return
    try:
        descriptor, temporary = tempfile.mkstemp(
            dir=os.path.dirname(target) or ".", prefix=f".{os.path.basename(target)}.", suffix=".part"
        )
    except OSError as error:
        raise UserError(
            f"{shown}: cannot write ({error.strerror}); expected a writable file path in an existing folder"
        ) from None
    left = "was left as it was" if found is not None else "was not created"
    try:
        try:
            with open(descriptor, "w", encoding="utf-8", newline="") as file:
                yield file
                file.flush()
                os.fsync(file.fileno())  # on disk before it takes the name: a crash leaves the old file or the new one
            os.chmod(temporary, stat.S_IMODE(found.st_mode) if found is not None else 0o666 & ~current_umask())
            os.replace(temporary, target)
        except OSError as error:
            raise OutputFailed(error, False, left) from None
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def write_whole(path: str, text: str) -> None:
    """`text` into `path` by the module's rule (call `refuse_output` first). A failure raises UserError."""
    try:
        with opened_output(path) as out:
            out.write(text)
    except OutputFailed as failed:
        happened = "what it received is incomplete" if failed.in_place else f"{path} {failed.left}"
        raise UserError(f"--output {path}: write failed ({failed}); {happened}") from None
