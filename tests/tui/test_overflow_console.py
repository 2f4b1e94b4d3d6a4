"""The overflow panel, the header's mode and the switch dialog (key m).

Snapshots over prepared gateway figures (a watch that hands them out: the real one is tested against real
gateways in tests/sources/test_gateway_source.py); the dialog against two real gateways in front of a real
simulated fleet, one of them stopped for the partial failure.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest

from console.live.gateways import GatewayView
from console.live.handle import FleetHandle
from console.metrics.gateway import GatewayFigures, PolicyInForce
from console.plan.model import FleetSource, GatewayAddress
from console.tui.app import ConsoleApp
from console.tui.screens.switch_screen import SwitchScreen
from console.tui.widgets.overflow_panel import OverflowPanel
from tests.gateway.conftest import TOKEN, gateway, sim_fleet
from tests.gateway.plans import gateway_plan
from tests.tui.conftest import poll_times, settle, shown
from tests.tui.fakes import NOW, PLAN_NOW, FakeClock, FakeWatcher, saturated_fleet

TOKEN_ENV = "TEST_ADMIN_TOKEN"


pytestmark = pytest.mark.usefixtures("utc_clock")  # tests/tui/conftest.py


class PreparedGateways:
    """Hands out one prepared GatewayView on each poll."""

    def __init__(self, figures: GatewayFigures) -> None:
        self.figures = figures
        self.polls = 0

    async def poll(self) -> GatewayView:
        self.polls += 1
        return GatewayView(self.figures, (self.figures.name,))

    async def aclose(self) -> None:
        pass


BUSY = GatewayFigures(
    "10.0.0.2:8080",
    NOW - 2.0,
    1,
    1,
    admitted_per_second=19.6,
    hosted_per_second=0.0,
    rejected_per_second=6.2,
    timed_out_per_second=0.4,
    deferred_per_second=0.0,
    queue_length=64,
    queue_wait_p95_seconds=2.1,
    hosted_dollars_per_hour=0.0,
    policy=PolicyInForce("pass", "alice", False, NOW - 600.0, NOW + 1200.0),
    modes=("pass",),
)


def app_with_gateways(figures: GatewayFigures = BUSY, **options) -> ConsoleApp:
    clock = FakeClock()
    handle = FleetHandle(
        "assistant",
        None,
        FakeWatcher(saturated_fleet(), clock=clock),
        expect=lambda now: PLAN_NOW,
        gateways=("http://10.0.0.2:8080",),
    )
    watch = PreparedGateways(figures)
    return ConsoleApp([handle], clock=clock, interval=60.0, gateway_watch=lambda h: watch, **options)


async def watched_for_a_minute(pilot) -> None:
    await settle(pilot)
    await poll_times(pilot, 4)


def test_the_overflow_panel_at_120x40(snap_compare):
    assert snap_compare(app_with_gateways(), terminal_size=(120, 40), run_before=watched_for_a_minute)


def test_the_overflow_panel_at_80x24(snap_compare):
    assert snap_compare(app_with_gateways(), terminal_size=(80, 24), run_before=watched_for_a_minute)


async def test_the_panel_says_what_the_gateways_enforce_and_suggests_the_plans_mode():
    app = app_with_gateways()
    async with app.run_test(size=(120, 40)) as pilot:
        await watched_for_a_minute(pilot)
        text = shown(app.screen.query_one(OverflowPanel))
        assert "admitted 19.6/s" in text and "queue 64" in text and "queue 64 (p95 2.10s)" in text
        assert "429 6.20/s" in text and "503 0.40/s" in text
        assert "+1 replica $5.00/h" in text  # 2 GPUs at $2.50
        assert "plan says bounded queue: m to switch" in text  # saturated, over the plan, not its mode
        flags = shown(app.screen.query_one("#flags"))
        assert "overflow policy (bounded queue: reject the excess early). Key m switches it here." in flags
        header = shown(app.screen.query_one("#header"))
        assert "overflow pass by alice 09:50 until 10:20" in header


async def test_no_gateway_answering_is_unknown_in_the_panel_and_the_header():
    down = GatewayFigures("10.0.0.2:8080", 0.0, 0, 1, error="cannot connect: refused")
    app = app_with_gateways(down)
    async with app.run_test(size=(120, 40)) as pilot:
        await watched_for_a_minute(pilot)
        text = shown(app.screen.query_one(OverflowPanel))
        assert "no gateway answering: every figure unknown" in text and "cannot connect" in text
        assert "admitted" not in text
        assert "overflow ? (no gateway answering)" in shown(app.screen.query_one("#header"))


async def test_read_only_dims_the_switch_and_says_why():
    app = app_with_gateways(read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await watched_for_a_minute(pilot)
        await pilot.press("m")
        await pilot.pause()
        assert not isinstance(app.screen, SwitchScreen)
        notes = [str(n.message) for n in app._notifications]
        assert any("read-only" in n and "overflow policy" in n for n in notes), notes


async def test_a_switch_without_a_token_says_so_and_the_console_keeps_watching():
    app = app_with_gateways()  # no plan: no admin API, no token
    async with app.run_test(size=(80, 24)) as pilot:
        await watched_for_a_minute(pilot)
        await pilot.press("m")
        await pilot.pause()
        assert not isinstance(app.screen, SwitchScreen)
        notes = [str(n.message) for n in app._notifications]
        assert any(n.startswith("overflow switch unavailable: no gateway admin API") for n in notes), notes


@contextlib.contextmanager
def history(path):
    """A real recorder on a real history file; yields (recorder, the attempts read back once it closed)."""
    from console.store.database import Store
    from console.store.recorder import Recorder

    recorder = Recorder(path)
    recorder.start()
    attempts: list = []
    try:
        yield recorder, attempts
    finally:
        recorder.close()
        store = Store.open(path, read_only=True)
        attempts += [e for e in store.events() if e.kind == "overflow_attempt"]
        store.close()


async def live_app(plan, fleet, gateways, recorder=None) -> ConsoleApp:
    from console.live.setup import handle_on_urls

    handle = handle_on_urls("gw", plan, [u + "/metrics" for u in fleet.urls], 10.0, 1.0)
    handle = replace(handle, gateways=tuple(g.url for g in gateways))
    return ConsoleApp([handle], interval=1.0, environ={TOKEN_ENV: TOKEN}, actor="alice", recorder=recorder)


def switching_plan(fleet, *servers):
    plan = gateway_plan()
    addresses = tuple(GatewayAddress(s.url, s.admin_url) for s in servers)
    return replace(
        plan,
        fleet=FleetSource(targets=tuple(fleet.urls), gateways=addresses),
        overflow=replace(plan.overflow, admin_token_env=TOKEN_ENV),
    )


async def open_switch(pilot, app) -> SwitchScreen:
    for _ in range(300):
        if app.views[0] is not None and app.sessions[0].gateways is not None:
            break
        await pilot.pause(0.02)
    await pilot.press("m")
    for _ in range(100):
        if isinstance(app.screen, SwitchScreen):
            break
        await pilot.pause(0.01)
    assert isinstance(app.screen, SwitchScreen)
    return app.screen


async def until_answered(pilot, dialog: SwitchScreen) -> None:
    for _ in range(500):
        if dialog.answers is not None:
            return
        await pilot.pause(0.02)
    raise AssertionError("the switch got no answer")


async def test_the_switch_applies_to_every_gateway_and_goes_to_the_history(tmp_path):
    async with (
        sim_fleet(1) as fleet,
        gateway(fleet.urls, planned_cap=1) as one,
        gateway(fleet.urls, planned_cap=1) as two,
    ):
        with history(tmp_path / "h.sqlite") as (recorder, attempts):
            app = await live_app(switching_plan(fleet, one, two), fleet, [one, two], recorder)
            async with app.run_test(size=(80, 24)) as pilot:
                dialog = await open_switch(pilot, app)
                assert dialog.mode == "bounded_queue"  # the plan's mode, prefilled
                # The plan's 4 per replica, for the fleet's one replica; its 1 s deadline.
                assert dialog.query_one("#field-max_queue").value == "4"
                assert dialog.query_one("#field-max_wait").value == "1"
                await pilot.press("right")  # hosted
                await pilot.press("left", "left")  # pass
                assert dialog.mode == "pass"
                await pilot.press("tab", *"45m", "tab", *"spike at 10:02")
                summary = shown(dialog.query_one("#switch-summary"))
                assert summary == "every request is forwarded; the queue is released; for 45m"
                await pilot.press("enter")
                assert dialog.confirming is not None
                assert "Enter applies to 2 targets" in shown(dialog.query_one("#switch-hint"))
                await pilot.press("enter")
                await until_answered(pilot, dialog)
                assert [a.ok for a in dialog.answers] == [True, True]
                assert "✓ applied by every one (2)" in shown(dialog.query_one("#switch-result"))
                await pilot.press("escape")
                await pilot.pause()
                flags = shown(app.screen.query_one("#flags"))
                assert "pass by alice: spike at 10:02 (2 of 2 applied)" in flags
        for server in (one, two):
            policy = server.policy()
            assert (policy.mode, policy.actor, policy.reason) == ("pass", "alice", "spike at 10:02")
            assert policy.expires_at == pytest.approx(policy.set_at + 2700)
    (attempt,) = attempts
    assert attempt.fleet == "gw" and attempt.subject == "-> pass: applied"
    assert attempt.detail["actor"] == "alice" and attempt.detail["reason"] == "spike at 10:02"
    assert attempt.detail["applied"] == 2 and attempt.detail["to"] == "pass"
    assert TOKEN not in repr(attempt)


async def test_a_stopped_gateway_is_named_and_the_other_applies(tmp_path):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as alive:
        gone = gateway(fleet.urls, planned_cap=1)
        stopped = await gone.__aenter__()
        await gone.__aexit__(None, None, None)  # its ports are closed: nothing answers there
        with history(tmp_path / "h.sqlite") as (recorder, attempts):
            app = await live_app(switching_plan(fleet, alive, stopped), fleet, [alive], recorder)
            async with app.run_test(size=(80, 24)) as pilot:
                dialog = await open_switch(pilot, app)
                await pilot.press("2", "tab", "tab", "tab", "tab", *"queue test", "enter", "enter")
                await until_answered(pilot, dialog)
                result = shown(dialog.query_one("#switch-result"))
                assert "✖ 1 of 2 applied" in result
                assert f"✖ gateway {stopped.admin_url}" in result and "not answering" in result
                assert f"✓ gateway {alive.admin_url}" in result
        assert alive.policy().reason == "queue test"
    (attempt,) = attempts
    assert attempt.subject == "-> bounded_queue: 1 of 2 applied" and attempt.detail["failed"] == 1


async def test_a_bad_field_is_named_and_nothing_is_sent():
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        app = await live_app(switching_plan(fleet, server), fleet, [server])
        before = server.policy()
        async with app.run_test(size=(80, 24)) as pilot:
            dialog = await open_switch(pilot, app)
            await pilot.press("tab")  # max queue
            await pilot.press("ctrl+u", *"lots")
            assert "max queue" in shown(dialog.query_one("#switch-error"))
            await pilot.press("tab", "ctrl+u", *"-1")  # max wait
            await pilot.press("tab", "tab", *"x")  # reason
            await pilot.press("enter")
            assert dialog.confirming is None and dialog.answers is None
            assert "max queue" in shown(dialog.query_one("#switch-error"))
            await pilot.press("escape")
            assert not isinstance(app.screen, SwitchScreen)
        assert server.policy() == before


async def test_a_switch_made_elsewhere_shows_on_the_timeline_and_in_the_header():
    import aiohttp

    from tests.gateway.conftest import switch

    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        app = await live_app(switching_plan(fleet, server), fleet, [server])
        async with app.run_test(size=(120, 40)) as pilot, aiohttp.ClientSession() as session:
            for _ in range(300):
                if app.sessions[0].gateways is not None and app.views[0] is not None:
                    break
                await pilot.pause(0.02)
            assert (await switch(session, server, mode="pass", actor="bob", reason="runbook")).status == 200
            for _ in range(300):
                if app.sessions[0].switches:
                    break
                await pilot.pause(0.02)
            await pilot.pause()
            assert "pass by bob" in shown(app.screen.query_one("#flags"))
            assert "overflow pass by bob" in shown(app.screen.query_one("#header"))


async def test_the_mode_fields_reach_the_gateway_and_its_refusal_is_shown():
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        app = await live_app(switching_plan(fleet, server), fleet, [server])
        async with app.run_test(size=(80, 24)) as pilot:
            # defer, holding deferrable work: mode, max queue, max wait, deferrable, for, reason
            dialog = await open_switch(pilot, app)
            await pilot.press("4", "tab", "ctrl+u", *"7", "tab", "tab", "ctrl+u", *"hold", "tab", *"2h", "tab")
            await pilot.press(*"batch later", "enter", "enter")
            await until_answered(pilot, dialog)
            assert dialog.answers[0].ok, dialog.answers
            policy = server.policy()
            assert (policy.mode, policy.defer_action, policy.max_queue) == ("defer", "hold", 7)
            assert policy.expires_at == pytest.approx(policy.set_at + 7200)
            await pilot.press("escape")
            # hosted, with a plan that keeps prompts in: refused before anything is sent, and the dialog says why
            dialog = await open_switch(pilot, app)
            await pilot.press("3", "tab", "tab", "tab", "ctrl+u", *"5", "tab", "tab", *"try hosted", "enter", "enter")
            await until_answered(pilot, dialog)
            result = shown(dialog.query_one("#switch-result"))
            assert "✖ nothing sent" in result and "prompts_may_leave is false" in result, result
            assert dialog.answers == ()
        assert server.policy().mode == "defer"  # the refusal changed nothing


async def test_a_missing_admin_token_is_named_when_m_is_pressed(monkeypatch):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        app = await live_app(switching_plan(fleet, server), fleet, [server])
        app.environ = {}  # TEST_ADMIN_TOKEN unset
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(300):
                if app.views[0] is not None:
                    break
                await pilot.pause(0.02)
            await pilot.press("m")
            await pilot.pause()
            assert not isinstance(app.screen, SwitchScreen)
            notes = [str(n.message) for n in app._notifications]
            assert any("TEST_ADMIN_TOKEN" in n and "not set" in n for n in notes), notes
            assert all(TOKEN not in n for n in notes)
