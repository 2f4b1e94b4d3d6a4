"""The demo fleet beside the console's driver: what the console asks of it, what it turned on, what it records.

`capcon demo` hands the console its simulated fleet (`DemoControls`); keys x and f reach it
through here, and each change goes into the history as an event, so a replayed outage says it
was injected.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from console.tui.demo_faults import CLEAR_ALL_KEY, CLEAR_REPLICA_KEY, LASTING_KINDS, DemoFaults, choice_for

if TYPE_CHECKING:
    from console.store.recorder import Recorder

SPIKE_FACTOR = 3.0
SPIKE_SECONDS = 60.0


class DemoControls(Protocol):
    """What `capcon demo` hands over so the console can stir its simulated fleet (each call may return an awaitable)."""

    def spike(self, factor: float, seconds: float) -> object: ...

    def fault(self, index: int, kind: str) -> object: ...

    def clear_fault(self, index: int, kind: str) -> object: ...

    def clear_all_faults(self) -> object: ...


class Demo:
    def __init__(
        self, controls: DemoControls, fleet: str, recorder: Recorder | None, clock: Callable[[], float]
    ) -> None:
        self.controls = controls
        self.fleet = fleet
        self.recorder = recorder  # None: not recording
        self.clock = clock
        self.faults = DemoFaults()  # what this console turned on in the demo fleet

    async def spike(self) -> str:
        await self._ask("spike", SPIKE_FACTOR, SPIKE_SECONDS)
        self._event("demo_spike", None, {"factor": SPIKE_FACTOR, "seconds": SPIKE_SECONDS})
        return f"demo: traffic x{SPIKE_FACTOR:g} for {SPIKE_SECONDS:g} s"

    async def apply(self, key: str, index: int, name: str) -> str:
        """Do what fault-menu key `key` says to replica `index` (named `name`); returns what was done, in words.

        Raises what the demo fleet raised: the fault did not happen and is not marked on.
        """
        faults = self.faults
        if key == CLEAR_ALL_KEY:
            await self._ask("clear_all_faults")
            faults.cleared_all()
            said = "every fault cleared"
        elif key == CLEAR_REPLICA_KEY:
            # Every lasting kind, not only those this console turned on: clearing one that is off does nothing.
            for kind in LASTING_KINDS:
                await self._ask("clear_fault", index, kind)
            faults.cleared_replica(index)
            said = f"{name}: its faults cleared"
        else:
            choice = choice_for(key)
            if choice.lasting and faults.is_on(index, choice.kind):
                await self._ask("clear_fault", index, choice.kind)
                faults.cleared(index, choice.kind)
                said = f"{name}: {choice.short} cleared"
            else:
                await self._ask("fault", index, choice.kind)
                faults.applied(index, choice.kind)
                said = f"{name}: {choice.label}"
        self._event("demo_fault", name, {"key": key, "said": said})
        return said

    async def _ask(self, name: str, *arguments: object) -> None:
        result = getattr(self.controls, name)(*arguments)
        if inspect.isawaitable(result):
            await result

    def _event(self, kind: str, subject: str | None, detail: dict[str, object]) -> None:
        if self.recorder is not None:
            self.recorder.event(self.clock(), kind, fleet=self.fleet, subject=subject, detail=detail)
