"""The `-shm` file beside a history in WAL mode: SQLite maps it into the memory of every connection.

A mapped file that shrinks (truncated by another program) or stops taking writes (`chattr +i`,
a read-only remount) does not fail a call: the next access to the lost page kills the process
with SIGBUS, whatever it was doing, so the recorder would vanish with its queued polls and an
empty stderr. SQLite offers no way around the mapping for a file other processes read at the
same time (`locking_mode=EXCLUSIVE` keeps the index in private memory, but then no reader can
open the file while the recorder runs: no replay of a growing file, no `history` or `export`).

So the recorder looks before it touches the file (`SharedMemory.check()` before every
transaction, checkpoint and close: two system calls, no file descriptor):

- a `-shm` cut short is grown back to the length SQLite mapped. Its content is then zeros,
  which SQLite reads as an index to rebuild from the log, as after a crash: nothing is lost;
- a `-shm` that does not take writes is a "read-only" state: the connection is left alone (not
  even closed: closing writes to the index) and polls wait until it takes writes again; at exit
  they are counted as not written;
- a `-shm` deleted or replaced by another file means this process and the others no longer
  share one index (nor its locks): the connection is closed (its mapping of the old file is still
  valid) and the file reopened.

What it cannot cover: a `-shm` truncated or made immutable during the millisecond a transaction
takes. No file descriptor is opened on the `-shm` here: closing any descriptor of a file drops every
POSIX lock this process holds on it, SQLite's included.
"""

from __future__ import annotations

import os
import sqlite3
import stat

REPLACED = "replaced"


class SharedMemory:
    def __init__(self, path: str) -> None:
        self.path = f"{path}-shm"
        self.identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file SQLite mapped
        self.size = 0  # the longest it was seen while mapped: what SQLite may touch
        self.restored = 0  # how many times it was grown back

    def note(self) -> None:
        """After SQLite used the file (opened it, wrote through it): remember which file and how long."""
        try:
            found = os.stat(self.path)
        except OSError:
            self.identity, self.size = None, 0  # not in WAL mode (yet): nothing mapped
            return
        identity = (found.st_dev, found.st_ino)
        if identity != self.identity:
            self.identity, self.size = identity, found.st_size
        else:
            self.size = max(self.size, found.st_size)

    def check(self) -> str | None:
        """None when the connection may be used; REPLACED (close and reopen); else words: wait, touch nothing."""
        if self.identity is None:
            return None
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return REPLACED
        except OSError:
            return None  # the folder cannot be searched now: the mapping itself is unharmed
        if (found.st_dev, found.st_ino) != self.identity:
            return REPLACED
        if not takes_writes(self.path, found):
            return f"{self.path} (immutable or on a read-only mount; SQLite writes it through memory)"
        if found.st_size < self.size:
            try:
                os.truncate(self.path, self.size)  # by name: no descriptor, no lost lock
            except OSError as error:
                return f"{self.path} (cut short to {found.st_size} bytes and cannot be grown back: {error.strerror})"
            self.restored += 1
        return None


def takes_writes(path: str, found: os.stat_result | None = None) -> bool:
    """Whether writes through a mapping of `path` still land: not immutable, not on a read-only mount.

    Permission bits do not matter to a mapping made while they allowed writing, so a refusal only
    counts when they would allow this process to write (root: always)."""
    try:
        if os.access(path, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
            return True
        found = found or os.stat(path)
    except OSError:
        return True
    uid = os.geteuid()
    if uid == 0:
        return False
    if found.st_uid == uid:
        allowed = found.st_mode & stat.S_IWUSR
    elif found.st_gid == os.getegid() or found.st_gid in os.getgroups():
        allowed = found.st_mode & stat.S_IWGRP
    else:
        allowed = found.st_mode & stat.S_IWOTH
    return not allowed


def abandon(connection: sqlite3.Connection) -> None:
    """Keep `connection` alive to the end of the process, never closed: closing writes to the index in
    a `-shm` that may no longer take it. The process exits without SQLite touching the file again."""
    import ctypes  # noqa: PLC0415 - only on this rare path

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(connection))
    _ABANDONED.append(connection)


_ABANDONED: list[sqlite3.Connection] = []
