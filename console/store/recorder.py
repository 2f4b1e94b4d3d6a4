"""The recorder: writes polls to the history file on a thread of its own, so the console never waits on disk.

    recorder = Recorder(path, retention=None)          # raises HistoryError when `path` is not a history file;
                                                         # None: keep what the file already keeps (else the defaults)
    recorder.other_writers(fleets)                       # {fleet: OtherWriter} another live process records
    recorder.leave_out(taken)                            # polls of those fleets are not written (the header says why)
    recorder.start(detail={"fleets": [...]})            # starts the writer thread, records "recording_started"
    recorder.submit(record)                              # never blocks; queued for the thread
    recorder.event(at, kind, fleet=None, subject=None, detail=None)
    recorder.status                                      # RecorderStatus, read by the header every second
    recorder.close(timeout=5.0)                          # writes what is queued (bounded), stops the thread
    recorder.give_up()                                   # from a signal handler: close now, what is queued stays unwritten

A file that refuses writes (locked by another writer, read-only, full) is a state, not an
end: polls wait in memory (at most MAX_WAITING_SECONDS of them, or MAX_WAITING items; the
oldest go first and are counted in `dropped`) and land when the file takes writes again.
Each poll is its own transaction, so a recorder killed mid-write loses at most the poll
it was writing: the last interval.

A poll that can never be stored (no usable time) is counted in `unstored` and said until the
recorder stops, never retried, never taken for a refusing file. A damaged file (quick_check at
open, or SQLITE_CORRUPT later) is written no more: its polls wait and are counted. Before every
use of the file the `-shm` SQLite maps is looked at (console.store.shared_memory): one cut short
is grown back, one that takes no writes is a "read-only" state, so the recorder never dies of SIGBUS.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from console.store import retention as retention_rules
from console.store.database import (
    BUSY_TIMEOUT_MS,
    DamagedHistory,
    HistoryError,
    Store,
    Unfinished,
    damaged_words,
    is_damage,
)
from console.store.records import PollRecord
from console.store.retention import Retention, retention_in_force
from console.store.shared_memory import REPLACED, SharedMemory, abandon

# "off": every fleet of this session is recorded into the file by another live process;
# "partial": some are (the detail names them). Both leave watching untouched.
RecorderState = Literal["recording", "locked", "read-only", "full", "error", "stopped", "off", "partial"]

# Polls kept in memory while the file refuses writes: ten minutes of them, and never more
# than MAX_WAITING records (many fleets at a fast interval), oldest dropped first.
MAX_WAITING_SECONDS = 600.0
MAX_WAITING = 3000
RETRY_SECONDS = 1.0  # how soon a refused write (or open) is tried again
RETENTION_EVERY_SECONDS = 600.0
# One retention round does at most this many small transactions (an hour of raw data each),
# then the queued polls go first; a backlog (the first start on an old file) is worked off
# RETENTION_CATCH_UP_SECONDS apart.
RETENTION_CHUNKS = 8
RETENTION_CATCH_UP_SECONDS = 1.0

STARTED = "recording_started"
STOPPED = "recording_stopped"
HOST = socket.gethostname()
# A writer on another host is live while it polls: its last poll at most this many of its
# intervals (plus a margin) ago. A pid cannot be checked across hosts.
OTHER_HOST_INTERVALS = 3
OTHER_HOST_MARGIN_SECONDS = 10.0
CLOSE_RETRY_SECONDS = 0.1  # on close, a refused write is tried again this soon, until the deadline
# SQLite folds the -wal log back into the file at checkpoints; a file that takes no writes of
# its own (made immutable) lets the log grow without end while polls still land in it. A
# checkpoint is tried every CHECKPOINT_EVERY polls and after each retention round; a failing
# one, or a log past MAX_WAL_BYTES, is shown.
CHECKPOINT_EVERY = 100
MAX_WAL_BYTES = 64 * 1024 * 1024

# Within this many bytes of a size limit, or with less free space than this, a failed write is "full".
FULL_MARGIN_BYTES = 256 * 1024

# Short words for the header ("✖ rec locked: another writer holds it, 12 waiting").
REFUSING = ("locked", "read-only", "full", "error")

REASONS = {
    "locked": "another writer holds it",
    "read-only": "not writable",
    "full": "disk or size limit full",
}


@dataclass(frozen=True)
class RecorderStatus:
    state: RecorderState
    detail: str = ""  # words for the header when the state is not "recording"
    written: int = 0  # polls committed to the file
    waiting: int = 0  # polls queued, not yet written
    dropped: int = 0  # polls given up because the queue was full for too long
    path: str = ""
    unstored: int = 0  # polls that could never be stored (an impossible time, say): counted, not retried


@dataclass(frozen=True)
class _Event:
    at: float
    kind: str
    fleet: str | None
    subject: str | None
    detail: dict | None


def polls(count: int) -> str:
    """ "1 poll", "5 polls"."""
    return f"{count} poll{'' if count == 1 else 's'}"


def unwritable(path: str) -> str | None:
    """Which of the history file, its -wal and -shm refuses writes (no permission, immutable), or None.

    Asked with access(2), not by opening: closing a descriptor of a file drops every POSIX lock this
    process holds on it, SQLite's own locks included. An immutable file refuses writes even to root."""
    for candidate in (path, f"{path}-wal", f"{path}-shm"):
        if not os.path.exists(candidate):
            continue
        try:
            if not os.access(candidate, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
                return candidate
        except OSError:
            return candidate
    return None


def size_limit_reached(path: str) -> int | None:
    """The file-size limit (RLIMIT_FSIZE, `ulimit -f`) when the history or its log has reached it, else None."""
    try:
        import resource  # noqa: PLC0415 - POSIX only
    except ImportError:  # not a module of ours: the standard library has none on Windows, nor a size limit to meet
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY:
        return None
    sizes = []
    for candidate in (path, f"{path}-wal", f"{path}-journal"):
        try:
            sizes.append(os.path.getsize(candidate))
        except OSError:
            pass
    # A write that crosses the limit fails with EFBIG: the file stops within a page or two of it.
    return soft if sizes and max(sizes) + FULL_MARGIN_BYTES >= soft else None


def disk_full(path: str) -> bool:
    """Whether the file system holding the history has (almost) no room left for this process."""
    try:
        found = os.statvfs(Path(path).parent)
    except OSError:
        return False
    free = (found.f_bfree if os.geteuid() == 0 else found.f_bavail) * found.f_frsize
    return free < FULL_MARGIN_BYTES


def state_of(error: BaseException, path: str | None = None) -> tuple[RecorderState, str]:
    """The recorder state an SQLite (or opening) error means, with words for the header.

    SQLite reports a write to a file that does not take writes (immutable, permissions changed
    under it) as a "disk I/O error", and so a write past the file-size limit (EFBIG) or, on some
    paths, to a full disk: with `path`, those are told apart from a failing disk."""
    if isinstance(error, DamagedHistory):
        return "error", str(error)
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    words = str(error)
    lowered = words.lower()
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in lowered:
        return "locked", REASONS["locked"]
    if primary == sqlite3.SQLITE_FULL or "disk is full" in lowered or "no space left" in lowered:
        return "full", REASONS["full"]
    if (
        primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN)
        or "readonly" in lowered
        or "permission denied" in lowered
        or "operation not permitted" in lowered
        or "unable to open database file" in lowered
    ):
        return "read-only", REASONS["read-only"]
    if primary == sqlite3.SQLITE_IOERR or "disk i/o error" in lowered:
        refusing = unwritable(path) if path else None
        if refusing is not None:
            return "read-only", f"not writable: {refusing}"
        limit = size_limit_reached(path) if path else None
        if limit is not None:
            return "full", f"the file-size limit (ulimit -f) of {limit} bytes is reached"
        if path and disk_full(path):
            return "full", f"no space left on the disk holding {path}"
        return "error", f"a write failed (SQLite: {words}); check the file and its disk"
    if path and is_damage(error):
        return "error", damaged_words(path, words)
    return "error", words


