"""What the console tells the operator: footer keys at 80 columns, the header's plan context, read-only
feedback, the help screen at 80x24, scrollbars that never read as sparklines, and where screenshots go."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets._footer import FooterKey

from console.fleet.plan_now import plan_now
from console.live.handle import FleetHandle
from console.plan.schema import load_plan
from console.tui.app import ConsoleApp
from console.tui.screens.help_screen import HelpScreen
from console.tui.screens.plan_screen import PlanScreen
from console.tui.widgets.console_header import ConsoleHeader, HeaderInfo, fit_parts, header_parts
from console.tui.widgets.sparkline import BARS
from tests.tui.conftest import make_app, settle, shown
from tests.tui.fakes import DemoRecorder, FakeClock, FakeWatcher, normal_fleet

PLAN_FILE = Path(__file__).resolve().parents[2] / "plans" / "internal-assistant-18rps.yaml"
PARTIAL_BLOCKS = set(BARS) - {"█"}  # what a scrollbar thumb's ends used to be drawn with


def planned_app(**options) -> ConsoleApp:
    plan = load_plan(str(PLAN_FILE))
    clock = FakeClock()  # Monday 10:00 UTC
    watcher = FakeWatcher(normal_fleet(), clock=clock)
    handle = FleetHandle("assistant", plan, watcher, expect=lambda now: plan_now(plan, now))
    return ConsoleApp([handle], clock=clock, interval=60.0, **options)


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def screen_text(app) -> str:
    """Every character on the terminal now, as an operator's copy of the screen would have it."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_footer_at_80_columns_shows_help_and_the_demo_and_plan_keys():
    app = planned_app(demo=DemoRecorder())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        shown_keys = {k.key_display: k.region for k in app.screen.query(FooterKey)}
        for key in ("?", "q", "x", "f", "P"):
            assert key in shown_keys, f"{key} missing from the footer"
            assert shown_keys[key].right <= 80, f"{key} is cut off at 80 columns"


async def test_help_fits_80x24_and_lists_the_keys_hidden_from_the_footer():
    app = planned_app(demo=DemoRecorder())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.pause()
        box = app.screen.query_one("#help")
        assert box.max_scroll_y == 0  # nothing below the fold
        text = screen_text(app)
        assert "? unknown" in text  # the severity legend, the last line
        for hidden in (
            "reverse the sort",
            "slower / faster",
            "save an SVG screenshot",
            "Tab",
            "j k",
            "… pend",
            "! over",
            "what-if",
        ):
            assert hidden in text


async def test_screens_over_the_fleet_show_no_partial_block_glyphs():
    # Scrollbar thumbs drawn with ▂ or ▆ read as sparkline bars in a 16-colour terminal or a copied screen.
    app = planned_app(demo=DemoRecorder())
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("P")
        assert isinstance(app.screen, PlanScreen)
        await pilot.pause()
        assert "replicas scheduled, by hour" in screen_text(app)
        for _ in range(3):  # scroll so the thumb sits between cells
            await pilot.press("down")
            await pilot.pause()
        assert app.screen.query_one("ConsoleScroll").scroll_y > 0
        assert not PARTIAL_BLOCKS & set(screen_text(app))
        await pilot.press("escape", "question_mark")
        await pilot.pause()
        assert not PARTIAL_BLOCKS & set(screen_text(app))


async def test_header_names_the_plan_hour_its_overflow_mode_and_the_rates_window():
    app = planned_app()
    async with app.run_test(size=(200, 24)) as pilot:
        await settle(pilot)
        header = shown(app.screen.query_one(ConsoleHeader))
        assert "plan internal-assistant-18rps at Mon 10:00" in header
        assert "overflow bounded queue" in header and "overflow –" not in header
        assert "window 1 min" in header and "scrape 1 min" not in header
        assert header.rstrip().endswith("scrape")  # the source, named apart from the window


@pytest.mark.parametrize(
    "width,kept,gone",
    [
        (
            200,
            ("every 60s", "plan internal-assistant-18rps at Mon 10:00", "overflow bounded queue", "window 1 min"),
            (),
        ),
        (120, ("plan internal-assistant-18rps at Mon 10:00", "overflow bounded queue", "window 1 min"), ("every",)),
        (80, ("plan at Mon 10:00", "overflow bq", "window 1 min"), ("every", "internal-assistant", "scrape")),
    ],
)
async def test_a_narrower_header_shortens_by_its_rule_and_keeps_the_overflow_mode(width, kept, gone):
    app = planned_app()
    async with app.run_test(size=(width, 24)) as pilot:
        await settle(pilot)
        header = shown(app.screen.query_one(ConsoleHeader))
        assert header.startswith(" assistant ● live · age 2s · ")
        assert all(part in header for part in kept), header
        assert not any(part in header for part in gone), header
        # Whole parts only: nothing cut at the edge, no separator left hanging.
        assert len(header) <= width and "…" not in header and not header.rstrip().endswith("·")


