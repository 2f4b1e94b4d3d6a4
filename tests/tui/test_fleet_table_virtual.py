"""The virtual fleet table at 10,000 replicas: a pool of row widgets about two screens tall, bound to the view.

Through Pilot with a watcher of our own that hands out prepared figures: scrolling,
paging to the end, sorting, filtering and a new view must all show the right
replicas while the number of mounted rows stays bounded by the screen, not the fleet.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from console.fleet.view import parse_filter, sort_rows
from console.live.handle import FleetHandle
from console.live.watcher import Poll
from console.metrics.figures import FleetFigures
from console.tui.app import ConsoleApp
from console.tui.widgets import fleet_table
from console.tui.widgets.fleet_table import POOL_SCREENS, FleetTable
from console.tui.widgets.table_row import TableRow
from tests.tui.conftest import poll_times, settle, shown
from tests.tui.fakes import PLAN_NOW, FakeClock, fleet_of, replica

REPLICAS = 10_000
SIZE = (120, 40)
TALL = (120, 100)
POOL_LIMIT = POOL_SCREENS * SIZE[1]


def name(i: int) -> str:
    return f"rep-{i:05d}"


def big_fleet(at: float, reverse: bool = False) -> FleetFigures:
    """10,000 replicas; KV use grows with the index up to 99%, so the last one is the fullest."""
    order = range(REPLICAS - 1, -1, -1) if reverse else range(REPLICAS)
    return fleet_of(*(replica(name(i), kv_usage=0.99 * i / (REPLICAS - 1)) for i in order), at=at)


class PreparedWatcher:
    """Hands out prepared fleets in turn (the last repeats), each stamped 2 s before the clock; no network."""

    window_seconds = 0.0
    interval_seconds = 1.0

    def __init__(self, clock: FakeClock, *fleets: FleetFigures) -> None:
        self.clock = clock
        self.fleets = list(fleets)
        self.polls = 0

    async def poll(self) -> Poll:
        fleet = self.fleets[min(self.polls, len(self.fleets) - 1)]
        if self.polls:
            self.clock.now += 10.0
        self.polls += 1
        fleet = replace(fleet, at=self.clock.now - 2.0)
        return Poll(fleet, None, self.clock.now, fleet.window_seconds, self.interval_seconds)

    async def aclose(self) -> None:
        pass


def make_big_app(*fleets: FleetFigures) -> ConsoleApp:
    clock = FakeClock()
    watcher = PreparedWatcher(clock, *(fleets or (big_fleet(clock.now),)))
    handle = FleetHandle("assistant", None, watcher, expect=lambda now: PLAN_NOW)
    return ConsoleApp([handle], clock=clock, interval=60.0)


def replica_rows(table: FleetTable) -> list[TableRow]:
    return [w for w in table.query(TableRow) if w.has_class("replica")]


def rows_on_screen(table: FleetTable) -> list[TableRow]:
    """The bound widgets of the rows inside the body's viewport, top to bottom."""
    top, height = int(table._body.scroll_y), table.body_height()
    keys = table.order[top : top + height]
    by_key = {w.key: w for w in replica_rows(table)}
    return [by_key[k] for k in keys]


def assert_screen_is_true(table: FleetTable) -> None:
    """Every row in view has a widget, bound to the replica at that place, showing that replica's name."""
    on_screen = rows_on_screen(table)
    assert on_screen
    for widget in on_screen:
        assert widget.key[4:] in shown(widget)
        assert widget.has_class("-selected") == (widget.key == table.selected)


async def test_ten_thousand_replicas_mount_about_two_screens_of_rows():
    app = make_big_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        assert len(table.order) == REPLICAS
        mounted = replica_rows(table)
        assert table.body_height() <= len(mounted) <= POOL_LIMIT
        assert table._body.virtual_size.height == REPLICAS  # the scrollbar reads the whole fleet
        assert_screen_is_true(table)
        assert rows_on_screen(table)[0].key == name(0)


@pytest.mark.slow
async def test_paging_down_to_the_end_selects_and_shows_the_last_replica():
    app = make_big_app()
    app.animation_level = "none"  # hundreds of pages: each scroll inside the pool lands at once, not in 0.3 s
    async with app.run_test(size=TALL) as pilot:  # pages about 50 rows long: a couple of hundred of them
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        pages = 0
        while table.selected != name(REPLICAS - 1):
            await pilot.press("pagedown")
            pages += 1
            assert pages < REPLICAS  # each page moves on
        await pilot.pause()
        assert pages > 1 and len(replica_rows(table)) <= POOL_SCREENS * TALL[1]
        assert rows_on_screen(table)[-1].key == name(REPLICAS - 1)
        assert_screen_is_true(table)
        await pilot.press("up", "up", "k")
        await pilot.pause(0.3)
        assert table.selected == name(REPLICAS - 4)
        assert_screen_is_true(table)
        await pilot.press("pageup")
        await pilot.pause(0.3)
        assert table.selected == name(REPLICAS - 4 - table.body_height())
        assert_screen_is_true(table)


