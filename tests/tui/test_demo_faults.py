"""The demo's fault menu through Pilot: which replica it acts on, each key's call, what it shows as on, the gate."""

from __future__ import annotations

import pytest

from console.sim.faults import FAULT_KINDS
from console.tui.demo_faults import FAULT_CHOICES, DemoFaults
from console.tui.screens.fault_screen import FaultScreen
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.screens.replica_screen import ReplicaScreen
from console.tui.widgets.console_header import ConsoleHeader
from tests.tui.conftest import make_app, settle, shown
from tests.tui.fakes import DemoRecorder, normal_fleet


def menu_text(app) -> str:
    return shown(app.screen.query_one("#fault-choices"))


def menu_title(app) -> str:
    return str(app.screen.query_one("#fault-menu").border_title)


def notices(app) -> list[str]:
    return [notification.message for notification in app._notifications]


async def choose(pilot, *keys: str) -> None:
    """Open the menu and press one key, for each key; wait until the menu has closed and the call is made."""
    for key in keys:
        await pilot.press("f")
        assert isinstance(pilot.app.screen, FaultScreen)
        await pilot.press(key)
        for _ in range(100):
            if not isinstance(pilot.app.screen, FaultScreen):
                break
            await pilot.pause(0.01)
        await pilot.pause()
        await pilot.pause()


def test_the_menu_has_a_key_for_every_fault_the_simulated_fleet_knows():
    assert sorted(choice.kind for choice in FAULT_CHOICES) == sorted(FAULT_KINDS)
    keys = [choice.key for choice in FAULT_CHOICES] + ["c", "a"]
    assert len(set(keys)) == len(keys)


async def test_menu_names_the_chosen_replica_and_each_key_calls_the_fleet():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "f")  # the second row: gpu-2, replica 1 in the source's order
        assert isinstance(app.screen, FaultScreen)
        assert menu_title(app) == "faults on gpu-2 (replica 2 of 4)"  # counted from 1; the fleet is told index 1
        assert app.screen.query_one("#fault-menu").border_subtitle == "a key applies and closes · Esc closes"
        assert "on now: none" in menu_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen) and demo.calls == []

        await choose(pilot, "d", "r", "s", "e", "h", "g")
        assert demo.calls == [
            ("fault", 1, kind)
            for kind in ("down", "restart", "slow", "metrics_error", "metrics_hang", "metrics_garbage")
        ]


async def test_menu_shows_what_is_on_and_the_same_key_clears_it():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down")
        await choose(pilot, "g", "s")
        assert "⚡ 2 FAULTS" in shown(app.screen.query_one(ConsoleHeader))
        assert "demo: gpu-2: slow it: every engine step x3\nfaults on: gpu-2 slow, metrics garbage" in notices(app)

        await pilot.press("f")
        text = menu_text(app)
        lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
        assert "ON (g clears)" in lines["g"] and "ON (s clears)" in lines["s"]
        assert "ON" not in lines["d"] and "ON" not in lines["e"]
        assert "on now: gpu-2 slow, metrics garbage" in text
        await pilot.press("g")
        await pilot.pause()
        await pilot.pause()
        assert demo.calls[-1] == ("clear_fault", 1, "metrics_garbage")
        assert "⚡ 1 FAULT" in shown(app.screen.query_one(ConsoleHeader))


async def test_clear_this_replica_and_clear_all():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("down")  # gpu-1, replica 0
        await choose(pilot, "d", "h")
        await pilot.press("down", "down")  # gpu-3, replica 2
        await choose(pilot, "s")
        await pilot.press("up", "up")
        await choose(pilot, "c")
        cleared = demo.calls[3:]  # after d, h on replica 0 and s on replica 2
        assert sorted(cleared) == sorted(
            ("clear_fault", 0, kind) for kind in ("down", "slow", "metrics_error", "metrics_hang", "metrics_garbage")
        )
        await pilot.press("f")
        assert "on now: gpu-3 slow" in menu_text(app)
        await pilot.press("a")
        await pilot.pause()
        await pilot.pause()
        assert demo.calls[-1] == ("clear_all_faults",)
        assert "FAULT" not in shown(app.screen.query_one(ConsoleHeader))


async def test_detail_screen_faults_the_replica_it_shows():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "down", "enter")
        assert isinstance(app.screen, ReplicaScreen) and app.screen.key == "gpu-3"
        await choose(pilot, "e")
        assert demo.calls == [("fault", 2, "metrics_error")]
        assert isinstance(app.screen, ReplicaScreen)


async def test_read_only_gates_the_menu_and_its_keys():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        assert not isinstance(app.screen, FaultScreen)  # the key is dimmed
        # Even a menu opened some other way runs nothing: its keys ask the same gate.
        app.action_fault()
        await pilot.pause()
        assert isinstance(app.screen, FaultScreen)
        await pilot.press("d", "a")
        await pilot.pause()
        assert demo.calls == []


async def test_a_refused_fault_is_reported_and_the_console_stays_up():
    demo = DemoRecorder(refuse=ValueError("no replica 7"))
    app = make_app(normal_fleet(), demo=demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await choose(pilot, "d")
        assert app.demo.faults.count() == 0  # not marked on: it did not happen
        assert "demo fault failed: ValueError: no replica 7" in notices(app)
        assert app.is_running


@pytest.mark.parametrize(
    "steps, on",
    [
        (
            [("applied", "metrics_error"), ("applied", "metrics_garbage")],
            ("metrics_garbage",),
        ),  # one /metrics fault at a time
        ([("applied", "down"), ("applied", "restart")], ()),  # a restart brings a stopped replica back
        ([("applied", "slow"), ("applied", "restart")], ("slow",)),
        ([("applied", "slow"), ("applied", "down"), ("cleared", "slow")], ("down",)),
        ([("applied", "restart")], ()),  # a one-off is never on
    ],
)
def test_fault_bookkeeping_follows_the_fleet_rules(steps, on):
    faults = DemoFaults()
    for step, kind in steps:
        getattr(faults, step)(0, kind)
    assert faults.kinds(0) == on
    assert faults.count() == len(on)
    assert faults.summary({0: "r0"}) == (
        f"r0 {', '.join(k.replace('_', ' ').replace('metrics error', 'metrics 500') for k in on)}" if on else "none"
    )


async def test_spikes_and_faults_go_into_the_history_as_events(tmp_path):
    from console.store.database import Store
    from console.store.recorder import Recorder

    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start()
    app = make_app(normal_fleet(), demo=DemoRecorder(), recorder=recorder)
    try:
        async with app.run_test() as pilot:
            await settle(pilot)
            await pilot.press("x")
            await choose(pilot, "d")
            await pilot.pause()
    finally:
        recorder.close()
    events = [(e.kind, e.subject) for e in Store.open(path, read_only=True).events() if e.kind.startswith("demo_")]
    assert events[0] == ("demo_spike", None)
    assert events[1][0] == "demo_fault" and events[1][1] == app.views[0].rows[0].key
