"""`capcon replay`: the console opened on recorded polls, with the flags the live console raised."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from console.args import SubParsers
from console.errors import UserError

if TYPE_CHECKING:
    from console.tui.app import ConsoleApp

DESCRIPTION = """\
Open the console on a history file written by `capcon watch` or `capcon record`:
the same screens, figures and flags as live, on a replay clock you can pause,
step, speed up and move. The header shows REPLAY, the recorded moment on screen
(local time), the speed and ▶ playing or ‖ paused; the data age is counted on the
replay clock.

Keys: space play/pause (p too), . and , one poll forward or back, ] and [
double or halve the speed (×0.25 to ×64), > and < one minute forward or back,
} and { ten minutes, g go to a time, Home and End the start and the end.
After a jump, flags and trends are recomputed from the polls of the 15 minutes
before the moment shown."""

EPILOG = """\
times (--from, --to, g): 2026-11-30 14:03 (local; Z or +01:00 for another zone),
14:03 (today; in the go-to box the day replayed), -2h, -30m, +30s, now, unix seconds.
exit status: 0 done; 2 bad input (no such file, not a history file, a damaged one, unknown fleet, no polls in the range).
examples:
  capcon replay
  capcon replay --from -2h --speed 8
  capcon replay --db /var/lib/capcon/history.sqlite --fleet assistant --from '2026-11-30 14:00' --to '2026-11-30 15:00' --paused"""


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    from console.replay import MAX_SPEED, MIN_SPEED

    parser = sub.add_parser(
        "replay",
        help="the console on recorded data: seek, step, play at a chosen speed",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help="the history file (default: history.sqlite in the user's data directory, as `capcon watch` writes)",
    )
    parser.add_argument(
        "--fleet",
        action="append",
        default=[],
        metavar="NAME",
        help="replay this fleet; repeat for several (default: every fleet in the file, with the overview screen)",
    )
    parser.add_argument(
        "--from", dest="start", metavar="WHEN", default=None, help="start here (default: the start of the recording)"
    )
    parser.add_argument(
        "--to", dest="end", metavar="WHEN", default=None, help="stop here (default: the end of the recording)"
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help=f"replay speed, {MIN_SPEED:g} to {MAX_SPEED:g} (default 1: the recorded pace)",
    )
    parser.add_argument("--paused", action="store_true", help="open paused at the start")
    parser.add_argument(
        "--theme", default=None, metavar="NAME", help="Textual theme (default ansi-dark: the terminal's own colours)"
    )
    parser.set_defaults(run=run)
    return parser


def history_path(given: str | None) -> Path:
    if given:
        return Path(given)
    from console.store.paths import default_history_path

    return default_history_path()


def _when(flag: str, text: str | None, now: float) -> float | None:
    if text is None:
        return None
    from console.replay.moment import parse_moment

    try:
        return parse_moment(text, now)
    except ValueError as error:
        raise UserError(f"{flag} {text!r}: {error}") from None


def _check(args: argparse.Namespace) -> None:
    from console.commands.console_options import check_theme
    from console.replay import MAX_SPEED, MIN_SPEED

    if not math.isfinite(args.speed) or not MIN_SPEED <= args.speed <= MAX_SPEED:
        raise UserError(f"--speed {args.speed:g}: expected {MIN_SPEED:g} to {MAX_SPEED:g} (1 is the recorded pace)")
    check_theme(args.theme)


def open_app(args: argparse.Namespace, now: float | None = None) -> ConsoleApp:
    """The replay console for `args`, ready to run (the tests drive it with run_test)."""
    from console.bench.estimate import estimate_capacity
    from console.replay.controller import ReplayController
    from console.replay.loader import open_replay
    from console.store.database import reading_errors
    from console.tui.app import DEFAULT_THEME, ConsoleApp
    from console.tui.drivers import RecordedFleetLabel

    _check(args)
    now = time.time() if now is None else now
    start, end = _when("--from", args.start, now), _when("--to", args.end, now)
    replay = open_replay(history_path(args.db), args.fleet or None, start, end, estimate_capacity)
    try:
        controller = ReplayController(replay, speed=args.speed, playing=not args.paused)
        with reading_errors(replay.path):  # a damaged file: one line, exit 2 (once open, the console says it)
            handles = [RecordedFleetLabel(f.name, f.first_plan()) for f in replay.fleets]
            first = replay.fleets[0].read(replay.fleets[0].first, replay.fleets[0].first)[0]
        return ConsoleApp(
            handles, interval=first.interval_seconds, theme=args.theme or DEFAULT_THEME, replay=controller
        )
    except BaseException:
        replay.close()
        raise


def run(args: argparse.Namespace) -> int:
    from console.tui.drivers import ReplayDriver

    app = open_app(args)
    try:
        app.run()
    finally:
        if isinstance(app.driver, ReplayDriver):  # always: open_app hands the app a replay
            app.driver.controller.replay.close()
    return int(app.return_code or 0)
