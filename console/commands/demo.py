"""`capcon demo`: a simulated vLLM fleet with traffic, and the console on it. Nothing to configure."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from console.args import SubParsers
from console.errors import UserError

if TYPE_CHECKING:
    from console.live.handle import FleetHandle
    from console.plan.model import Plan
    from console.sim.fleet import SimFleet

DESCRIPTION = """\
Start a simulated vLLM fleet on loopback (by default five replicas of the
internal-assistant plan: one 14B-class model per H100, 5 rps each at its
targets, 18 rps at the weekday peak) with the plan's week of traffic compressed
into minutes, and open the console on it through the same scrape source and
poll loop `capcon watch` uses.

In the console: x spikes the traffic (x3 for a minute); f opens the fault menu
for the selected replica (stop, restart, slow, /metrics failing, hanging or
returning garbage, and clearing them); ? lists every key; q or Ctrl+C quits and
stops every simulated server.
"""

EPILOG = """\
examples:
  capcon demo
  capcon demo --replicas 3 --time-scale 60 --start 'mon 07:30'
  capcon demo --plan plans/chat-8b-l40s.yaml --read-only
  capcon demo --db demo-history.sqlite     # record the demo (for replay, history, export)"""

DEMO_REPLICAS = 5
# A simulated day in five minutes: a morning ramp shows within a minute or two.
DEMO_TIME_SCALE = 288.0
# Short enough that a spike shows within seconds, long enough for stable percentiles.
DEMO_WINDOW_SECONDS = 20.0


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    from console.args import BARE_INTERVAL, BARE_WINDOW, OPTION_LIMITS, span
    from console.commands.sim import MAX_REPLICAS, _replica_count, _week_time, seed, time_scale

    parser = sub.add_parser(
        "demo",
        help="a simulated vLLM fleet with traffic, and the console on it",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--plan", metavar="FILE", help="simulate this plan instead of the built-in demo plan")
    parser.add_argument(
        "--replicas",
        type=_replica_count,
        default=DEMO_REPLICAS,
        help=f"simulated replicas, 1 to {MAX_REPLICAS} (default {DEMO_REPLICAS})",
    )
    parser.add_argument(
        "--time-scale",
        type=time_scale,
        default=DEMO_TIME_SCALE,
        help=f"simulated seconds of the plan's week per real second (default {DEMO_TIME_SCALE:g}: a day in 5 minutes)",
    )
    parser.add_argument(
        "--start",
        type=_week_time,
        default=_week_time("mon 07:00"),
        metavar="'DAY HH:MM'",
        help="where in the week the traffic starts (default 'mon 07:00', before the morning ramp)",
    )
    parser.add_argument("--seed", type=seed, default=1, help="random seed of the traffic (default 1; 0 to 2^63-1)")
    parser.add_argument(
        "--interval",
        type=span(OPTION_LIMITS["interval"].high, BARE_INTERVAL),
        default=1.0,
        metavar="DURATION",
        help=f"time between refreshes: 2s, 1m; a bare number is seconds, up to {BARE_INTERVAL:g} "
        "(default 1s, at least 1s, at most 1h)",
    )
    parser.add_argument(
        "--window",
        type=span(OPTION_LIMITS["window"].high, BARE_WINDOW),
        default=DEMO_WINDOW_SECONDS,
        metavar="DURATION",
        help=f"time the rates and percentiles cover: 60s, 5m (default {DEMO_WINDOW_SECONDS:g}s, at most 1d; "
        "a bare number is seconds, up to 3600)",
    )
    parser.add_argument("--read-only", action="store_true", help="dim the keys that change the fleet (spike, fault)")
    parser.add_argument(
        "--theme", default=None, metavar="NAME", help="Textual theme (default ansi-dark: the terminal's own colours)"
    )
    from console.commands.recording import add_recording_options

    # Off unless --db: a demo should not fill the user's own history.
    add_recording_options(parser, default_on=False)
    parser.set_defaults(run=run)
    return parser


def demo_plan_path() -> str:
    return str(resources.files("console.sim") / "demo_plan.yaml")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from console.bench.estimate import load_plan
    from console.commands.console_options import check_console_interval, check_theme

    check_console_interval(args.interval)
    check_theme(args.theme)
    if args.window < args.interval:
        raise UserError(
            f"--window {args.window:g}: shorter than --interval {args.interval:g}; expected a window of at least the interval"
        )
    plan = load_plan(args.plan or demo_plan_path())
    from console.commands.sim import check_rps_scale

    check_rps_scale(plan, 1.0, "inprocess", option=None)
    from console.commands.recording import history_path, retention_of

    retention_of(args)
    try:
        return asyncio.run(_demo(plan, args, history_path(args, default_on=False)))
    except OSError as error:  # a port could not be bound, and the like
        raise UserError(f"the simulated fleet could not start: {error}") from None


def demo_handle(sim: SimFleet, plan: Plan, window_seconds: float, interval_seconds: float) -> FleetHandle:
    """The console's view of a simulated fleet: the real scrape source, compared with the plan at the simulated hour,
    and each replica's GPU page (dcgm-exporter's format) read beside it, paired by the pod the page names."""
    from console.fleet.plan_now import week_time
    from console.live.setup import handle_on_urls

    pages = [url for url in sim.gpu_urls if url is not None]

    def plan_clock(now: float) -> float:
        # Read each time: the generator is replaced when the demo's traffic goes through its gateway.
        traffic = sim.traffic
        assert traffic is not None, "a started simulated fleet has its traffic generator"
        return week_time(traffic.week_seconds())

    # Each simulated replica's page names its pod (capcon-sim-N): the pairing's key, as on Kubernetes.
    pods = [(a.pod or "", a.namespace) for a in sim.replica_addresses()] if pages else []
    # The simulated fleet runs the plan's week fast: the plan is read at the simulated hour, not the clock's.
    return handle_on_urls(
        plan.name,
        plan,
        sim.metrics_urls,
        window_seconds,
        interval_seconds,
        plan_clock=plan_clock,
        dcgm=pages,
        pods=pods,
    )


async def _demo(plan: Plan, args: argparse.Namespace, path: Path | None = None) -> int:
    """The console on a simulated fleet; recording to `path` when given (--db)."""
    from dataclasses import replace

    from console.commands.demo_front import demo_front
    from console.commands.recording import recording
    from console.sim.fleet import SimFleet
    from console.tui.app import DEFAULT_THEME, ConsoleApp

    # The traffic goes through a real gateway (and a second simulator as the hosted endpoint), so the
    # overflow switch (m) acts on it; the replicas are scraped directly, as a fleet is. The recorder opens
    # first: the gateway writes its switches through it (the file's one writer), and it closes last, after
    # the gateway's final tally.
    async with SimFleet(
        plan,
        replicas=args.replicas,
        speed=args.time_scale,
        seed=args.seed,
        start_week_seconds=args.start,
        traffic="off",
    ) as sim:
        with recording(path, args, [_Named(plan.name)], "demo") as recorder:
            async with demo_front(plan, sim, recorder) as front:
                handle = replace(
                    demo_handle(sim, front.plan, args.window, args.interval), gateways=(front.gateway.url,)
                )
                app = ConsoleApp(
                    [handle],
                    interval=args.interval,
                    read_only=args.read_only,
                    demo=sim,
                    theme=args.theme or DEFAULT_THEME,
                    recorder=recorder,
                    environ=front.environ,
                    switch_history=path,  # without --db the demo's switches stay out of the user's history
                )
                await app.run_async()
    return int(app.return_code or 0)


class _Named:
    """The demo's one fleet as `recording` names it (its handle is made once the gateway listens)."""

    def __init__(self, name: str) -> None:
        self.name = name
