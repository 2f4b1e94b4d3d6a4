"""`capcon sim PLAN`: run a simulated vLLM fleet of a plan on loopback until Ctrl+C."""

from __future__ import annotations

import argparse
import asyncio
import errno
import math
import signal
import sys

from console.errors import UserError
from console.plan.model import DAYS
from console.plan.schema import load_plan
from console.plan.sizing import size

DESCRIPTION = """\
Start a simulated vLLM fleet for a plan: one HTTP server per replica on
127.0.0.1, each speaking vLLM's OpenAI-compatible API (/v1/completions,
/v1/chat/completions, /v1/models, /health, /version) and serving /metrics in
vLLM 0.32's exposition, so capcon, Prometheus or vLLM's Grafana dashboard can
watch it as they would a real fleet. Each replica schedules like vLLM
(continuous batching, chunked prefill, paged KV cache, preemption) and steps at
the plan's roofline (GPU bandwidth and FLOP/s times the plan's efficiencies).

Unless --traffic off, the plan's own traffic drives it: its weekday and weekend
profile with time compressed (--time-scale), Poisson or gamma-burst arrivals,
and input and output lengths drawn from the plan's distributions.
"""

EPILOG = """\
exit status: 0 stopped by Ctrl+C or SIGTERM (also while starting); 2 the plan is invalid, a port is
taken or the fleet could not start (every server already started is closed first).
examples:
  capcon sim plans/internal-assistant-18rps.yaml --replicas 5
  capcon sim plans/assistant-70b.yaml --replicas 2 --port 8001 --time-scale 60
  capcon sim plans/chat-8b-l40s.yaml --replicas 3 --traffic off   # drive it with your own load"""


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number greater than 0")
        return value

    return parse


# One server per replica, each with its own engine, on one machine: beyond this a simulation
# only exhausts file descriptors and CPU. Real fleets of more replicas run one sim per host.
MAX_REPLICAS = 256


def _replica_count(text: str) -> int:
    value = _positive(int)(text)
    if value > MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_REPLICAS} replicas on one machine")
    return value


def _week_time(text: str) -> float:
    """'mon 07:00' -> seconds since Monday 00:00."""
    parts = text.lower().split()
    try:
        day = DAYS.index(parts[0])
        hours, minutes = (int(x) for x in parts[1].split(":"))
        if not (0 <= hours < 24 and 0 <= minutes < 60):
            raise ValueError
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a day and a time, like 'mon 07:00'") from None
    return day * 86400.0 + hours * 3600.0 + minutes * 60.0


