"""`capcon whatif`: what each lever would do over the next minutes, run on the simulator before it is pulled.

The fleet is read once as `watch --once` reads it (two samples an interval apart, or one Prometheus
answer): its replicas serving, request rate, mean prompt and answer lengths, TPOT p95 and the forecast
for the minutes ahead. Each scenario (console.ahead.whatif) then runs on the plan's simulated replica,
corrected by the live TPOT p95 over the simulator's at the observed load. With `--rps` and no fleet
named, the what-if runs on the plan alone (its peak replicas, its lengths).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from console.args import BARE_INTERVAL, SubParsers, span
from console.errors import UserError
from console.live.setup import add_source_options
from console.text import PIECE_CHARACTERS, bounded_line, printable

DEFAULT_MINUTES = 30
MAX_MINUTES = 120
MAX_LEAD_MINUTES = 1440  # as the plan's lead_time_minutes
DEFAULT_INTERVAL_SECONDS = 5.0  # longer than watch's 2 s: the rate the scenarios rest on is steadier
MODES = ("pass", "bounded_queue", "hosted", "defer")
MAX_RPS = 100_000.0
MAX_REPLICAS = 1_000


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "whatif",
        help="what one more replica or an overflow mode would do over the next minutes, simulated first",
        description=(
            "Run each lever on the simulator over the next --minutes with the fleet's observed workload and "
            "the forecast's arrivals, beside doing nothing (the scenario 'now'): client-seen TTFT p95 (queue "
            "wait included), TPOT p95, the shares refused, deferred and hosted, the hosted cost, replicas and "
            "GPU-hours. The simulator is corrected by the live TPOT p95 over its own at the observed load. "
            "Without --replicas or --mode: +1 replica, a bounded queue of 32, hosted after 16, defer batch."
        ),
        epilog=(
            "exit status: 0 done; 1 the fleet (or the recording at --at) could not be read; 2 bad input.\n"
            "examples:\n"
            "  capcon whatif plans/assistant-70b.yaml                      # the plan's fleet, the default levers\n"
            "  capcon whatif plan.yaml --target 10.0.0.5:8000 --replicas +1 --replicas +2 --json\n"
            "  capcon whatif plan.yaml --mode bounded_queue --max-queue 16 --rps-scale 1.5\n"
            "  capcon whatif plan.yaml --rps 20                              # the plan alone, no fleet\n"
            "  capcon whatif plan.yaml --db history.sqlite --at '2026-11-30 10:40' --replicas +1  # what it would have done"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("plan", metavar="PLAN", help="the fleet's plan file (model, GPU, targets, overflow)")
    add_source_options(parser, "the output")
    parser.add_argument(
        "--gateway",
        action="append",
        default=[],
        metavar="URL",
        help="a capcon gateway in front of the fleet (default: the plan's fleet.gateways); with one, 'now' "
        "runs the plan's overflow policy, without one every request goes straight to a replica",
    )
    parser.add_argument(
        "--interval",
        type=span(600.0, BARE_INTERVAL),
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="DURATION",
        help=f"time between the two samples of the fleet: 2s, 500ms; a bare number is seconds "
        f"(default {DEFAULT_INTERVAL_SECONDS:g}s, 200ms to 10m)",
    )
    parser.add_argument(
        "--replicas",
        action="append",
        default=[],
        metavar="N|+N|-N",
        help="a scenario with this many replicas (or this many more or fewer); repeat for several",
    )
    parser.add_argument(
        "--mode",
        action="append",
        default=[],
        metavar="MODE",
        help=f"a scenario with this overflow mode ({', '.join(MODES)}); repeat for several",
    )
    parser.add_argument("--max-queue", type=int, metavar="N", help="--mode scenarios: the gateway's queue bound")
    parser.add_argument("--max-wait", type=float, metavar="S", help="--mode scenarios: seconds a request may queue")
    parser.add_argument(
        "--hosted-after", type=int, metavar="N", help="--mode hosted: queued requests past which new ones go hosted"
    )
    rate = parser.add_mutually_exclusive_group()
    rate.add_argument("--rps", type=float, metavar="R", help="arrivals at R requests/s instead of the forecast")
    rate.add_argument("--rps-scale", type=float, metavar="X", help="the forecast's arrivals times X")
    parser.add_argument(
        "--minutes",
        type=int,
        default=DEFAULT_MINUTES,
        metavar="M",
        help=f"minutes ahead to simulate (default {DEFAULT_MINUTES}, at most {MAX_MINUTES})",
    )
    parser.add_argument(
        "--lead-time",
        type=float,
        metavar="MIN",
        help="minutes an added replica takes to serve (default: the plan's lead_time_minutes; 0: at once, a warm "
        "standby)",
    )
    parser.add_argument(
        "--db",
        metavar="FILE",
        help="a history file (capcon watch --db, capcon record): run the levers at the moment --at, on what it "
        "recorded (the minutes before for the workload, the arrivals that came after)",
    )
    parser.add_argument(
        "--at",
        metavar="WHEN",
        help="with --db: the moment (2026-11-30 10:40, 10:40 today, -2h, unix seconds)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the random draws' seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.set_defaults(run=run)
    return parser


def check_options(args: argparse.Namespace) -> None:
    if not 1 <= args.minutes <= MAX_MINUTES:
        raise UserError(f"--minutes {args.minutes}: expected a whole number of minutes from 1 to {MAX_MINUTES}")
    for mode in args.mode:
        if mode not in MODES:
            raise UserError(f"--mode {printable(mode)!r}: unknown mode; expected one of {', '.join(MODES)}")
    for asked in args.replicas:
        text = asked.strip()
        digits = text[1:] if text[:1] in "+-" else text
        if not digits.isdigit() or int(digits) > MAX_REPLICAS:
            raise UserError(
                f"--replicas {printable(asked)!r}: expected a count such as 4, +1 or -1 (at most {MAX_REPLICAS})"
            )
        if text[:1] not in "+-" and int(digits) < 1:
            raise UserError(f"--replicas {printable(asked)!r}: expected at least 1 replica")
    if args.rps is not None and not (math.isfinite(args.rps) and 0 < args.rps <= MAX_RPS):
        raise UserError(f"--rps {args.rps:g}: expected requests per second over 0 and at most {MAX_RPS:g}")
    if args.rps_scale is not None and not (math.isfinite(args.rps_scale) and 0 < args.rps_scale <= 100):
        raise UserError(f"--rps-scale {args.rps_scale:g}: expected a factor over 0 and at most 100")
    if args.max_queue is not None and not 0 <= args.max_queue <= 100_000:
        raise UserError(f"--max-queue {args.max_queue}: expected a whole number from 0 to 100000")
    if args.hosted_after is not None and not 0 <= args.hosted_after <= 100_000:
        raise UserError(f"--hosted-after {args.hosted_after}: expected a whole number from 0 to 100000")
    if args.max_wait is not None and not (math.isfinite(args.max_wait) and 0 < args.max_wait <= 600):
        raise UserError(f"--max-wait {args.max_wait:g}: expected seconds over 0 and at most 600")
    if (args.max_queue is not None or args.max_wait is not None or args.hosted_after is not None) and not args.mode:
        raise UserError("--max-queue, --max-wait and --hosted-after set a --mode scenario; expected --mode MODE")
    if args.lead_time is not None and not (math.isfinite(args.lead_time) and 0 <= args.lead_time <= MAX_LEAD_MINUTES):
        raise UserError(f"--lead-time {args.lead_time:g}: expected minutes from 0 to {MAX_LEAD_MINUTES}")
    if (args.db is None) != (args.at is None):
        raise UserError("--db and --at go together: a history file and the moment in it; expected both")
    if args.db is not None and (args.target or args.source is not None or args.prometheus):
        raise UserError("--db reads a recording: expected no --target, --source or --prometheus with it")
    if not math.isfinite(args.interval) or not 0.2 <= args.interval <= 600:
        raise UserError(f"--interval {args.interval:g}: expected seconds from 0.2 to 600")


def plan_only(args: argparse.Namespace) -> bool:
    """`--rps` with no fleet named on the command line: the what-if runs on the plan alone."""
    return args.rps is not None and not args.target and args.source is None and not args.prometheus


def run(args: argparse.Namespace) -> int:
    check_options(args)
    from console.bench.estimate import estimate_capacity
    from console.commands import whatif_run
    from console.live.setup import load_plans

    [plan] = load_plans([args.plan], estimate_capacity)
    if args.db is not None:
        situation = whatif_run.from_recording(plan, args, estimate_capacity)
        if isinstance(situation, str):
            print(f"capcon whatif: {bounded_line(situation, PIECE_CHARACTERS)}", file=sys.stderr)
            return 1
    elif plan_only(args):
        situation = whatif_run.from_plan(plan, args)
    else:
        situation = whatif_run.from_fleet(plan, args)
        if isinstance(situation, str):
            print(f"capcon whatif: {bounded_line(situation, PIECE_CHARACTERS)}", file=sys.stderr)
            return 1
    report = whatif_run.report(plan, situation, args)
    if args.json:
        print(json.dumps(report.to_json(), allow_nan=False))
    else:
        print("\n".join(report.lines()))
    return 0
