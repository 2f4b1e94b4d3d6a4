"""The console on a simulated fleet with its GPU pages: the fleet table's SM, tensor, DRAM and FB columns show
each replica's own counters and rise with its load; a narrow terminal drops them by the table's rule."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from console.live.setup import handle_on_urls
from console.tui.app import ConsoleApp
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.table_row import TableRow, cell
from tests.gateway.conftest import completion, send, sim_fleet
from tests.gateway.plans import gateway_plan
from tests.tui.conftest import shown

pytestmark = pytest.mark.timeout(90)


def console_on(fleet, plan) -> ConsoleApp:
    pods = [(a.pod, a.namespace) for a in fleet.replica_addresses()]
    handle = handle_on_urls("gpus", plan, fleet.metrics_urls, 10.0, 1.0, dcgm=fleet.gpu_urls, pods=pods)
    return ConsoleApp([handle], interval=1.0)


async def next_view(pilot, app: ConsoleApp, poll_now: bool = False):
    """The next view the console shows (a real fleet: wait, bounded, for its poll)."""
    before = app.views[0]
    if poll_now:
        await pilot.press("n")
    for _ in range(500):
        if app.views[0] is not None and app.views[0] is not before:
            break
        await pilot.pause(0.01)
    await pilot.pause()
    await pilot.pause()
    assert app.views[0] is not before
    return app.views[0]


def row_text(app: ConsoleApp, key: str) -> str:
    (widget,) = [w for w in app.screen.query(TableRow) if w.key == key]
    return shown(widget)


async def test_the_gpu_columns_rise_with_the_replicas_load():
    plan = gateway_plan()
    async with aiohttp.ClientSession() as session, sim_fleet(2, plan) as fleet:
        app = console_on(fleet, plan)
        async with app.run_test(size=(200, 40)) as pilot:
            await next_view(pilot, app)
            table = app.screen.query_one(FleetTable)
            assert {"sm", "tensor", "dram", "fb"} <= set(table.columns)
            header = shown(table.query_one(".header"))
            assert all(title in header for title in ("SM", "tensor", "DRAM", "FB"))
            idle = app.views[0].row("replica-0")
            load = asyncio.gather(*(send(session, fleet.urls[0], completion(max_tokens=400)) for _ in range(24)))
            await asyncio.sleep(1.2)  # a whole window of the GPU's counters under load
            await next_view(pilot, app, poll_now=True)
            busy = app.views[0].row("replica-0")
            neighbour = app.views[0].row("replica-1")
            text = row_text(app, "replica-0")
            load.cancel()
    assert busy.gpu.sm_active > idle.gpu.sm_active + 0.3 and busy.gpu.dram_active > idle.gpu.dram_active + 0.1
    assert neighbour.gpu.sm_active < busy.gpu.sm_active / 2
    for column in ("sm", "tensor", "dram", "fb"):
        assert f" {cell(busy, column)}" in text, (column, text)  # what the row shows is the replica's own
    assert cell(busy, "sm") != "–" and cell(busy, "fb").endswith("GB")


async def test_a_narrow_terminal_drops_the_gpu_columns_first():
    plan = gateway_plan()
    async with sim_fleet(1, plan) as fleet:
        app = console_on(fleet, plan)
        async with app.run_test(size=(80, 24)) as pilot:
            await next_view(pilot, app)
            columns = app.screen.query_one(FleetTable).columns
            gpu = app.views[0].row("replica-0").gpu
            (feed,) = app.driver.feeds
    assert gpu is not None and gpu.gpus >= 1  # read, only not shown at this width
    assert feed.gpus is not None and feed.gpus.source._client.is_closed  # the GPU pages' client closed on exit
    assert not {"sm", "tensor", "dram", "fb"} & set(columns) and {"wait", "kv", "ttft"} <= set(columns)
