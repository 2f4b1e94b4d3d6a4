"""The console in replay: keys move the replay clock; the header, table and flags follow the recording."""

from __future__ import annotations

import pytest

from console.cli import build_parser
from console.commands.replay import open_app
from console.replay.loader import shown_time
from console.tui.screens.fleet_screen import FleetScreen
from console.tui.screens.goto_screen import GoToScreen
from console.tui.screens.help_screen import HelpScreen
from console.tui.screens.overview_screen import OverviewScreen
from console.tui.widgets.console_header import ConsoleHeader
from console.tui.widgets.fleet_table import FleetTable
from console.tui.widgets.table_row import TableRow
from tests.replay.recording import T0, Incident, record_synthetic
from tests.tui.conftest import shown

pytestmark = pytest.mark.timeout(120)


class Wall:
    """The replay's wall clock, moved by the test: playing advances only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay-tui") / "history.sqlite"
    # replica-1 down from +60 s to +100 s: its flag shows 10 s later, while the replay plays through.
    record_synthetic(
        path,
        300.0,
        replicas=3,
        interval=5.0,
        incident=Incident(down_from=60.0, down_until=100.0, queue_replica=None),
        keep_views=False,
    )
    return path


OPENED = []


def replay_app(path, *extra: str):
    app = open_app(build_parser().parse_args(["replay", "--db", str(path), *extra]))
    app.driver.controller._wall = app.wall = Wall()
    app.driver.controller._mark = app.wall.now
    OPENED.append(app.driver.controller.replay)
    return app


@pytest.fixture(autouse=True)
def close_files():
    yield
    while OPENED:
        OPENED.pop().close()


async def settled(pilot, at: float | None = None) -> None:
    """Wait (bounded) until the replay has drawn a frame (at `at` when given)."""
    app = pilot.app
    for _ in range(300):
        frame = app.driver.frame
        if frame is not None and not app.driver.busy and (at is None or frame.at == at):
            break
        await pilot.pause(0.01)
    await pilot.pause()
    await pilot.pause()


def header(app) -> str:
    return shown(app.screen.query_one(ConsoleHeader))


def rows(app) -> dict[str, str]:
    table = app.screen.query_one(FleetTable)
    return {w.key: shown(w) for w in table.query(TableRow) if w.key in table.order}


async def test_opens_at_the_start_paused_with_the_recorded_moment_in_the_header(history):
    app = replay_app(history, "--paused")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert isinstance(app.screen, FleetScreen)
        text = header(app)
        assert f"REPLAY {shown_time(T0)} ×1 ‖" in text
        assert "· age 0s ·" in text and "every" not in text  # the recorded pace is the speed's ×1
        assert set(rows(app)) == {"replica-0", "replica-1", "replica-2"}
        assert "● live" not in text


async def test_step_forward_and_back_one_poll(history):
    app = replay_app(history, "--paused")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("full_stop", "full_stop")
        await settled(pilot, T0 + 10.0)
        assert app.views[0].now == T0 + 10.0
        assert f"REPLAY {shown_time(T0 + 10.0)} ×1 ‖" in header(app)
        await pilot.press("comma")
        await settled(pilot, T0 + 5.0)
        assert app.views[0].now == T0 + 5.0


async def test_speed_keys_double_and_halve(history):
    app = replay_app(history, "--paused")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket", "left_square_bracket")
        await settled(pilot)
        for _ in range(100):
            if app.driver.frame.speed == 4.0:
                break
            await pilot.pause(0.01)
        assert "×4 ‖" in header(app)


async def test_playing_moves_the_clock_at_the_speed_and_the_age_follows_it(history):
    app = replay_app(history, "--paused", "--speed", "2")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("space")
        await settled(pilot)
        assert app.driver.controller.playing and "×2 ▶" in header(app)
        app.wall.now += 1.5  # one tick takes at most a second of wall time: 2 s of recording at ×2
        await settled(pilot, T0 + 2.0)
        assert app.views[0].now == T0  # the next poll is at +5 s
        assert "· age 2s ·" in header(app)  # counted on the replay clock, not the wall clock
        await pilot.press("space")
        await settled(pilot)
        assert not app.driver.controller.playing and "×2 ‖" in header(app)


async def test_the_flags_come_and_go_as_recorded(history):
    app = replay_app(history, "--paused")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("g")
        assert isinstance(app.screen, GoToScreen)
        await pilot.press(*"+80s", "enter")
        await settled(pilot, T0 + 80.0)
        assert isinstance(app.screen, FleetScreen)
        assert "replica_down:replica-1" in {f.id for f in app.views[0].flags}
        assert "✖ CRIT replica-1   DOWN" in rows(app)["replica-1"]
        await pilot.press("greater_than_sign")
        await settled(pilot, T0 + 140.0)
        assert "replica_down:replica-1" not in {f.id for f in app.views[0].flags}


async def test_a_time_the_box_cannot_read_is_said_and_the_box_stays(history):
    app = replay_app(history, "--paused")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("g", *"soon", "enter")
        await pilot.pause()
        assert isinstance(app.screen, GoToScreen)
        said = app.screen.query_one("#goto-input").border_title
        assert "'soon' is not a time capcon reads" in said
        assert "(today)" not in said and "on the day replayed" in said and "+30s" in said
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen) and app.driver.frame.at == T0


async def test_playing_into_the_end_pauses_and_says_end_of_recording(history):
    app = replay_app(history)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("right_curly_bracket")  # +10 min: past the end of five minutes
        await settled(pilot, T0 + 300.0)
        assert not app.driver.controller.playing
        assert f"REPLAY {shown_time(T0 + 300.0)} ×1 ‖" in header(app)
        assert any("end of recording" in n.message for n in app._notifications)
        await pilot.press("home")
        await settled(pilot, T0)
        assert app.views[0].now == T0


async def test_live_only_keys_are_off_and_help_lists_the_replay_keys(history):
    app = replay_app(history, "--paused")
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        for action in ("poll_now", "slower", "faster", "spike", "fault"):
            assert app.check_action(action, ()) is False
        assert app.check_action("replay_play", ()) is True
        await pilot.press("p")  # the pause key pauses (and plays) a replay too
        await settled(pilot)
        assert app.driver.controller.playing
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = shown(app.screen.query_one("#help Static"))
        assert "space / p  play / pause" in text and "g      go to a time" in text


async def test_the_live_console_has_no_replay_keys():
    from tests.tui.conftest import make_app
    from tests.tui.fakes import normal_fleet

    app = make_app(normal_fleet())
    assert app.check_action("replay_play", ()) is False and app.check_action("replay_go", ()) is False
    assert app.check_action("poll_now", ()) is True


async def test_several_fleets_open_on_the_overview(tmp_path):
    path = tmp_path / "history.sqlite"
    record_synthetic(path, 60.0, replicas=2, interval=5.0, fleet="assistant", keep_views=False)
    record_synthetic(path, 60.0, replicas=2, interval=5.0, fleet="batch", plan_path=None, keep_views=False)
    app = replay_app(path, "--paused")
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert f"REPLAY {shown_time(T0)}" in header(app)
        assert all(view is not None for view in app.views)