@dataclass(frozen=True)
class OtherWriter:
    """Another process recording a fleet into the same file."""

    fleet: str
    pid: int
    command: str  # "record", "watch", "demo"
    host: str | None  # None: written by a capcon that did not record its host

    def words(self, path: str) -> str:
        where = "on this host" if self.host == HOST else f"on host {self.host or 'unknown'}"
        return f"fleet {self.fleet!r} is already being recorded into {path} by capcon {self.command} (pid {self.pid}) {where}"


def pid_alive(pid: int, since: float) -> bool:
    """Whether process `pid` on this host is running and was already running at `since` (a reused pid is not the writer)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, under another user
    except OSError:
        return False
    started = _process_started_at(pid)
    return started is None or started <= since + 1.0


def _process_started_at(pid: int) -> float | None:
    """When `pid` started (unix seconds), from /proc; None where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as stat:
            boot = next(float(line.split()[1]) for line in stat if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def other_writers(
    store: Store,
    fleets: list[str],
    now: float,
    *,
    host: str = HOST,
    own_pid: int | None = None,
    alive: Callable[[int, float], bool] = pid_alive,
) -> dict[str, OtherWriter]:
    """Of `fleets`, those another live process records into `store`: a "recording_started" with no
    later "recording_stopped" of its pid, whose pid runs on this host (or, from another host, whose
    fleet was polled within a few of its intervals). A SIGKILLed writer's session blocks no one."""
    own_pid = os.getpid() if own_pid is None else own_pid
    open_sessions: dict[tuple[str | None, int], tuple[float, dict]] = {}
    rows = store.connection.execute(
        "SELECT at, kind, detail FROM events WHERE kind IN (?, ?) ORDER BY at, id", (STARTED, STOPPED)
    )
    for at, kind, detail in rows:
        try:
            detail = json.loads(detail) if detail else {}
            key = (detail.get("host"), int(detail["pid"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        if kind == STARTED:
            open_sessions[key] = (at, detail)
        else:
            open_sessions.pop(key, None)
    wanted = set(fleets)
    found: dict[str, OtherWriter] = {}
    for (writer_host, pid), (at, detail) in open_sessions.items():
        theirs = [name for name in detail.get("fleets") or () if name in wanted and name not in found]
        if not theirs or (writer_host == host and pid == own_pid):
            continue
        if writer_host == host:
            live = alive(pid, at)
        else:
            live = _polled_lately(store, theirs, now, detail.get("interval"))
        if live:
            for name in theirs:
                found[name] = OtherWriter(name, pid, str(detail.get("command") or "record"), writer_host)
    return found


def _polled_lately(store: Store, fleets: list[str], now: float, interval: object) -> bool:
    seconds = 5.0  # unless another writer's event said how often it polls
    if isinstance(interval, (int, float, str)):
        try:
            seconds = float(interval)
        except ValueError:
            pass
    recent = now - OTHER_HOST_INTERVALS * seconds - OTHER_HOST_MARGIN_SECONDS
    for name in fleets:
        last = store.connection.execute(
            "SELECT max(at) FROM polls WHERE fleet_id = (SELECT id FROM fleets WHERE name = ?)", (name,)
        ).fetchone()[0]
        if last is not None and last >= recent:
            return True
    return False


def _left_out_words(taken: dict[str, OtherWriter], one: bool) -> str:
    """ "pid 812 records it", or "chat-8b: pid 812 records it" per fleet when several fleets are watched."""

    def by(writer: OtherWriter) -> str:
        return f"pid {writer.pid}" if writer.host == HOST else f"pid {writer.pid} on {writer.host or 'another host'}"

    if one:
        return f"{by(next(iter(taken.values())))} records it"
    return "; ".join(f"{name}: {by(writer)} records it" for name, writer in taken.items())


class StoreOpener(Protocol):
    """How the recorder opens its file: `Store.open`, or a stand-in (tests)."""

    def __call__(self, path: str, *, check_seconds: float | None = ...) -> Store: ...


class Recorder:
    def __init__(
        self,
        path: str | Path,
        retention: Retention | None = None,
        *,
        open_store: StoreOpener = Store.open,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[RecorderStatus], None] | None = None,
        max_waiting: int = MAX_WAITING,
        max_waiting_seconds: float = MAX_WAITING_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        retention_every: float = RETENTION_EVERY_SECONDS,
    ) -> None:
        self.path = str(path)
        # None: the file's own retention (another recorder may keep more than the defaults); only an
        # explicit one (--keep-raw, --keep-minutes) changes what the file keeps.
        self.retention = retention or Retention()
        self.retention_explicit = retention is not None
        self._open_store = open_store
        self._clock = clock
        self._on_change = on_change
        self._max_waiting = max_waiting
        self._max_waiting_seconds = max_waiting_seconds
        self._retry_seconds = retry_seconds
        self._retention_every = retention_every
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque[tuple[float, PollRecord | _Event]] = deque()  # (submitted at, monotonic; record)
        self._in_hand: tuple[float, PollRecord | _Event] | None = None  # the entry being written, out of the queue
        self._state: RecorderState = "recording"
        self._reason = ""
        self._written = 0
        self._dropped = 0
        self._unstored = 0
        self._unstored_problem = ""  # why the last poll that could never be stored was refused
        self._damage = ""  # the file is damaged: nothing more is written to it (sticky)
        self._shm = SharedMemory(self.path)
        self._checked = False  # the file was found whole once (quick_check)
        self._retention_problem = ""
        self._checkpoint_problem = ""
        self._since_checkpoint = 0
        self._started_detail: dict = {}
        self._on_wait: Callable[[int, float], None] | None = None
        self._said_wait = False
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._deadline = 0.0
        self._retry_at = 0.0
        self._store: Store | None = None
        self._left_out: dict[str, OtherWriter] = {}
        self._all_left_out = False
        self._check_parent()
        self._store = self._open(raise_bad_file=True)
        self.stored_retention = self._stored_retention()
        if not self.retention_explicit and self.stored_retention is not None:
            self.retention = self.stored_retention

    # --- what the console and `capcon record` call ---------------------------

    @property
    def status(self) -> RecorderStatus:
        with self._lock:
            return self._status()

    @property
    def checking(self) -> bool:
        """Whether the file's damage check goes on on the writer thread (a big file): polls wait for it."""
        store = self._store
        return store is not None and store.unchecked

    def set_retention(self, retention: Retention) -> None:
        """An explicit retention (the --keep-* options): applied to the file, whatever it kept before."""
        self.retention, self.retention_explicit = retention, True

    def other_writers(self, fleets: list[str]) -> dict[str, OtherWriter]:
        """Of `fleets`, those another live process records into this file ({} when the file cannot be read now)."""
        if self._store is None or self._shm.check() is not None:
            return {}
        try:
            return other_writers(self._store, fleets, self._clock())
        except sqlite3.Error:
            return {}

    def leave_out(self, taken: dict[str, OtherWriter], fleets: list[str]) -> None:
        """Polls of the `taken` fleets are not written (another process records them); the status says so."""
        with self._lock:
            self._left_out = dict(taken)
            self._all_left_out = bool(taken) and set(fleets) <= set(taken)
            status = self._status()
        self._changed(status)

    def start(self, detail: dict | None = None) -> None:
        """Start the writer thread; the first record is a "recording_started" event (pid, host plus `detail`)."""
        if self._thread is not None:
            return
        self._started_detail = dict(detail or {})
        self.event(self._clock(), STARTED, detail={"pid": os.getpid(), "host": HOST, **(detail or {})})
        self._thread = threading.Thread(target=self._run, name="capcon-recorder", daemon=True)
        self._thread.start()

    def submit(self, record: PollRecord) -> None:
        """Queue one poll for the writer thread; never waits on the file."""
        if record.fleet in self._left_out:
            return
        self._put(record)

    def event(
        self, at: float, kind: str, fleet: str | None = None, subject: str | None = None, detail: dict | None = None
    ) -> None:
        self._put(_Event(at, kind, fleet, subject, detail))

    def close(self, timeout: float = 5.0, on_wait: Callable[[int, float], None] | None = None) -> RecorderStatus:
        """Write what is queued within `timeout` seconds, record "recording_stopped", stop; never hangs.

        `on_wait(polls, seconds)` is called once, at once, when polls are queued and the file
        refuses writes: the caller says why the exit waits."""
        if self._thread is None:
            self._finish()
            return self.status
        # Its counts are filled in when it is written, after every poll queued before it.
        kept = {key: self._started_detail[key] for key in ("command", "fleets") if key in self._started_detail}
        self.event(self._clock(), STOPPED, detail={"pid": os.getpid(), "host": HOST, **kept})
        with self._wake:
            self._on_wait = on_wait
            if not self._stopping:
                self._stopping = True
                self._deadline = time.monotonic() + max(timeout, 0.0)
            self._wake.notify_all()
            refusing = self._state in REFUSING
        if refusing:
            self._say_wait()
        self._thread.join(max(timeout, 0.0) + 0.5)
        if self._thread.is_alive():
            store = self._store
            if store is not None:
                store.connection.interrupt()  # a statement past its deadline: give up on it
            self._thread.join(0.5)
        if self._thread.is_alive():
            # Still inside SQLite's busy wait: it leaves by itself (a daemon thread, past its
            # deadline it writes nothing more); the exit does not wait for it.
            self._set_state("stopped")
        return self.status

    def give_up(self) -> None:
        """Stop writing now (a second Ctrl+C during `close`): what is still queued is counted, not written.

        Safe to call from a signal handler: it only moves the deadline and interrupts SQLite."""
        with self._wake:
            self._stopping = True
            self._deadline = time.monotonic()
            self._wake.notify_all()
        store = self._store
        if store is not None:
            try:
                store.connection.interrupt()
            except sqlite3.Error:
                pass

    def _say_wait(self) -> None:
        """Once per close: the polls the exit waits for, and how long it waits at most."""
        with self._lock:
            waiting = self._status().waiting
            if self._said_wait or self._on_wait is None or not waiting:
                return
            self._said_wait = True
            on_wait, remaining = self._on_wait, max(self._deadline - time.monotonic(), 0.0)
        try:
            on_wait(waiting, remaining)
        except Exception:  # noqa: BLE001 - a failing listener must not stop the close
            pass

    # --- the queue -------------------------------------------------------------

    def _put(self, record: PollRecord | _Event) -> None:
        with self._wake:
            if self._stopping and self._thread is not None and not self._thread.is_alive():
                self._dropped += isinstance(record, PollRecord)
                return
            now = time.monotonic()
            self._queue.append((now, record))
            while self._queue and (
                len(self._queue) > self._max_waiting or now - self._queue[0][0] > self._max_waiting_seconds
            ):
                _, old = self._queue.popleft()
                self._dropped += isinstance(old, PollRecord)
            self._wake.notify()

    def _take(self) -> PollRecord | _Event | None:
        with self._lock:
            if not self._queue:
                return None
            self._in_hand = self._queue.popleft()
            return self._in_hand[1]

    def _give_back(self) -> None:
        """A refused record goes back to the head of the queue (with its age), to be tried again first."""
        with self._lock:
            if self._in_hand is not None:
                self._queue.appendleft(self._in_hand)
                self._in_hand = None

    def _done(self, record: PollRecord | _Event) -> None:
        with self._lock:
            self._in_hand = None
            self._written += isinstance(record, PollRecord)
            self._since_checkpoint += isinstance(record, PollRecord)
        self._shm.note()  # SQLite may have grown its index

    def _unstorable(self, record: PollRecord | _Event, error: BaseException) -> None:
        """A record that can never be stored (retrying cannot help): counted and said, the rest go on."""
        what = "poll" if isinstance(record, PollRecord) else f"{record.kind} event"
        with self._lock:
            self._in_hand = None
            if isinstance(record, PollRecord):
                self._unstored += 1
            self._unstored_problem = f"a {what} could not be stored ({type(error).__name__}: {error})"
            status = self._status()
        self._changed(status)

    def _status(self) -> RecorderStatus:
        in_hand = self._in_hand is not None and isinstance(self._in_hand[1], PollRecord)
        waiting = sum(isinstance(r, PollRecord) for _, r in self._queue) + in_hand
        state, detail = self._state, self._reason
        if self._damage and state != "stopped":
            state, detail = "error", self._damage
        if state == "recording" and self._unstored_problem:
            # Said until the recorder stops: those polls are not in the file, whatever lands after them.
            lost = f"{polls(self._unstored)} not stored: " if self._unstored else ""
            state, detail = "error", f"{lost}{self._unstored_problem}; the other polls are recorded"
        if state == "recording" and self._retention_problem:
            state, detail = "error", self._retention_problem
        if state == "recording" and self._checkpoint_problem:
            state, detail = "read-only", self._checkpoint_problem
        if state == "recording" and self._left_out:
            state = "off" if self._all_left_out else "partial"
            detail = _left_out_words(self._left_out, state == "off" and len(self._left_out) == 1)
        if state not in ("recording", "stopped") and waiting:
            detail = f"{detail}, {waiting} waiting" if detail else f"{waiting} waiting"
        if state == "stopped" and waiting:
            detail = f"{polls(waiting)} not written"
        return RecorderStatus(state, detail, self._written, waiting, self._dropped, self.path, self._unstored)

    def _set_state(self, state: RecorderState, reason: str = "") -> None:
        with self._lock:
            if (state, reason) == (self._state, self._reason):
                return
            self._state, self._reason = state, reason
            status = self._status()
        self._changed(status)

    def _changed(self, status: RecorderStatus) -> None:
        if self._on_change is not None:
            try:
                self._on_change(status)
            except Exception:  # noqa: BLE001 - a failing listener must not stop the writer
                pass

    # --- opening -----------------------------------------------------------------

    def _check_parent(self) -> None:
        parent = Path(self.path).parent
        if parent.exists() and not parent.is_dir():
            raise HistoryError(f"{self.path}: {parent} is not a directory; expected a path for the history file")

    def _open(self, raise_bad_file: bool) -> Store | None:
        """The store, or None while the file cannot take writes (the state says why).

        A file that is not a history (or is a newer one) is the operator's mistake: at start it is
        raised, for the CLI to report before anything opens; later it becomes the "error" state.
        """
        if self._shm.check() is not None:
            return None  # a connection this process keeps (never closed) still maps the old -shm: wait
        try:
            # Checked for damage once: reopening a big file every second while it refuses writes must not read it whole each time.
            store = self._open_store(self.path, check_seconds=None) if self._checked else self._open_store(self.path)
        except HistoryError as error:
            state, reason = state_of(error, self.path)
            if state == "error" and raise_bad_file:
                raise
            if isinstance(error, DamagedHistory):
                self._damaged(str(error))
            self._set_state(state, reason)
            return None
        self._shm = SharedMemory(self.path)
        self._shm.note()
        self._checked = self._checked or not getattr(store, "unchecked", False)
        return store

    def _damaged(self, words: str) -> None:
        """The file is damaged: it is written no more (a write could spread the damage); polls wait, then are counted."""
        with self._lock:
            self._damage = words
            status = self._status()
        self._changed(status)

    def _usable(self) -> bool:
        """Whether the store may be touched now (see console.store.shared_memory); if not, the state says why.

        A replaced -shm closes the store, to be reopened; one that takes no writes leaves it alone."""
        if self._store is None or self._damage:
            return False
        verdict = self._shm.check()
        if verdict is None:
            return True
        if verdict == REPLACED:
            # Other processes now share another -shm (its index and its locks): close (the old mapping is still
            # valid) and reopen, so every process uses the same one again.
            self._drop_store()
            self._store = self._open(raise_bad_file=False)
            return self._store is not None
        self._set_state("read-only", f"not writable: {verdict}")
        return False

    # --- the writer thread ---------------------------------------------------------

    def _finish_check(self) -> None:
        """A big file's damage check, left unfinished at open, finished before anything is written to it."""
        store = self._store
        if store is None or not store.unchecked or not self._usable():
            return
        try:
            store.finish_check()
            self._checked = True
        except DamagedHistory as error:
            self._damaged(str(error))
            self._drop_store()
        except Unfinished:
            pass  # interrupted: the recorder is closing
        except sqlite3.Error as error:
            self._set_state(*state_of(error, self.path))

    def _run(self) -> None:
        next_retention = time.monotonic()  # once at start, then every RETENTION_EVERY_SECONDS
        try:
            self._finish_check()
            while True:
                with self._wake:
                    while not self._stopping:
                        now = time.monotonic()
                        ready = now >= self._retry_at
                        if ready and (self._queue or now >= next_retention):
                            break
                        wake_at = next_retention if ready else self._retry_at
                        if ready and self._queue:
                            wake_at = now
                        self._wake.wait(max(wake_at - now, 0.01))
                    stopping = self._stopping
                if stopping:
                    self._flush_before_deadline()
                    return
                if self._damage:
                    self._retry_at = (
                        time.monotonic() + self._retry_seconds
                    )  # written no more; polls are counted at exit
                    continue
                if self._store is None:
                    self._store = self._open(raise_bad_file=False)
                    if self._store is None:
                        self._retry_at = time.monotonic() + self._retry_seconds
                        continue
                    self._finish_check()
                if not self._usable():
                    self._retry_at = time.monotonic() + self._retry_seconds
                    continue
                if time.monotonic() >= next_retention:
                    finished = self._retain()
                    next_retention = time.monotonic() + (
                        self._retention_every if finished else RETENTION_CATCH_UP_SECONDS
                    )
                    if self._usable():  # retention may have found the file gone bad
                        self._checkpoint()
                if not self._write_queued():
                    self._retry_at = time.monotonic() + self._retry_seconds
                elif self._since_checkpoint >= CHECKPOINT_EVERY and self._usable():
                    self._checkpoint()
        finally:
            self._finish()

    def _write_queued(self, stopping: bool = False) -> bool:
        """Write queued records in order until the queue is empty (True) or the file refuses one (False)."""
        while True:
            store = self._store if self._usable() else None
            if store is None:
                return False
            if stopping:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # The busy timeout must not outlast the deadline `close` was given.
                store.connection.execute(f"PRAGMA busy_timeout = {int(min(remaining * 1000, BUSY_TIMEOUT_MS))}")
            record = self._take()
            if record is None:
                return True
            try:
                if isinstance(record, PollRecord):
                    store.write_poll(record)
                else:
                    detail = record.detail
                    if record.kind == STOPPED:
                        with self._lock:
                            detail = {**(detail or {}), "written": self._written, "dropped": self._dropped}
                            if self._unstored:
                                detail["unstored"] = self._unstored
                    store.write_event(record.at, record.kind, record.fleet, record.subject, detail)
            except (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.DataError) as error:
                # The record, not the file: a constraint or a value SQLite cannot take. Retrying cannot help.
                self._unstorable(record, error)
                continue
            except sqlite3.Error as error:
                self._give_back()
                if is_damage(error):
                    self._damaged(damaged_words(self.path, str(error)))
                    return False
                state, reason = state_of(error, self.path)
                self._set_state(state, reason)
                if self._stopping:
                    self._say_wait()  # before the next attempt's wait, not after it
                if state == "read-only":
                    self._drop_store()  # SQLite fell back to read-only at open: only a fresh open can write again
                return False
            except Exception as error:  # noqa: BLE001 - a record that can never be written must not block the rest
                self._unstorable(record, error)
                continue
            self._done(record)
            self._set_state("recording")

    def _flush_before_deadline(self) -> None:
        """Try again and again, until the queue is written or the deadline passes (a lock may lift meanwhile)."""
        while True:
            if self._damage:
                return  # written no more: what is queued is counted
            if self._store is None:
                self._store = self._open(raise_bad_file=False)
            if self._store is not None:
                try:
                    if self._write_queued(stopping=True):
                        return
                except sqlite3.Error:  # the busy-timeout pragma itself, on a file gone bad
                    self._drop_store()
            self._say_wait()
            with self._wake:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._wake.wait(min(CLOSE_RETRY_SECONDS, remaining))  # give_up() wakes it at once

    def _stored_retention(self) -> Retention | None:
        if self._store is None:
            return None
        try:
            return retention_in_force(self._store)
        except sqlite3.Error:
            return None

    def _retain(self) -> bool:
        """One retention round; False when it left work for a round soon after (a backlog)."""
        if not self.retention_explicit:
            # Follow the file: a recorder started with --keep-* may have set it since.
            self.retention = self._stored_retention() or self.retention
        finished = True
        store = self._store
        if store is None:
            return finished
        try:
            # Looked up on the module at each round, so a stand-in put there (tests) is the one called.
            done = retention_rules.apply_retention(store, self._clock(), self.retention, max_chunks=RETENTION_CHUNKS)
            finished = done.finished
        except sqlite3.Error as error:
            self._set_state(*state_of(error, self.path))  # tried again at the next round, like any refused write
            return True
        except Exception as error:  # noqa: BLE001 - old data kept too long is no reason to stop recording
            problem = f"retention failed: {type(error).__name__}: {error}"
        else:
            problem = ""
        with self._lock:
            changed = problem != self._retention_problem
            self._retention_problem = problem
            status = self._status()
        if changed:
            self._changed(status)
        return finished

    def _checkpoint(self) -> None:
        """Fold the -wal log into the file; when that cannot happen, say so (the polls are safe in the log)."""
        self._since_checkpoint = 0
        store = self._store
        if store is None:
            return
        name = Path(self.path).name
        problem = ""
        try:
            store.connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as error:
            state, reason = state_of(error, self.path)
            why = reason if state in ("read-only", "full") else str(error)
            problem = f"cannot fold the log into {name} ({why}); polls still land in {name}-wal, nothing lost yet"
        else:
            try:
                size = os.path.getsize(f"{self.path}-wal")
            except OSError:
                size = 0
            if size > MAX_WAL_BYTES:
                problem = (
                    f"{name}-wal has grown to {size // (1024 * 1024)} MB: a reader keeps it from being folded"
                    f" into {name}; polls still land in it, nothing lost yet"
                )
        with self._lock:
            changed = problem != self._checkpoint_problem
            self._checkpoint_problem = problem
            status = self._status()
        if changed:
            self._changed(status)

    def _drop_store(self) -> None:
        """Close the store, unless its -shm no longer takes writes: closing writes to it (SIGBUS), so the
        connection is then kept, unclosed, to the end of the process (console.store.shared_memory)."""
        store, self._store = self._store, None
        if store is None:
            return
        verdict = self._shm.check()
        if verdict is not None and verdict != REPLACED:
            abandon(store.connection)  # SQLite keeps the old -shm mapped: `_open` goes on checking it
            return
        try:
            store.close()
        except sqlite3.Error:
            pass
        self._shm = SharedMemory(self.path)  # nothing of this file is mapped any more

    def _finish(self) -> None:
        self._drop_store()
        self._set_state("stopped")
