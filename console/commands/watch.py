"""`capcon watch`: live fleet figures, by direct scrape or through Prometheus.

`--once` takes two samples `--interval` apart, prints the fleet table (or JSON)
and exits; without it the interactive console opens on the same Watcher.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from console.args import BARE_INTERVAL, BARE_WINDOW, OPTION_LIMITS, SubParsers, span
from console.commands.console_options import check_console_interval, check_theme
from console.commands.recording import (
    add_recording_options,
    history_path,
    recording,
    retention_of,
)
from console.errors import UserError
from console.live.defaults import DEFAULT_INTERVAL_SECONDS, MIN_CONSOLE_INTERVAL_SECONDS, MIN_ONCE_INTERVAL_SECONDS
from console.live.setup import add_source_options, fleet_handles, load_plans
from console.targets import targets_from
from console.text import PIECE_CHARACTERS, bounded_line, printable

if TYPE_CHECKING:
    from console.fleet.view import FleetView
    from console.live.feed import PollFeed
    from console.live.handle import FleetHandle
    from console.metrics.figures import FleetFigures

# The poll stack (sources, views, the event loop) is imported by the steps that poll, so that
# `capcon watch --help` starts without it.

# --once --fail-on: exit codes beside 0 done, 1 no target answered, 2 bad input.
EXIT_FLAG_ACTIVE = 3  # a flag at or above the chosen severity is raised
EXIT_FLAG_PENDING = 4  # none is raised, but such a condition holds (inside its minimum duration)
SEVERITIES = ("info", "warning", "critical")


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "watch",
        help="live fleet figures from vLLM /metrics or Prometheus",
        description=(
            "Watch a vLLM fleet: requests, tokens, queue, KV cache and latency percentiles over a window, "
            "per replica and for the fleet. Targets come from --target or the plan's fleet section. "
            "Without --once the console opens: the fleet table next to the plan, trends and flags."
        ),
        epilog=(
            "exit status: 0 done; 1 (--once) no target answered, or a fleet's poll failed as a whole; 2 bad\n"
            "input (a plan file, an argument, a target address, a --db that is not a capcon history); with\n"
            "--once --fail-on LEVEL: 3 a flag\n"
            "of LEVEL or worse is raised, 4 none is raised but such a condition holds, still inside its\n"
            "minimum duration (pending). 1 wins over 3 and 4.\n"
            "examples:\n"
            "  capcon watch --target 10.0.0.5:8000 --target 10.0.0.6:8000 plans/chat-8b-l40s.yaml\n"
            "  capcon watch --target 10.0.0.5:8000 --once --json --interval 5\n"
            "  capcon watch plans/chat-8b-l40s.yaml --once --fail-on warning || page-someone   # cron, CI\n"
            "  capcon watch --source prometheus --prometheus http://prom:9090 --selector 'job=\"vllm\"' --window 300\n"
            "  capcon watch plans/assistant-70b.yaml plans/chat-8b-l40s.yaml   # one fleet per plan, with an overview\n"
            "recording: the console records every poll to the history file (--db, default in the user's data\n"
            "directory) unless --no-record; --once records only when --db is given."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "plan",
        nargs="*",
        metavar="PLAN",
        help="plan file(s); each plan's fleet section names its targets; several plans open an overview of the fleets",
    )
    add_source_options(parser, "the console and the history")
    parser.add_argument(
        "--gateway",
        action="append",
        default=[],
        metavar="URL",
        help="a capcon gateway in front of the fleet (its main listener, whose /metrics the console reads); "
        "repeat for each; default: the plan's fleet.gateways",
    )
    parser.add_argument(
        "--admin-token-env",
        metavar="VAR",
        help="console: the variable holding the gateways' admin token, for the overflow switch (key m); "
        "default: the plan's overflow.admin_token_env; read only when m is pressed",
    )
    parser.add_argument(
        "--actor", metavar="NAME", help="console: who switches overflow, in the history (default: user@host)"
    )
    parser.add_argument(
        "--interval",
        type=span(OPTION_LIMITS["interval"].high, BARE_INTERVAL),
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="DURATION",
        help=f"time between refreshes: 2s, 500ms, 1m; a bare number is seconds, up to {BARE_INTERVAL:g} (default "
        f"{DEFAULT_INTERVAL_SECONDS:g}s; at least {MIN_ONCE_INTERVAL_SECONDS:g}s with --once, "
        f"{MIN_CONSOLE_INTERVAL_SECONDS:g}s in the console; at most 1h)",
    )
    parser.add_argument(
        "--window",
        type=span(OPTION_LIMITS["window"].high, BARE_WINDOW),
        default=None,
        metavar="DURATION",
        help="time the rates and percentiles cover: 60s, 5m (default 60s; with --once and scrape, the span of the "
        "two samples; a bare number is seconds, up to 3600)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="take two samples --interval apart, print the table and exit; with several plans one table per plan's fleet",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='with --once: print one JSON object instead of the table; with several plans {"fleets": [one object per plan]}',
    )
    parser.add_argument(
        "--fail-on",
        choices=SEVERITIES,
        default=None,
        metavar="LEVEL",
        help="with --once: exit 3 if a flag of LEVEL (info, warning or critical) or worse is raised, "
        "4 if none is but such a condition is pending (a --once run lasts seconds; most flags need "
        "10-120 s to raise), for cron and CI checks",
    )
    parser.add_argument("--read-only", action="store_true", help="console: dim every key that changes the fleet")
    parser.add_argument(
        "--theme",
        default=None,
        metavar="NAME",
        help="console: Textual theme (default ansi-dark, the terminal's own 16 colours); with --once it is still checked",
    )
    add_recording_options(parser, default_on=True)
    parser.set_defaults(run=run)
    return parser


def check_options(args: argparse.Namespace) -> None:
    if not math.isfinite(args.interval) or args.interval < MIN_ONCE_INTERVAL_SECONDS:
        raise UserError(f"--interval {args.interval:g}: expected at least {MIN_ONCE_INTERVAL_SECONDS:g} seconds")
    if not args.once:
        check_console_interval(args.interval)
    check_theme(args.theme)
    if args.window is not None and (not math.isfinite(args.window) or args.window <= 0):
        raise UserError(f"--window {args.window:g}: expected a positive number of seconds")
    if args.window is not None and args.window < args.interval:
        # A window shorter than the refresh never holds two samples: every rate would be unknown.
        raise UserError(
            f"--window {args.window:g}: shorter than --interval {args.interval:g}; expected a window of at least the interval"
        )
    if args.timeout is not None and (not math.isfinite(args.timeout) or args.timeout <= 0):
        raise UserError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    if args.json and not args.once:
        raise UserError("--json: only with --once (the interactive console has no JSON output)")
    if args.fail_on and not args.once:
        raise UserError("--fail-on: only with --once (the console shows its flags; it has no exit status for them)")
    if args.keep_raw is not None or args.keep_minutes is not None:
        retention_of(args)  # checked before any fleet is watched
    if args.gateway:
        targets_from(args.gateway)  # an address that cannot be one is refused before the console opens


def run(args: argparse.Namespace) -> int:
    check_options(args)
    from console.bench.estimate import estimate_capacity

    plans = load_plans(args.plan, estimate_capacity)
    path = history_path(args)
    handles = fleet_handles(args, plans)
    return _once(args, handles, path) if args.once else _console(args, handles, path)


def _once_exit(args: argparse.Namespace, results: list[FleetFigures], views: list[FleetView]) -> int:
    """1 when no target of any fleet answered; else, with --fail-on, 3 or 4 for flags; else 0."""
    from console.commands.watch_output import any_answered
    from console.fleet.flags import SEVERITY_RANK

    if not any(any_answered(figures) for figures in results):
        return 1
    if args.fail_on is None:
        return 0
    floor = SEVERITY_RANK[args.fail_on]
    if any(SEVERITY_RANK[f.severity] >= floor for view in views for f in view.flags):
        return EXIT_FLAG_ACTIVE
    if any(SEVERITY_RANK[p.severity] >= floor for view in views for p in view.pending):
        return EXIT_FLAG_PENDING
    return 0


def _console(args: argparse.Namespace, handles: list[FleetHandle], path: Path | None) -> int:
    """The console on `handles`, recording to `path` (None: not recording); the recorder closes after it."""
    from console.tui.app import open_console

    with recording(path, args, handles, "watch") as recorder:
        return int(open_console(handles, args, recorder=recorder) or 0)


def _once(args: argparse.Namespace, handles: list[FleetHandle], path: Path | None) -> int:
    """Each fleet polled twice (once through Prometheus) and printed; with several plans one block
    (or JSON entry) per fleet, never one merged fleet. Each poll is made a view as the console makes
    it (plan beside actual, flags); with --db each also goes to the history like a console poll.
    A fleet whose poll failed as a whole is one bounded line on stderr, and the exit status is 1."""
    import asyncio

    from console.commands.watch_output import _dumps, _terminal_width, once_json, once_lines
    from console.live.feed import PollFeed, gateway_watch

    async def poll_all(feeds: list[PollFeed]) -> list[tuple[FleetFigures, FleetView] | str]:
        return list(await asyncio.gather(*(_twice(feed, args.interval, args.window is not None) for feed in feeds)))

    with recording(path, args, handles, "watch") as recorder:
        answers = asyncio.run(
            poll_all([PollFeed(handle, recorder, gateways=gateway_watch(handle)) for handle in handles])
        )
    plan_files = args.plan or [None]
    polled = []  # (plan file, handle, (figures, view)) of every fleet that gave figures
    for plan_file, handle, answer in zip(plan_files, handles, answers):
        if isinstance(answer, str):
            print(f"capcon watch: {printable(handle.name)}: {bounded_line(answer, PIECE_CHARACTERS)}", file=sys.stderr)
        else:
            polled.append((plan_file, handle, answer))
    if not polled:
        return 1
    # How wrong the forecast has been on each fleet's recorded last week: read once the recorder has closed.
    accuracies = _forecast_accuracies(path, [handle for _, handle, _ in polled])
    if len(args.plan) <= 1:
        [(plan_file, handle, (figures, view))] = polled
        if args.json:
            print(_dumps(once_json(figures, view, plan_file, accuracies[0])))
        else:
            print("\n".join(once_lines(figures, view, handle.plan is not None, _terminal_width(), accuracies[0])))
    elif args.json:
        fleets = [
            once_json(figures, view, plan_file, accuracy)
            for (plan_file, _, (figures, view)), accuracy in zip(polled, accuracies)
        ]
        print(_dumps({"fleets": fleets}))
    else:
        blocks = [
            "\n".join(
                [
                    printable(f"plan {handle.name} ({plan_file})"),
                    *once_lines(figures, view, True, _terminal_width(), accuracy),
                ]
            )
            for (plan_file, handle, (figures, view)), accuracy in zip(polled, accuracies)
        ]
        print("\n\n".join(blocks))
    if len(polled) < len(handles):
        return 1
    return _once_exit(args, [figures for _, _, (figures, _) in polled], [view for _, _, (_, view) in polled])


def _forecast_accuracies(path: Path | None, handles: list[FleetHandle]) -> list:
    """Per fleet, the forecast's backtest error on the history file (console.live.forecast_accuracy); None
    for each without a file (`--once` reads one only with --db)."""
    if path is None:
        return [None] * len(handles)
    import time

    from console.live.forecast_accuracy import forecast_accuracy

    return forecast_accuracy(path, [(handle.name, handle.plan) for handle in handles], time.time())


class _PollFailed(Exception):
    """--once has no next poll to wait for: a poll that fails as a whole ends that fleet's run."""


async def _twice(feed: PollFeed, interval: float, explicit_window: bool) -> tuple[FleetFigures, FleetView] | str:
    """Scrape: two samples an interval apart. Prometheus computes its own window: one answer.
    A poll that failed as a whole: why, in words."""
    from console.live.loop import Cadence, failure_words, poll_loop

    watcher = feed.handle.watcher
    views: list[FleetView] = []
    # A gateway's rates and client latency need two reads of its /metrics, whatever the fleet's source.
    polls = 2 if watcher.source_name == "scrape" or feed.gateways is not None else 1

    def failed(error: Exception) -> None:
        raise _PollFailed(f"poll failed: {failure_words(error)}")

    try:
        await poll_loop(feed, Cadence(interval), views.append, failed, polls=polls)
    except _PollFailed as failure:
        return str(failure)
    finally:
        await feed.aclose()
    first, last = views[0].figures, views[-1].figures
    if explicit_window or len(views) == 1 or watcher.source_name != "scrape":
        return last, views[-1]
    # The figures cover exactly the span between the two samples.
    return replace(last, window_seconds=round(last.at - first.at, 3)), views[-1]
