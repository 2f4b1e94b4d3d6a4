"""A replay chain restored from a checkpoint the live console stored (console.store.checkpoints).

The checkpoint holds what the console carried past its poll: the flag trackers, the trends,
and the watcher's samples (named by the polls that hold them, read back and vetted as the
watcher vetted them). Carrying on from it gives, poll for poll, what a replay from the start
of the console run gives: no warm-up, and no "since" cut at its start.
"""

from __future__ import annotations

from typing import cast

from console.fleet.flags import FlagState
from console.fleet.trends import Trends
from console.fleet.view import FleetView
from console.live.watcher import Watcher, WatcherMemory
from console.metrics.vllm import ReplicaSample, vet_sample
from console.replay.loader import RecordedFleet


class Carried:
    """What `advance` reads of the view before a poll (its trends and flags), without the view itself.

    A restored chain feeds the poll after the checkpoint at once: this never reaches the screen.
    """

    def __init__(self, trends: Trends, flag_state: FlagState) -> None:
        self.trends = trends
        self.flag_state = flag_state


def restore(recorded: RecordedFleet, index: int) -> tuple[Watcher | None, FleetView] | None:
    """The watcher and the carried view after poll `index`, from its checkpoint; None when it cannot be used."""
    state = recorded.checkpoint(index)
    if state is None:
        return None
    carried = cast(FleetView, Carried(state.trends, state.flag_state))
    memory = state.watcher
    if memory is None:
        return None, carried
    polls = recorded.polls_by_id(state.polls())
    samples: dict[tuple[int, str], ReplicaSample] = {}
    for poll_id, poll in polls.items():
        for result in poll.results or ():
            if result.sample is not None:
                samples[(poll_id, result.url)] = result.sample
    vetted: dict[tuple[int, str], ReplicaSample] = {}

    def sample(url: str, ref: list) -> ReplicaSample:
        key = (int(ref[0]), url)
        found = samples.get(key)
        if found is None or found.at != ref[1]:
            raise LookupError(key)  # the poll is gone (retention) or is not the one the checkpoint named
        if key not in vetted:
            vetted[key] = vet_sample(found)
        return vetted[key]

    try:
        watcher = Watcher.from_memory(
            WatcherMemory(
                str(memory["source"]),
                float(memory["window"]),
                float(memory["interval"]),
                {url: tuple(sample(url, ref) for ref in refs) for url, refs in memory["rings"].items()},
                {url: float(at) for url, at in memory["last_good"].items()},
                frozenset(memory["restarted"]),
                {url: sample(url, ref) for url, ref in memory["latest"].items()},
            )
        )
    except (LookupError, TypeError, ValueError, IndexError):
        return None
    return watcher, carried
