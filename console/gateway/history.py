"""Policy switches and what each mode did into capcon's history file (the events `capcon export --what events` reads).

Every switch is an `overflow_switch` event; every minute, at each switch and at stop, the period just
ended is an `overflow_tally` event (console/overflow/tally.py), which `capcon history` sums per day.

One writer per history file in a process. Where the process records polls into the same file (`capcon
demo --db`), the events go through its Recorder (`SwitchHistory.through`), the file's one writer there,
which also keeps them while the file refuses writes. A gateway on its own (`capcon gateway --db`) has no
Recorder: it writes from one worker thread of its own, so a slow disk never stalls the event loop. It is
not a Recorder because a Recorder's start records a "recording_started" that replay and `capcon record`
read as a recording of some fleet's polls, which a gateway is not. The file is opened at start, so a bad
--db is refused before the gateway listens. Other processes writing the same file (a console recording
it) are SQLite's to order: each write is a short transaction behind the store's busy timeout.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from console.overflow.tally import KIND as TALLY_KIND
from console.overflow.tally import Tally

if TYPE_CHECKING:
    from console.gateway.server import Gateway
    from console.store.database import Store

log = logging.getLogger("capcon.gateway")
EVENT_KIND = "overflow_switch"
TALLY_SECONDS = 60.0


class EventWriter(Protocol):
    """What a switch history needs of a Recorder (console/store/recorder.py): an event queued, never waited on."""

    path: str

    def event(
        self, at: float, kind: str, fleet: str | None = None, subject: str | None = None, detail: dict | None = None
    ) -> None: ...


class SwitchHistory:
    def __init__(self, path: str, fleet: str, tally_seconds: float = TALLY_SECONDS) -> None:
        self.path = path
        self.fleet = fleet
        self.tally_seconds = tally_seconds
        self._tally = Tally()
        self._tally_task: asyncio.Task | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._recorder: EventWriter | None = None
        self._store: Store | None = None
        self._pending: list[Future[None]] = []

    @classmethod
    def through(cls, recorder: EventWriter, fleet: str, tally_seconds: float = TALLY_SECONDS) -> SwitchHistory:
        """The events written by `recorder`, the file's one writer in this process (its owner starts and closes it)."""
        history = cls(recorder.path, fleet, tally_seconds)
        history._recorder = recorder
        return history

    def open(self) -> None:
        """Open (create or migrate) the file, in the writer thread; HistoryError (a UserError) if it cannot be."""
        if self._recorder is not None:
            return  # opened by the recorder's owner
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="capcon-gateway-history")
        self._pool.submit(self._open).result()

    def _open(self) -> None:
        from console.store.database import Store  # noqa: PLC0415 - only with --db

        self._store = Store.open(self.path)

    def write(self, at: float, subject: str, detail: dict, kind: str = EVENT_KIND) -> None:
        """Queue the event; a failure is logged (the switch itself stands)."""
        if self._recorder is not None:
            self._recorder.event(at, kind, fleet=self.fleet, subject=subject, detail=detail)
            return
        if self._pool is None:
            log.warning("%s not written to the history file %s: the history was not opened", kind, self.path)
            return
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(self._write, at, subject, detail, kind))

    def _write(self, at: float, subject: str, detail: dict, kind: str = EVENT_KIND) -> None:
        try:
            if self._store is None:  # closed: a write queued behind the close
                raise RuntimeError("the history file is closed")
            self._store.write_event(at, kind=kind, fleet=self.fleet, subject=subject, detail=detail)
        except Exception as error:  # noqa: BLE001 - the history is a record, not a reason to stop serving
            log.warning("%s not written to the history file %s: %s", kind, self.path, error)

    # --- what each mode did ---------------------------------------------------------

    def start_tallies(self, gateway: Gateway) -> None:
        """Open the first period and close one every `tally_seconds`."""
        self._tally.begin(gateway.clock(), gateway.current.mode, totals(gateway))
        self._tally_task = asyncio.create_task(self._every_period(gateway), name="capcon-gateway-tally")

    async def _every_period(self, gateway: Gateway) -> None:
        while True:
            await asyncio.sleep(self.tally_seconds)
            gateway.policy()  # an expiry due is applied first: its period closes at the switch
            self.close_period(gateway, gateway.clock(), gateway.current.mode)

    def close_period(self, gateway: Gateway, at: float, next_mode: str) -> None:
        """Write the period ending at `at` (nothing if none is open), then open one in `next_mode`."""
        now = totals(gateway)
        detail = self._tally.close(at, now)
        if detail is not None:
            detail["gateway"] = gateway.url
            self.write(at, f"{detail['mode']} {detail['seconds']:.0f} s", detail, kind=TALLY_KIND)
        if self._tally.mode is not None:
            self._tally.begin(at, next_mode, now)

    def stop_tallies(self, gateway: Gateway) -> None:
        """The last period, at stop; no period is opened after it."""
        if self._tally_task is not None:
            self._tally_task.cancel()
            self._tally_task = None
        if self._tally.mode is not None:
            self.close_period(gateway, gateway.clock(), gateway.current.mode)
            self._tally.mode = None

    def close(self) -> None:
        """Write what is queued, then close the file (a recorder's owner closes it, not this)."""
        if self._pool is None:
            return

        def finish() -> None:
            if self._store is not None:
                self._store.close()
                self._store = None

        self._pool.submit(finish).result()
        self._pool.shutdown(wait=True)


def totals(gateway: Gateway) -> dict:
    """The gateway's counters since it started, as a tally reads them."""
    out: dict = dict.fromkeys(("local", "hosted", "rejected", "timed_out", "deferred"), 0)
    for (outcome, _), n in gateway.counts.items():
        if outcome in out:
            out[outcome] += n
    tokens = gateway.hosted_usage["prompt_tokens"] + gateway.hosted_usage["completion_tokens"]
    price = gateway.config.hosted_price_per_million
    out["hosted_tokens"] = tokens
    out["hosted_cost_dollars"] = tokens * price / 1e6 if price is not None else None
    return out
