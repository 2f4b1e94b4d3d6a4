"""The console's collector policy: no full pass from allocations, one between refreshes when due, cycles still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from console.live.collector import FULL_EVERY_SECONDS, MIDDLE_EVERY, NEVER, YOUNG_EVERY, Collector
from console.sources.prometheus import _collector_paused, freeze_on_resume


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def restored():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    freeze_on_resume(False)
    gc.unfreeze()


def test_untuned_the_collector_is_left_as_it_is():
    collector = Collector(timer=lambda: 1e9)
    before = gc.get_threshold()
    assert collector.after_poll() is False
    assert gc.get_threshold() == before


def test_tuned_full_passes_come_only_between_refreshes_once_due(restored):
    clock = {"now": 100.0}
    collector = Collector(timer=lambda: clock["now"])
    collector.tune()
    assert gc.get_threshold() == (YOUNG_EVERY, MIDDLE_EVERY, NEVER)
    clock["now"] += FULL_EVERY_SECONDS - 1
    assert collector.after_poll() is False
    clock["now"] += 1
    assert collector.after_poll() is True
    assert collector.after_poll() is False  # the next one is a whole period away
    assert collector.full_passes == 1


def test_a_cycle_made_while_answers_were_read_is_freed_by_the_next_full_pass(restored):
    clock = {"now": 0.0}
    collector = Collector(timer=lambda: clock["now"])
    collector.tune()
    assert gc.isenabled()
    with _collector_paused():
        dead = _cycle()  # unreachable at once, but only the collector can free a cycle
    assert gc.isenabled()
    gc.collect()  # frozen on resume: not even a full pass by hand looks at it
    assert dead() is not None
    clock["now"] += FULL_EVERY_SECONDS
    assert collector.after_poll() is True
    assert dead() is None


def test_without_the_policy_a_paused_reader_leaves_nothing_frozen():
    with _collector_paused():
        dead = _cycle()
    gc.collect()
    assert dead() is None