def test_the_header_rule_drops_and_shortens_the_lowest_ranks_first():
    info = HeaderInfo(
        fleet="internal-assistant-18rps",
        plan="internal-assistant-18rps",
        source="scrape",
        window_seconds=20.0,
        age_seconds=0.0,
        interval_seconds=1.0,
        paused=False,
        read_only=False,
        overflow="pass by demo 03:18",
        overflow_mode="pass",
        plan_at="Mon 07:00",
    )

    def line(width: int) -> str:
        return "".join(part.lead + form for part, form in fit_parts(header_parts(info), width))

    head = " internal-assistant-18rps ● live · age 0s"
    assert line(200) == f"{head} · every 1s · plan at Mon 07:00 · overflow pass by demo 03:18 · window 20 s · scrape"
    assert line(120) == f"{head} · every 1s · plan at Mon 07:00 · overflow pass by demo 03:18 · window 20 s"
    assert line(110) == f"{head} · plan at Mon 07:00 · overflow pass by demo 03:18 · window 20 s"
    assert line(100) == f"{head} · plan at Mon 07:00 · overflow pass by demo 03:18"
    assert line(80) == f"{head} · plan at Mon 07:00 · overflow pass"
    assert line(60) == f"{head} · overflow pass"
    assert line(50) == " interna…nt-18rps ● live · age 0s · overflow pass"  # the name cut last, the mode kept
    info = replace(info, overflow="bounded queue by alice 14:02 until 14:32", overflow_mode="bounded_queue")
    # The mode is abbreviated before the window, the switch's author and the plan's hour give way.
    assert line(120) == f"{head} · plan at Mon 07:00 · overflow bq by alice 14:02 until 14:32 · window 20 s"
    assert line(110) == f"{head} · plan at Mon 07:00 · overflow bq by alice 14:02 until 14:32"
    assert line(80) == f"{head} · plan at Mon 07:00 · overflow bq"


async def test_header_does_not_repeat_a_plan_named_like_its_fleet():
    plan = load_plan(str(PLAN_FILE))
    clock = FakeClock()
    handle = FleetHandle(
        plan.name, plan, FakeWatcher(normal_fleet(), clock=clock), expect=lambda now: plan_now(plan, now)
    )
    app = ConsoleApp([handle], clock=clock, interval=60.0)
    async with app.run_test(size=(200, 24)) as pilot:
        await settle(pilot)
        header = shown(app.screen.query_one(ConsoleHeader))
        assert header.count(plan.name) == 1 and "· plan at Mon 10:00 ·" in header


async def test_header_without_a_plan_claims_no_overflow_mode():
    app = make_app(normal_fleet(), expect=None)
    async with app.run_test(size=(200, 24)) as pilot:
        await settle(pilot)
        header = shown(app.screen.query_one(ConsoleHeader))
        assert "overflow" not in header and "window 1 min" in header


async def test_read_only_keys_say_why_they_do_nothing():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        assert demo.calls == []
        assert any(n.startswith("read-only: x (spike)") for n in notices(app))
        await pilot.press("f")
        assert demo.calls == [] and app.screen.__class__.__name__ == "FleetScreen"  # no menu either
        assert any(n.startswith("read-only: f (faults)") for n in notices(app))


async def test_keys_without_read_only_say_nothing_about_it():
    demo = DemoRecorder()
    app = make_app(normal_fleet(), demo=demo)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await pilot.pause()
        assert demo.calls and not any("read-only" in n for n in notices(app))


async def test_o_with_one_fleet_says_why_no_overview_opens_and_the_help_says_it_too():
    app = make_app(normal_fleet())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("o")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "FleetScreen"
        assert notices(app) == ["one fleet: the overview lists several plans' fleets (capcon watch PLAN PLAN ...)"]
        app.clear_notifications()
        await pilot.press("slash", "o")  # typed into the filter box: a letter of the filter, no notice
        await pilot.pause()
        assert app.screen.query_one("#filter").value == "o" and notices(app) == []
        await pilot.press("escape", "question_mark")
        await pilot.pause()
        assert "overview: several plans' fleets (capcon watch PLAN PLAN ...)" in screen_text(app)


async def test_screenshots_go_to_the_data_directory_not_the_working_one(tmp_path, monkeypatch):
    work, data = tmp_path / "clone", tmp_path / "data"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    app = make_app(normal_fleet())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        (saved,) = (data / "capcon" / "screenshots").glob("*.svg")
        assert notices(app) == [f"screenshot saved: {saved.resolve()}"]
    assert list(work.iterdir()) == []  # nothing for `git status` to show


async def test_a_screenshot_folder_that_cannot_be_made_is_said_and_the_console_goes_on(tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    app = make_app(normal_fleet(), screenshot_dir=blocked / "screenshots")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        (notice,) = notices(app)
        assert notice.startswith(f"screenshot not saved: {blocked / 'screenshots'}: ")
        await pilot.press("p")
        assert app.paused


async def test_screenshot_notice_gives_the_full_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(normal_fleet(), screenshot_dir=".")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        (saved,) = tmp_path.glob("*.svg")
        assert any(str(saved.resolve()) in n for n in notices(app))
