"""The console tells the truth at a glance: rows never read ok while a cell is over its limit, names stay
apart, a filter says what it hides, the flags panel is reachable by keyboard, and nothing vanishes in 16 colours."""

from __future__ import annotations

import re

from console.fleet.flags import Flag
from console.tui.screens.replica_screen import ReplicaScreen
from console.tui.widgets.flags_panel import FlagsPanel, grouped_todo, grouped_why, pack
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.table_row import TableRow
from tests.tui.conftest import make_app, poll_times, settle, shown
from tests.tui.fakes import FakeClock, fleet_of, normal_fleet, replica, saturated_fleet

SPIKED = dict(ttft_p95_seconds=7.2, waiting=24.0, kv_usage=0.71)


def rows(app) -> dict[str, str]:
    table = app.screen.query_one(FleetTable)
    return {w.key: shown(w) for w in table.query(TableRow) if w.key in table.order}


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_rows_change_within_one_refresh_of_a_cell_going_over_its_target():
    clock = FakeClock()
    app = make_app(normal_fleet(), clock=clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert all(line.startswith("✓ ok") for line in rows(app).values())
        app.fleets[0].watcher.then(fleet_of(*(replica(f"gpu-{i}", **SPIKED) for i in range(1, 5))))
        await poll_times(pilot, 1)
        for line in rows(app).values():
            # Waiting over its threshold starts the saturation rule: pending, never ok.
            assert line.startswith("… pend"), line
            assert re.search(r"7\.20s!", line) and re.search(r"\b24!", line), line
        total = shown(app.screen.query_one(FleetTable)._total)
        assert not total.startswith("✓ ok")
        await poll_times(pilot, 4)  # 40 s on: the flags have lasted their minimum duration
        assert all(line.startswith(("▲ WARN", "✖ CRIT")) for line in rows(app).values())


async def test_a_row_over_a_fleet_wide_target_reads_over_not_ok():
    hot = dict(ttft_p95_seconds=9.8)  # nothing waits: no replica rule holds, only the fleet's SLO rule
    app = make_app(fleet_of(replica("gpu-1", **hot), replica("gpu-2")))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        found = rows(app)
        assert found["gpu-1"].startswith("! over") and "9.80s!" in found["gpu-1"]
        assert found["gpu-2"].startswith("✓ ok") and "!" not in found["gpu-2"]


async def test_cells_over_their_limit_are_coloured_and_the_selected_row_keeps_only_words_and_bold():
    app = make_app(fleet_of(replica("gpu-1", **SPIKED), replica("gpu-2")), theme="ansi-dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        row = next(w for w in table.query(TableRow) if w.key == "gpu-1")
        coloured = [span for span in row.content.spans if getattr(span.style, "color", None) is not None]
        assert len(coloured) >= 3  # the badge, TTFT and waiting
        await pilot.press("down")  # selects gpu-1
        assert table.selected == "gpu-1"
        await pilot.pause()
        spans = row.content.spans
        assert spans and all(span.style.color is None and span.style.bold for span in spans)
        assert shown(row).startswith("… pend") and "7.20s!" in shown(row)


async def test_without_a_plan_the_flags_panel_says_so_and_names_the_fixed_thresholds():
    app = make_app(normal_fleet(), expect=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = shown(app.screen.query_one(FlagsPanel))
        assert "within its plan" not in text
        assert "no plan" in text and "waiting ≥ 1" in text and "KV ≥ 90%" in text


async def test_no_flags_yet_is_not_all_clear_while_cells_are_over():
    app = make_app(fleet_of(replica("gpu-1", ttft_p95_seconds=9.8)))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        text = shown(app.screen.query_one(FlagsPanel))
        assert "within its plan" not in text


async def test_names_keep_the_part_that_differs_and_the_detail_screen_shows_them_whole():
    names = [f"127.0.0.1{i}:28100" for i in range(1, 6)]
    app = make_app(fleet_of(*(replica(n) for n in names)))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        shown_names = [line[7:].split()[0] for line in rows(app).values()]
        assert len(set(shown_names)) == 5, shown_names
        assert all(name.endswith(f"{i}:28100") for i, name in zip(range(11, 16), shown_names))
        await pilot.press("down", "enter")
        assert isinstance(app.screen, ReplicaScreen)
        await pilot.pause()
        assert "127.0.0.11:28100" in screen_text(app)


async def test_a_wider_screen_gives_names_more_room():
    names = ["gpu-node-a.prod:8000", "gpu-node-b.prod:8000"]
    app = make_app(fleet_of(*(replica(n) for n in names)))
    async with app.run_test(size=(200, 30)) as pilot:
        await settle(pilot)
        assert all(any(n in line for n in names) for line in rows(app).values())


async def test_an_active_filter_is_shown_with_what_it_hides():
    app = make_app(fleet_of(replica("gpu-1"), replica("gpu-2", state="down"), replica("gpu-3"), replica("gpu-4")))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "filter" not in screen_text(app).split("FLEET")[0].lower().replace("/ filter", "")
        await pilot.press("slash", *"name~gpu-1", "enter")
        text = screen_text(app)
        assert "filter name~gpu-1 · 1 of 4 shown, 3 hidden (1 not ok) · Esc clears" in text
        await pilot.press("escape")
        await pilot.pause()
        assert "hidden" not in screen_text(app)


async def test_tab_reaches_the_flags_panel_and_its_keys_scroll_it():
    many = fleet_of(
        *(replica(f"gpu-{i}", **{**SPIKED, "preemptions_per_second": 0.5, "kv_usage": 0.97}) for i in range(1, 9))
    )
    app = make_app(many)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await poll_times(pilot, 4)  # flags active: headlines and their why and do text
        scroll = app.screen.query_one("#flags-scroll")
        assert scroll.max_scroll_y > 0  # more than fits at 80x24
        await pilot.press("tab")
        assert app.screen.focused is scroll
        await pilot.press("pagedown")
        await pilot.pause()
        assert scroll.scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert scroll.scroll_y == scroll.max_scroll_y
        assert "do:" in screen_text(app)
        await pilot.press("escape")
        assert app.screen.focused is None
        table = app.screen.query_one(FleetTable)
        await pilot.press("down")
        assert table.selected == "gpu-1"  # the arrows choose replicas again


async def test_pending_lines_wrap_as_whole_phrases_at_80_columns():
    app = make_app(saturated_fleet())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        lines = shown(app.screen.query_one(FlagsPanel)).splitlines()
        pending = [line for line in lines if "s of 30 s" in line or "pending" in line]
        assert pending
        assert any(re.search(r"\(\d+ s of \d+ s\)", line) for line in lines)
        assert not any(line.rstrip().endswith("(0") for line in lines)


def test_pack_moves_phrases_whole_and_cuts_only_what_cannot_fit():
    assert pack(["… pending: saturated", "·", "gpu-1,", "gpu-2", "(21 s of 30 s)"], 30) == [
        "… pending: saturated · gpu-1,",
        "  gpu-2 (21 s of 30 s)",
    ]
    assert pack(["x" * 12], 5) == ["xxxxx", "  xxx", "  xxx", "  x"]
    assert pack(["a", "b"], 80) == ["a b"]


async def test_a_flag_over_several_replicas_gives_each_its_own_figures():
    waits = (4.0, 7.0, 9.0, 11.0, 13.0)
    app = make_app(fleet_of(*(replica(f"gpu-{i}", waiting=w) for i, w in enumerate(waits, 1))))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await poll_times(pilot, 4)  # 40 s: saturation has lasted its minimum duration on all five
        text = " ".join(shown(app.screen.query_one(FlagsPanel)).split())
        assert "▲ WARN saturated · gpu-1, gpu-2, gpu-3, gpu-4, gpu-5" in text
        assert "why: gpu-1: 4 waiting, KV 46 %; gpu-2: 7 waiting, KV 46 %; gpu-3: 9 waiting, KV 46 %; +2 more" in text
        assert "(and 4 more)" not in text  # the first replica's figures never stand for the others


def test_a_grouped_why_and_todo_hold_for_every_replica_they_speak_for():
    def flag(name: str, why: str, todo: str = "Add a replica.") -> Flag:
        return Flag(f"replica_down:{name}", "replica_down", name, "critical", 0.0, why, todo)

    same = [flag(f"gpu-{i}", "7 waiting, KV 96 %") for i in (1, 2)]
    assert grouped_why(same) == "all 2: 7 waiting, KV 96 %"
    apart = [
        flag("gpu-1", "gpu-1 is down at u1", "Check the process."),
        flag("gpu-2", "its page timed out", "Check /metrics."),
    ]
    assert grouped_why(apart) == "gpu-1 is down at u1; gpu-2: its page timed out"  # a why led by its name once
    assert grouped_todo(apart) == "gpu-1: Check the process. gpu-2: Check /metrics."
    assert grouped_todo(same) == "Add a replica."
