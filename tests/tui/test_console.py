"""Console behaviour through Pilot: keys, sort, filter, pause, read-only, screens, flags as data changes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from console.live.defaults import MIN_CONSOLE_INTERVAL_SECONDS as MIN_INTERVAL_SECONDS
from console.live.handle import FleetHandle
from console.tui.app import ConsoleApp
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.screens.help_screen import HelpScreen
from console.tui.screens.overview_screen import OverviewScreen
from console.tui.screens.replica_screen import ReplicaScreen
from console.tui.screens.sort_screen import SortScreen
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.flags_panel import FlagsPanel
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.table_row import TableRow
from tests.tui.conftest import make_app, poll_times, settle, shown
from tests.tui.fakes import (
    PLAN_NOW,
    DemoRecorder,
    FakeClock,
    FakeWatcher,
    fleet_of,
    normal_fleet,
    replica,
    saturated_fleet,
)

PLANS = Path(__file__).resolve().parents[2] / "plans"

MIXED = fleet_of(
    replica("gpu-1", kv_usage=0.30),
    replica("gpu-2", kv_usage=0.91, waiting=2.0),
    replica("gpu-3", kv_usage=0.62),
    replica("gpu-4", state="down"),
)


def rows_text(app) -> dict[str, str]:
    table = app.screen.query_one(FleetTable)
    return {w.key: shown(w) for w in table.query(TableRow) if w.key in table.order}


async def test_the_sort_menu_sorts_on_a_column_by_its_key_and_reverses():
    app = make_app(MIXED)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        assert table.order == ("gpu-1", "gpu-2", "gpu-3", "gpu-4")  # the source's order
        await pilot.press("s")
        assert isinstance(app.screen, SortScreen)
        await pilot.press("k")  # KV's key in the menu
        assert isinstance(app.screen, FleetScreen)
        assert table.sort_key == "kv" and table.descending
        assert [str(n.message) for n in app._notifications] == ["sorted by KV, largest first"]  # the header's title
        assert table.order == ("gpu-2", "gpu-3", "gpu-1", "gpu-4")  # unknown KV last
        assert "KV▼" in shown(table.query(TableRow).first())
        await pilot.press("r")
        assert table.order == ("gpu-1", "gpu-3", "gpu-2", "gpu-4")  # reversed, unknown still last
        await pilot.press("s", "k")  # the column already sorted on: reversed again
        assert table.descending and table.order == ("gpu-2", "gpu-3", "gpu-1", "gpu-4")
        await pilot.press("s", "n")
        assert table.sort_key == "name" and not table.descending
        await pilot.press("s", "0")
        assert table.sort_key is None and table.order == ("gpu-1", "gpu-2", "gpu-3", "gpu-4")


async def test_the_sort_menu_works_with_arrows_and_enter_and_closes_on_escape():
    app = make_app(MIXED)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        await pilot.press("s", "escape")
        assert isinstance(app.screen, FleetScreen) and table.sort_key is None
        await pilot.press("s", "down", "down", "enter")  # source order, then the first column on screen, then the next
        assert table.sort_key == table.columns[1]


async def test_j_and_k_move_the_selection_as_down_and_up():
    app = make_app(MIXED)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        await pilot.press("j", "j")
        assert table.selected == "gpu-2"
        await pilot.press("k")
        assert table.selected == "gpu-1"
        await pilot.press("down", "down", "up")
        assert table.selected == "gpu-2"


async def test_filter_keeps_matching_rows_and_reports_a_bad_one():
    app = make_app(MIXED)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        await pilot.press("slash", *"kv>=90%", "enter")
        assert table.order == ("gpu-2",)
        await pilot.press("slash", "ctrl+u", *"speed>1", "enter")
        assert table.order == ("gpu-2",)  # the bad filter changed nothing
        assert "unknown column 'speed'" in str(app.screen.query_one("#filter").border_title)
        await pilot.press("escape")
        await pilot.press("escape")
        assert table.order == ("gpu-1", "gpu-2", "gpu-3", "gpu-4")
        await pilot.press("slash", *"down", "enter")
        assert table.order == ("gpu-4",)
        await pilot.press("p")  # the box is closed: keys reach the console again
        assert app.paused


async def test_filter_takes_each_column_title_as_the_header_shows_it():
    app = make_app(
        fleet_of(
            replica("gpu-1", ttft_p95_seconds=0.2, requests_per_second=1.0, generation_tokens_per_second=90.0),
            replica("gpu-2", ttft_p95_seconds=0.5, requests_per_second=4.0, preemptions_per_second=0.5),
        )
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        header = shown(table.query(TableRow).first())
        for text, kept in (
            ("TTFT95>0.3", ("gpu-2",)),
            ("ttft95<0.3", ("gpu-1",)),
            ("req/s>=2", ("gpu-2",)),
            ("out t/s<100", ("gpu-1",)),
            ("pre/s>0", ("gpu-2",)),
            ("ttft>0.3", ("gpu-2",)),  # the older name still works
        ):
            assert re.split(r"[<>=~]", text)[0].lower() in header.lower()  # a title the header shows (or `ttft`)
            await pilot.press("slash", "ctrl+u", *text, "enter")
            assert table.order == kept, text
        await pilot.press("slash", "ctrl+u", *"speed>1", "enter")
        refused = str(app.screen.query_one("#filter").border_title)
        assert refused.startswith("unknown column 'speed': expected a column title as the header shows it (replica,")
        assert table.order == ("gpu-2",)  # the bad filter changed nothing


async def test_pause_stops_polls_and_says_so():
    app = make_app(normal_fleet())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        assert app.paused
        header = app.screen.query_one(ConsoleHeader)
        assert "PAUSED" in shown(header)
        polls = app.fleets[0].watcher.polls
        await pilot.press("n")
        await pilot.pause(0.1)
        assert app.fleets[0].watcher.polls == polls
        await pilot.press("p")
        await settle(pilot, polls + 1)
        assert app.fleets[0].watcher.polls == polls + 1
        assert "live" in shown(header) and "PAUSED" not in shown(header)


async def test_interval_keys_have_a_one_second_floor():
    app = make_app(normal_fleet(), interval=3.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for _ in range(5):
            await pilot.press("minus")
        assert app.interval == MIN_INTERVAL_SECONDS
        await pilot.press("plus")
        assert app.interval == 2.0
        # 80 columns leave the interval out of the header: the key says it.
        assert [str(n.message) for n in app._notifications] == ["refreshing every 2s"]
        await pilot.resize_terminal(120, 24)
        await pilot.pause()
        assert "every 2s" in shown(app.screen.query_one(ConsoleHeader))


async def test_read_only_dims_demo_actions_through_one_gate():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.check_action("spike", ()) is None  # dimmed, not hidden
        assert app.check_action("fault", ()) is None
        await pilot.press("x", "f")
        assert demo.calls == []
        assert "READ-ONLY" in shown(app.screen.query_one(ConsoleHeader))


async def test_demo_keys_absent_without_a_demo():
    app = make_app(normal_fleet())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.check_action("spike", ()) is False
        assert app.check_action("overview", ()) is False  # one fleet: no overview


async def test_unknown_figures_show_as_unknown_never_zero():
    figures = fleet_of(replica("fresh", kv_usage=None, waiting=None, ttft_p95_seconds=None, requests_per_second=None))
    app = make_app(figures)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        cells = rows_text(app)["fresh"].split()
        # badge (2 words), name, state, then req/s ... : unknown figures read "–"
        table = app.screen.query_one(FleetTable)
        by_column = dict(zip(table.columns, cells[2:]))
        assert by_column["rps"] == "–" and by_column["kv"] == "–" and by_column["wait"] == "–"
        assert by_column["ttft"] == "–"


async def test_flags_appear_and_clear_as_the_data_changes():
    clock = FakeClock()
    app = make_app(saturated_fleet(), clock=clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        panel = app.screen.query_one(FlagsPanel)
        # One poll: the minimum duration has not passed, but the conditions hold: pending, never "within its plan".
        text = shown(panel)
        assert "no flags" not in text and "within its plan" not in text
        assert "… pending: saturated · gpu-1, gpu-2, gpu-3, gpu-4 (0 s of 30 s)" in text
        assert "… pending: load over plan · fleet" in text
        await poll_times(pilot, 2)
        assert "… pending: saturated · gpu-1, gpu-2, gpu-3, gpu-4 (20 s of 30 s)" in shown(panel)
        await poll_times(pilot, 1)  # 30 s of saturation: the minimum duration
        text = shown(panel)
        assert "saturated · gpu-1, gpu-2, gpu-3, gpu-4" in text and "pending: saturated" not in text
        assert "load over plan" in text and "SLO breach: TTFT" in text
        assert "CRIT" in rows_text(app)["gpu-1"]
        app.fleets[0].watcher.then(normal_fleet())
        await poll_times(pilot, 1)
        assert "no flags" in shown(panel)
        assert "✓ ok" in rows_text(app)["gpu-1"]


async def test_rows_are_keyed_and_repaint_only_when_their_text_changes():
    clock = FakeClock()
    first = normal_fleet()
    second = fleet_of(
        replica("gpu-1"),
        replica("gpu-2", kv_usage=0.52, running=24.0),
        replica("gpu-3", kv_usage=0.77),
        replica("gpu-4", requests_per_second=3.2),
    )
    app = make_app(first, second, clock=clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        widgets = {w.key: w for w in table.query(TableRow) if w.key in table.order}
        before = {k: w.renders for k, w in widgets.items()}
        await poll_times(pilot, 1)
        after = {w.key: w for w in table.query(TableRow) if w.key in table.order}
        assert all(after[k] is widgets[k] for k in widgets)  # the same widgets, updated in place
        changed = {k for k in widgets if widgets[k].renders != before[k]}
        assert changed == {"gpu-3"}


async def test_overview_lists_fleets_and_enter_opens_one():
    clock = FakeClock()
    fleets = [
        FleetHandle("assistant", None, FakeWatcher(normal_fleet(), clock=clock), expect=lambda now: PLAN_NOW),
        FleetHandle("batch", None, FakeWatcher(saturated_fleet(), clock=clock), expect=lambda now: PLAN_NOW),
    ]
    app = ConsoleApp(fleets, clock=clock, interval=60.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, OverviewScreen)
        lines = [shown(line) for line in app.screen.query("FleetLine")]
        assert "assistant" in lines[0] and "13.4/20" in lines[0]
        assert "batch" in lines[1] and "25.6/20" in lines[1] and "-28%" in lines[1]
        # One poll: the saturated fleet's rules hold but have not lasted yet: pending, never "none".
        assert "… pending: " in lines[1] and "none" not in lines[1] and "✓" not in lines[1]
        assert lines[0].rstrip().endswith("none")
        await pilot.press("down", "enter")
        assert isinstance(app.screen, FleetScreen) and app.screen.index == 1
        await pilot.pause()
        assert "batch" in shown(app.screen.query_one(ConsoleHeader))
        await pilot.press("o")
        assert isinstance(app.screen, OverviewScreen)


LONG_PLANS = (
    "internal-assistant-18rps-eu-west-1",
    "internal-assistant-18rps-us-east-2",
    "batch-summaries-nightly-h100",
)


def long_named_fleets() -> ConsoleApp:
    clock = FakeClock()
    fleets = [
        FleetHandle(name, None, FakeWatcher(figures, clock=clock), expect=lambda now: PLAN_NOW)
        for name, figures in zip(LONG_PLANS, (normal_fleet(), saturated_fleet(), normal_fleet()))
    ]
    return ConsoleApp(fleets, clock=clock, interval=60.0)


async def test_the_overview_shows_long_plan_names_whole_at_120_columns():
    app = long_named_fleets()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        lines = [shown(line) for line in app.screen.query("FleetLine")]
        for name, line in zip(LONG_PLANS, lines):
            assert line[7:].startswith(name + " "), line
        header = str(app.screen.query_one("#overview-header").render())
        # The columns move right with the names: each heading still ends over its figures.
        assert header.index("load/sched cap") + len("load/sched cap") == lines[1].index("25.6/20") + len("25.6/20")


async def test_the_overview_keeps_the_end_of_a_name_that_does_not_fit():
    app = long_named_fleets()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        labels = [shown(line)[7:25].rstrip() for line in app.screen.query("FleetLine")]
        assert len(set(labels)) == 3 and all("…" in label for label in labels)
        assert [label[-6:] for label in labels] == ["west-1", "east-2", "y-h100"]


async def test_detail_screen_shows_every_figure_of_the_chosen_replica():
    app = make_app(MIXED)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("down", "down", "enter")
        assert isinstance(app.screen, ReplicaScreen) and app.screen.key == "gpu-2"
        await pilot.pause()
        text = shown(app.screen.query_one("#figures"))
        assert "replica gpu-2" in text and "kv usage" in text and "91%" in text
        ttft95 = next(line for line in text.splitlines() if line.startswith("TTFT p95"))
        assert "█" in ttft95 and "620ms" in ttft95 and "(target 1.50s)" in ttft95
        ttft99 = next(line for line in text.splitlines() if line.startswith("TTFT p99"))
        assert "█" not in ttft99 and "–" in ttft99  # unknown: no bar
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)


async def test_help_screen_opens_and_closes():
    app = make_app(normal_fleet())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)


async def test_label_values_are_shown_literally():
    figures = fleet_of(replica("[b]x\x1b[2J"))
    app = make_app(figures)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(FleetTable)
        (key,) = table.order
        text = rows_text(app)[key]
        assert "[b]x\\x1b[2J" in text  # markup and the escape shown as characters
        assert "\x1b" not in text
        await pilot.press("down", "enter")
        detail = shown(app.screen.query_one("#figures"))
        assert "[b]x\\x1b[2J" in detail and "\x1b" not in detail


class FailingWatcher:
    polls = 0
    window_seconds = 60.0

    async def aclose(self) -> None:
        pass

    async def poll(self):
        self.polls += 1
        raise ConnectionError("scrape target refused")


async def test_a_failing_poll_is_shown_in_the_header_and_polling_goes_on():
    app = ConsoleApp([FleetHandle("assistant", None, FailingWatcher())], clock=FakeClock(), interval=60.0)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(100):
            if app.sessions[0].error:
                break
            await pilot.pause(0.01)
        await pilot.pause()
        assert "poll failed: ConnectionError: scrape target refused" in shown(app.screen.query_one(ConsoleHeader))
        await pilot.press("q")
    assert app.return_code in (0, None)


async def test_plan_screen_marks_now_in_the_week_schedule():
    from console.fleet.plan_now import plan_now
    from console.plan.schema import load_plan
    from console.tui.screens.plan_screen import PlanScreen

    plan = load_plan(str(PLANS / "internal-assistant-18rps.yaml"))
    clock = FakeClock()  # Monday 10:00 UTC
    watcher = FakeWatcher(normal_fleet(), clock=clock)
    app = ConsoleApp(
        [FleetHandle("assistant", plan, watcher, expect=lambda now: plan_now(plan, now))], clock=clock, interval=60.0
    )
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("P")
        assert isinstance(app.screen, PlanScreen)
        await pilot.pause()
        week = app.screen.query_one("#week").render()
        assert "now: mon 10:00, 5 replicas scheduled" in week.plain
        marked = [span for span in week.spans if "reverse" in repr(span.style)]
        assert len(marked) == 1 and week.plain[marked[0].start : marked[0].end].strip() == "5"
        report = app.screen.query_one("#report").render().plain
        assert plan.name in report
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)


async def test_plan_key_is_hidden_without_a_plan():
    app = make_app(normal_fleet())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.check_action("plan", ()) is False


async def test_screenshot_key_saves_an_svg(tmp_path):
    app = make_app(normal_fleet(), screenshot_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
    saved = list(tmp_path.glob("*.svg"))
    assert len(saved) == 1
    assert "gpu-1" in saved[0].read_text()


def many_replicas(rps: float, count: int = 60):
    return fleet_of(*(replica(f"node-{i:02d}", requests_per_second=rps) for i in range(count)))


@pytest.mark.slow  # a long run
async def test_rows_out_of_view_wait_and_show_the_latest_figures_when_scrolled_in():
    app = make_app(many_replicas(1.25))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.pause()
        table = app.screen.query_one(FleetTable)
        rows = {w.key: w for w in table.query(TableRow) if w.key in table.order}
        last = rows["node-59"]
        renders = last.renders
        app.fleets[0].watcher.then(many_replicas(2.5))
        await poll_times(pilot, 1)
        assert "2.50" in shown(rows["node-00"])  # in view: repainted with the poll
        assert last.renders == renders and "1.25" in shown(last)  # out of view: not formatted nor repainted
        for _ in range(60):
            await pilot.press("down")
        await pilot.pause(0.3)  # the scroll to the chosen row
        assert table.selected == "node-59"
        assert "2.50" in shown(last)
