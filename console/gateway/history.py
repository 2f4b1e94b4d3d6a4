"""Policy switches into capcon's history file (the events table `capcon export --what events` reads).

SQLite is written from one worker thread, so a slow disk never stalls the event loop;
the file is opened at start, so a bad --db is refused before the gateway listens.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger("capcon.gateway")
EVENT_KIND = "overflow_switch"


class SwitchHistory:
    def __init__(self, path: str, fleet: str) -> None:
        self.path = path
        self.fleet = fleet
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="capcon-gateway-history")
        self._store = None
        self._pending: list[Future] = []

    def open(self) -> None:
        """Open (create or migrate) the file, in the writer thread; HistoryError (a UserError) if it cannot be."""
        self._pool.submit(self._open).result()

    def _open(self) -> None:
        from console.store.database import Store  # noqa: PLC0415 - only with --db

        self._store = Store.open(self.path)

    def write(self, at: float, subject: str, detail: dict) -> None:
        """Queue the event; a failure is logged (the switch itself stands)."""
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(self._write, at, subject, detail))

    def _write(self, at: float, subject: str, detail: dict) -> None:
        try:
            self._store.write_event(at, kind=EVENT_KIND, fleet=self.fleet, subject=subject, detail=detail)
        except Exception as error:  # noqa: BLE001 - the history is a record, not a reason to stop serving
            log.warning("overflow switch not written to the history file %s: %s", self.path, error)

    def close(self) -> None:
        """Write what is queued, then close the file."""

        def finish() -> None:
            if self._store is not None:
                self._store.close()
                self._store = None

        self._pool.submit(finish).result()
        self._pool.shutdown(wait=True)