def add_parser(sub):
    parser = sub.add_parser(
        "sim",
        help="run a simulated vLLM fleet of a plan on loopback (API and /metrics), with the plan's traffic",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("plan", metavar="PLAN", help="plan file (YAML), e.g. plans/internal-assistant-18rps.yaml")
    parser.add_argument("--replicas", type=_replica_count, metavar="N",
                        help=f"replicas to start, 1 to {MAX_REPLICAS} (default: the plan's replicas for the peak plus redundancy)")
    parser.add_argument("--rps-scale", type=_positive(float), default=1.0, metavar="X",
                        help="multiply the plan's arrival rates by X (default 1: the plan's fleet-wide traffic)")
    parser.add_argument("--time-scale", type=_positive(float), default=288.0, metavar="X",
                        help="profile seconds per real second (default 288: a day in 5 minutes; 1: real time)")
    parser.add_argument("--port", type=int, default=0, metavar="P",
                        help="first port; replicas listen on P, P+1, ... (default: free ports)")
    parser.add_argument("--start", type=_week_time, default=7 * 3600.0, metavar="'DAY HH:MM'",
                        help="moment of the plan's week to start at (default 'mon 07:00', before the morning ramp)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed for arrivals and lengths")
    parser.add_argument("--traffic", choices=("inprocess", "http", "off"), default="inprocess",
                        help="inprocess (default, light on CPU): requests go straight into the engines; "
                             "http: as real /v1/completions calls; off: no traffic")
    parser.add_argument("--status-every", type=float, default=10.0, metavar="SECONDS",
                        help="print a status line this often (0: never; default 10)")
    parser.set_defaults(run=run)
    return parser


def _status_line(status: dict) -> str:
    replicas = "  ".join(
        f"[{i}] {'up' if r['up'] else 'DOWN'} run {r['running']} wait {r['waiting']} kv {r['kv_usage']:.0%}"
        for i, r in enumerate(status["replicas"])
    )
    spike = f" x{status['spike']:g}" if status["spike"] != 1.0 else ""
    return f"{status['week_time']}  offered {status['offered_rps']:.1f} rps{spike}  {replicas}"


async def _serve(args, plan, replicas: int) -> None:
    from console.sim.fleet import SimFleet  # noqa: PLC0415 - keeps `capcon --help` light

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    fleet = SimFleet(plan, replicas, base_port=args.port, speed=args.time_scale, seed=args.seed,
                     rps_scale=args.rps_scale, traffic=args.traffic, start_week_seconds=args.start)
    try:
        if await _start(fleet, stop, args, replicas):
            await _run_until_stopped(fleet, stop, args, plan, replicas)
        else:
            print("stopped while starting: every replica started so far closed its port.", flush=True)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _run_until_stopped(fleet, stop: asyncio.Event, args, plan, replicas: int) -> None:
    try:
        print(f"simulated fleet of plan {plan.name!r}: {replicas} replica(s) of {plan.model.name} "
              f"on {fleet.shape.tensor_parallel} x {plan.gpu.name}, traffic {args.traffic}")
        print("targets (each serves /metrics and the OpenAI API):")
        for url in fleet.urls:
            print(f"  {url}")
        print("prometheus scrape config:")
        print("  - job_name: capcon-sim")
        print("    static_configs:")
        print(f"      - targets: [{', '.join(repr(u.split('//', 1)[1]) for u in fleet.urls)}]")
        print("Ctrl+C stops it.", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), args.status_every if args.status_every > 0 else None)
            except asyncio.TimeoutError:
                print(_status_line(fleet.status()), flush=True)
    finally:
        await fleet.close()
    print("stopped: every replica closed its port.", flush=True)


async def _start(fleet, stop: asyncio.Event, args, replicas: int) -> bool:
    """Start the fleet, unless Ctrl+C or SIGTERM comes first: then False, with nothing left open.

    Any failure to start closes the servers already started and is a UserError (exit 2).
    """
    starting = asyncio.create_task(fleet.__aenter__(), name="sim-start")
    stopped = asyncio.create_task(stop.wait(), name="sim-stop-while-starting")
    try:
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not starting.done():
        starting.cancel()  # SimFleet.__aenter__ closes what it opened when cancelled
        try:
            await starting
        except asyncio.CancelledError:
            pass
        await fleet.close()
        return False
    error = starting.exception()
    if error is None:
        return True
    await fleet.close()
    if (isinstance(error, OSError) and error.errno == errno.EMFILE) or "Too many open files" in str(error):
        raise UserError(f"--replicas {replicas}: too many open files for this many servers; "
                        f"expected fewer replicas, or a higher open-file limit (ulimit -n)") from None
    if isinstance(error, OSError) and args.port:
        raise UserError(f"--port {args.port}: {error}; choose another port or leave --port out") from None
    if isinstance(error, (OSError, ValueError)):
        raise UserError(f"the simulated fleet could not start: {error}") from None
    raise error


def run(args) -> int:
    plan = load_plan(args.plan)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: expected a port number from 1 to 65535 (or 0 for free ports)")
    if not plan.workloads:
        raise UserError(f"{args.plan}: the plan has no workloads to simulate")
    replicas = args.replicas or size(plan).replicas_with_redundancy
    if replicas > MAX_REPLICAS:
        raise UserError(f"{args.plan}: the plan needs {replicas} replicas; at most {MAX_REPLICAS} run on one machine, "
                        f"expected --replicas N (N <= {MAX_REPLICAS}) with --rps-scale to match")
    if args.port and args.port + replicas - 1 > 65535:
        raise UserError(f"--port {args.port}: {replicas} replicas need ports up to {args.port + replicas - 1}")
    try:
        asyncio.run(_serve(args, plan, replicas))
    except ValueError as error:  # a plan the simulator cannot run (no KV left after the weights)
        raise UserError(f"{args.plan}: {error}") from None
    sys.stdout.flush()
    return 0