async def test_scrolling_the_body_like_the_mouse_wheel_rebinds_the_pool():
    app = make_big_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        for y in (5_000, 5_003, 120, REPLICAS):
            table._body.scroll_to(y=y, animate=False)
            await pilot.pause()
            await pilot.pause()
            assert len(replica_rows(table)) <= POOL_LIMIT
            assert_screen_is_true(table)
        assert rows_on_screen(table)[-1].key == name(REPLICAS - 1)


async def test_a_sort_puts_the_fullest_replica_first_and_a_filter_keeps_only_the_matching_rows():
    app = make_big_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        table._body.scroll_to(y=4_000, animate=False)
        await pilot.pause()
        table.sort_by("kv", descending=True)
        table._body.scroll_to(y=0, animate=False)
        await pilot.pause()
        await pilot.pause()
        assert table.order[:3] == (name(9999), name(9998), name(9997))
        assert rows_on_screen(table)[0].key == name(9999)
        assert "KV▼" in shown(table.query(TableRow).first())
        assert_screen_is_true(table)

        table.filter_by(parse_filter("rep-0999"))
        await pilot.pause()
        await pilot.pause()
        expected = tuple(name(i) for i in range(9999, 9989, -1))
        assert table.order == expected
        assert [w.key for w in replica_rows(table)] == list(expected)  # a pool no larger than the rows
        assert table._body.virtual_size.height == len(expected)
        assert_screen_is_true(table)

        table.filter_by(parse_filter(""))
        await pilot.pause()
        await pilot.pause()
        assert len(table.order) == REPLICAS and len(replica_rows(table)) <= POOL_LIMIT
        assert_screen_is_true(table)


async def test_the_selected_replica_survives_a_new_view_in_another_order():
    clock = FakeClock()
    app = make_big_app(big_fleet(clock.now), big_fleet(clock.now, reverse=True))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        for _ in range(5):
            await pilot.press("pagedown")
        await pilot.press("down")
        await pilot.pause(0.3)
        chosen = table.selected
        assert chosen is not None and chosen != name(0)
        assert app.screen.chosen_replica() == chosen
        await poll_times(pilot, 1)
        assert table.order[0] == name(REPLICAS - 1)  # the new view's order
        assert table.selected == chosen
        assert table.selected_row() is not None and table.selected_row().key == chosen
        await pilot.press("down")
        await pilot.pause(0.3)
        index = REPLICAS - 1 - int(chosen[4:])
        assert table.selected == table.order[index + 1]
        assert table.selected in [w.key for w in rows_on_screen(table)]
        assert_screen_is_true(table)


async def test_rows_are_sorted_once_per_view_and_sort_not_once_per_step_of_the_cursor(monkeypatch):
    sorts: list[int] = []

    def counted(rows, column, descending=False):
        sorts.append(len(rows))
        return sort_rows(rows, column, descending)

    monkeypatch.setattr(fleet_table, "sort_rows", counted)
    app = make_big_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        table.sort_by("kv", descending=True)
        for _ in range(20):
            await pilot.press("j")
        await pilot.press("pagedown", "pagedown")
        await pilot.pause(0.3)
        assert sorts == [REPLICAS]
        assert table.selected == table.order[19 + 2 * table.body_height()]  # the first step chose the first row
        await poll_times(pilot, 1)
        assert sorts == [REPLICAS, REPLICAS]  # a new view: sorted again, once


def test_a_flag_over_thousands_of_replicas_names_twelve_and_counts_the_rest():
    from console.fleet.flags import Flag, Pending
    from console.tui.widgets.flags_panel import _grouped, pending_lines

    flags = tuple(Flag(f"saturation:r{i}", "saturation", f"r{i}", "warning", 0.0, "why", "do") for i in range(3000))
    (line,) = list(_grouped(flags, 10.0))
    assert line[2].startswith("r0, r1, ") and line[2].endswith("r11 and 2,988 more")
    pending = tuple(Pending(f"saturation:r{i}", "saturation", f"r{i}", "warning", 0.0, 30.0, "why") for i in range(40))
    (text,) = list(pending_lines(pending, 10.0))
    assert "r11, and 28 more (10 s of 30 s)" in text and "r12" not in text
