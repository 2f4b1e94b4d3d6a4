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
from pathlib import Path

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
    identities = {found: path for path in guarded if (found := _identity(path)) is not None}
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


def writes_in_place(path: str) -> bool:
    """A device, FIFO or socket (through a symlink too): written as it comes, since renaming over it would
    replace the device with a regular file."""
    try:
        found = os.stat(path)
    except OSError:
        return False
    return not stat.S_ISREG(found.st_mode) and not stat.S_ISDIR(found.st_mode)


def write_whole(path: str, text: str) -> None:
    """`text` into `path` by the module's rule (call `refuse_output` first). A failure raises UserError."""
    shown = f"--output {path}"
    if writes_in_place(path):
        try:
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
        except OSError as error:
            raise UserError(
                f"{shown}: write failed ({os_error_words(error)}); what it received is incomplete"
            ) from None
        return
    target = os.path.realpath(path)  # through a symlink: the file it names is replaced, not the link
    try:
        found: os.stat_result | None = os.stat(target)
    except OSError:
        found = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=os.path.dirname(target) or ".")
    except OSError as error:
        raise UserError(
            f"{shown}: cannot write beside it ({os_error_words(error)}); expected a writable file path in an existing folder"
        ) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())  # on disk before it takes the name: a crash leaves the old file or the new one
        os.chmod(temporary, stat.S_IMODE(found.st_mode) if found is not None else 0o666 & ~current_umask())
        os.replace(temporary, target)
    except OSError as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        left = "was left as it was" if found is not None else "was not created"
        raise UserError(f"{shown}: write failed ({os_error_words(error)}); {path} {left}") from None
