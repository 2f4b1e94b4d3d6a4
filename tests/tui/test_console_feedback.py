"""What the console tells the operator: footer keys at 80 columns, the header's plan context, read-only
feedback, the help screen at 80x24, scrollbars that never read as sparklines, and where screenshots go."""

from __future__ import annotations

from pathlib import Path

from textual.widgets._footer import FooterKey

from console.fleet.plan_now import plan_now
from console.live.handle import FleetHandle
from console.plan.schema import load_plan
from console.tui.app import ConsoleApp
from console.tui.screens.help_screen import HelpScreen
from console.tui.screens.plan_screen import PlanScreen
from console.tui.widgets.console_header import ConsoleHeader
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


async def test_screenshot_notice_gives_the_full_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(normal_fleet(), screenshot_dir=".")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        (saved,) = tmp_path.glob("*.svg")
        assert any(str(saved.resolve()) in n for n in notices(app))
