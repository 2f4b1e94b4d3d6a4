"""The demo faults this console has turned on, per simulated replica, and what each key of the fault menu does.

The simulated fleet keeps no list a console could read, so the console remembers what it asked for,
following the fleet's rules: one /metrics fault at a time per replica, a restart brings a stopped replica back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultChoice:
    key: str
    kind: str  # the simulated fleet's fault kind
    label: str  # what it does, as the menu says it
    short: str  # how the active list names it
    lasting: bool = True  # False: a one-off (restart) that is never "on"


FAULT_CHOICES: tuple[FaultChoice, ...] = (
    FaultChoice("d", "down", "stop the replica: connection refused", "down"),
    FaultChoice("r", "restart", "restart it: down and back up, counters reset", "restart", lasting=False),
    FaultChoice("s", "slow", "slow it: every engine step x3", "slow"),
    FaultChoice("e", "metrics_error", "/metrics answers HTTP 500", "metrics 500"),
    FaultChoice("h", "metrics_hang", "/metrics never answers", "metrics hang"),
    FaultChoice("g", "metrics_garbage", "/metrics returns garbage", "metrics garbage"),
)
CLEAR_REPLICA_KEY = "c"
CLEAR_ALL_KEY = "a"
LASTING_KINDS = tuple(choice.kind for choice in FAULT_CHOICES if choice.lasting)
METRICS_KINDS = frozenset({"metrics_error", "metrics_hang", "metrics_garbage"})
_SHORT = {choice.kind: choice.short for choice in FAULT_CHOICES}
_ORDER = {choice.kind: n for n, choice in enumerate(FAULT_CHOICES)}


def choice_for(key: str) -> FaultChoice:
    return next(choice for choice in FAULT_CHOICES if choice.key == key)


class DemoFaults:
    """Which lasting faults are on, by replica index."""

    def __init__(self) -> None:
        self._on: dict[int, set[str]] = {}

    def kinds(self, index: int) -> tuple[str, ...]:
        return tuple(sorted(self._on.get(index, ()), key=_ORDER.__getitem__))

    def is_on(self, index: int, kind: str) -> bool:
        return kind in self._on.get(index, ())

    def count(self) -> int:
        return sum(len(kinds) for kinds in self._on.values())

    def applied(self, index: int, kind: str) -> None:
        kinds = self._on.setdefault(index, set())
        if kind == "restart":
            kinds.discard("down")  # a restart starts a stopped replica
        elif kind in METRICS_KINDS:
            kinds.difference_update(METRICS_KINDS)  # a replica's /metrics fails one way at a time
            kinds.add(kind)
        else:
            kinds.add(kind)
        if not kinds:
            del self._on[index]

    def cleared(self, index: int, kind: str) -> None:
        self._on.get(index, set()).discard(kind)
        if not self._on.get(index, True):
            del self._on[index]

    def cleared_replica(self, index: int) -> None:
        self._on.pop(index, None)

    def cleared_all(self) -> None:
        self._on.clear()

    def summary(self, names: dict[int, str]) -> str:
        """'replica-1 down, slow · replica-3 metrics garbage', or 'none'."""
        parts = [
            f"{names.get(index, f'replica {index}')} {', '.join(_SHORT[k] for k in self.kinds(index))}"
            for index in sorted(self._on)
        ]
        return " · ".join(parts) or "none"
