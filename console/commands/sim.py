"""`capcon sim PLAN`: run a simulated vLLM fleet of a plan on loopback until Ctrl+C."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from console.args import SubParsers, bounded
from console.errors import UserError
from console.plan.model import DAYS

if TYPE_CHECKING:
    import asyncio

    from console.plan.model import Plan
    from console.sim.fleet import SimFleet

# The event loop, the simulator and the plan's estimate are imported where the fleet runs, so that
# `capcon sim --help` starts without them.

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
limits: the traffic offers the fleet at most 5000 requests per second (the plan's busiest hour
times --rps-scale); a replica keeps at most 1024 requests waiting and refuses more (HTTP 503);
under any load Ctrl+C or SIGTERM stops it within seconds, a second one (or 10 s) at once.
exit status: 0 stopped by Ctrl+C or SIGTERM (also while starting); 2 the plan is invalid, an option
is out of bounds, a port is taken or the fleet could not start (every server already started is
closed first).
examples:
  capcon sim plans/internal-assistant-18rps.yaml --replicas 5
  capcon sim plans/assistant-70b.yaml --replicas 2 --port 8001 --time-scale 60
  capcon sim plans/chat-8b-l40s.yaml --replicas 3 --traffic off   # drive it with your own load"""


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}… ({len(text):,} characters)"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a number") from None
    # Compared, never converted: float() of 400 digits raises OverflowError.
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be a finite number greater than 0")
    return value


# One server per replica, each with its own engine, on one machine: beyond this a simulation
# only exhausts file descriptors and CPU. Real fleets of more replicas run one sim per host.
MAX_REPLICAS = 256
# Requests per second the traffic generator offers the whole fleet at most (the plan's busiest
# hour times --rps-scale). One process serves a few thousand; a plan's 1e6 rps times 1e9 would
# only pin a core and fill memory.
MAX_SIM_RPS = 5000.0
# After the first Ctrl+C or SIGTERM the fleet gets this long to close its ports; then (or at a
# second signal) the process ends at once and the system closes them.
STOP_DEADLINE_SECONDS = 10.0

rps_scale = bounded(float, 0.0, 10_000.0, "10000 (ten thousand times the plan's traffic)")
time_scale = bounded(float, 0.0, 1e6, "1000000 (a week in 0.6 s)")
seed = bounded(int, 0, 2**63 - 1, f"{2**63 - 1}", low_open=False)
port = bounded(int, 0, 65535, "65535 (0: free ports)", low_open=False)
_status_every = bounded(float, 0.0, 86400.0, "86400 seconds (0: never)", low_open=False)
MIN_STATUS_EVERY = 0.1  # a status line more often floods the terminal


def status_every(text: str) -> float:
    value = _status_every(text)
    if 0 < value < MIN_STATUS_EVERY:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)}: expected 0 (never) or at least {MIN_STATUS_EVERY:g} seconds, at most 86400"
        )
    return value


status_every.__name__ = "float"


def _replica_count(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: at most {MAX_REPLICAS} replicas on one machine")
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


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "sim",
        help="run a simulated vLLM fleet of a plan on loopback (API and /metrics), with the plan's traffic",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("plan", metavar="PLAN", help="plan file (YAML), e.g. plans/internal-assistant-18rps.yaml")
    parser.add_argument(
        "--replicas",
        type=_replica_count,
        metavar="N",
        help=f"replicas to start, 1 to {MAX_REPLICAS} (default: the plan's replicas for the peak plus redundancy)",
    )
    parser.add_argument(
        "--rps-scale",
        type=rps_scale,
        default=1.0,
        metavar="X",
        help="multiply the plan's arrival rates by X (default 1: the plan's fleet-wide traffic); "
        f"the busiest hour times X at most {MAX_SIM_RPS:g} requests per second",
    )
    parser.add_argument(
        "--time-scale",
        type=time_scale,
        default=288.0,
        metavar="X",
        help="profile seconds per real second (default 288: a day in 5 minutes; 1: real time; at most 1000000)",
    )
    parser.add_argument(
        "--port",
        type=port,
        default=0,
        metavar="P",
        help="first port; replicas listen on P, P+1, ..., their GPU pages (dcgm-exporter's format) on the ports "
        "after them (default: free ports)",
    )
    parser.add_argument(
        "--start",
        type=_week_time,
        default=7 * 3600.0,
        metavar="'DAY HH:MM'",
        help="moment of the plan's week to start at (default 'mon 07:00', before the morning ramp)",
    )
    parser.add_argument(
        "--seed", type=seed, default=0, metavar="S", help="random seed for arrivals and lengths (0 to 2^63-1)"
    )
    parser.add_argument(
        "--traffic",
        choices=("inprocess", "http", "off"),
        default="inprocess",
        help="inprocess (default, light on CPU): requests go straight into the engines; "
        "http: as real /v1/completions calls; off: no traffic",
    )
    parser.add_argument(
        "--status-every",
        type=status_every,
        default=10.0,
        metavar="SECONDS",
        help="print a status line this often (0: never; default 10; at most 86400)",
    )
    parser.set_defaults(run=run)
    return parser


def fleet_section(fleet: SimFleet) -> list[str]:
    """The YAML of a plan's `fleet:` for this simulated fleet: its targets, each with its pod, and its GPU pages."""
    lines = ["fleet:", "  targets:"]
    for address, url in zip(fleet.replica_addresses(), fleet.urls, strict=True):
        lines.append(f"    - {{url: {url}, pod: {address.pod}}}")
    pages = [u for u in fleet.gpu_urls if u is not None]
    if pages:
        lines.append(f"  dcgm_targets: [{', '.join(pages)}]")
    return lines


def _status_line(status: dict) -> str:
    replicas = "  ".join(
        f"[{i}] {'up' if r['up'] else 'DOWN'} run {r['running']} wait {r['waiting']} kv {r['kv_usage']:.0%}"
        for i, r in enumerate(status["replicas"])
    )
    if status.get("traffic") == "off":  # the plan's profile is not running: nothing is offered
        return f"traffic off: 0 rps offered  {replicas}"
    spike = f" x{status['spike']:g}" if status["spike"] != 1.0 else ""
    dropped = f" ({status['dropped']:,} over the simulator's pace dropped)" if status.get("dropped") else ""
    return f"{status['week_time']}  offered {status['offered_rps']:.1f} rps{spike}{dropped}  {replicas}"


async def _serve(args: argparse.Namespace, plan: Plan, replicas: int) -> None:
    import asyncio

    from console.sim.fleet import SimFleet

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    deadlines: list[threading.Timer] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, _on_signal, stop, deadlines)
    fleet = SimFleet(
        plan,
        replicas,
        base_port=args.port,
        speed=args.time_scale,
        seed=args.seed,
        rps_scale=args.rps_scale,
        traffic=args.traffic,
        start_week_seconds=args.start,
    )
    try:
        if await _start(fleet, stop, args, replicas):
            await _run_until_stopped(fleet, stop, args, plan, replicas)
        else:
            print("stopped while starting: every replica started so far closed its port.", flush=True)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        for deadline in deadlines:
            deadline.cancel()  # stopped in time: nothing to force


def _on_signal(stop: asyncio.Event, deadlines: list[threading.Timer]) -> None:
    """The first Ctrl+C or SIGTERM stops the fleet; a second one, or the deadline passing, ends the process now.

    The deadline runs on a thread of its own, so it fires even if the event loop were held.
    """
    if stop.is_set():
        _exit_now("a second signal")
    stop.set()
    deadline = threading.Timer(STOP_DEADLINE_SECONDS, _exit_now, args=(f"{STOP_DEADLINE_SECONDS:g} s passed",))
    deadline.daemon = True
    deadlines.append(deadline)
    deadline.start()


def _exit_now(why: str) -> None:
    """End the process without waiting for the event loop: the system closes every port."""
    try:
        sys.stdout.flush()
        sys.stderr.write(f"capcon sim: stopping at once ({why}): the system closes every port\n")
        sys.stderr.flush()
    finally:
        os._exit(0)


async def _run_until_stopped(
    fleet: SimFleet, stop: asyncio.Event, args: argparse.Namespace, plan: Plan, replicas: int
) -> None:
    import asyncio

    try:
        print(
            f"simulated fleet of plan {plan.name!r}: {replicas} replica(s) of {plan.model.name} "
            f"on {fleet.shape.tensor_parallel} x {plan.gpu.name}, traffic {args.traffic}"
            + (" (it offers nothing: drive it with your own load)" if args.traffic == "off" else "")
        )
        print("targets (each serves /metrics and the OpenAI API):")
        for url in fleet.urls:
            print(f"  {url}")
        print("prometheus scrape config:")
        print("  - job_name: capcon-sim")
        print("    static_configs:")
        print(f"      - targets: [{', '.join(repr(u.split('//', 1)[1]) for u in fleet.urls)}]")
        gpu_pages = [u for u in fleet.gpu_urls if u is not None]
        if gpu_pages:
            # Each replica's GPUs, derived from its own steps, on a port of their own (as a node's dcgm-exporter).
            print("GPU counters (dcgm-exporter's format, one page per replica, pod label capcon-sim-N):")
            for index, url in enumerate(gpu_pages):
                print(f"  replica {index}: {url}")
            print("  - job_name: capcon-sim-dcgm")
            print("    static_configs:")
            print(f"      - targets: [{', '.join(repr(u.split('//', 1)[1].split('/', 1)[0]) for u in gpu_pages)}]")
            # The replicas share one host, so a console pairs each with its GPUs by the pod the plan names.
            print("a plan's fleet section for them (each replica with the pod its GPUs carry):")
            for line in fleet_section(fleet):
                print(f"  {line}")
        print("Ctrl+C stops it.", flush=True)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), args.status_every if args.status_every > 0 else None)
            except TimeoutError:
                print(_status_line(fleet.status()), flush=True)
    finally:
        await fleet.close()
    print("stopped: every replica closed its port.", flush=True)


async def _start(fleet: SimFleet, stop: asyncio.Event, args: argparse.Namespace, replicas: int) -> bool:
    """Start the fleet, unless Ctrl+C or SIGTERM comes first: then False, with nothing left open.

    Any failure to start closes the servers already started and is a UserError (exit 2).
    """
    import asyncio

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
        raise UserError(
            f"--replicas {replicas}: too many open files for this many servers; "
            f"expected fewer replicas, or a higher open-file limit (ulimit -n)"
        ) from None
    if isinstance(error, OSError) and args.port:
        raise UserError(f"--port {args.port}: {error}; choose another port or leave --port out") from None
    if isinstance(error, (OSError, ValueError)):
        raise UserError(f"the simulated fleet could not start: {error}") from None
    raise error


def busiest_rps(plan: Plan) -> float:
    """The most requests per second the plan's traffic (every workload) asks for in any hour of the week."""
    return max(sum(w.rps_by_hour[d][h] for w in plan.workloads) for d in range(7) for h in range(24))


def check_rps_scale(plan: Plan, scale: float, traffic: str, option: str | None = "--rps-scale") -> None:
    """The generator's busiest rate within MAX_SIM_RPS; a UserError saying the largest --rps-scale that fits.

    `option` None: the caller has no --rps-scale (`capcon demo`): the plan itself is too busy."""
    busiest = busiest_rps(plan)
    offered = busiest * scale
    if traffic == "off" or offered <= MAX_SIM_RPS:
        return
    if option is None:
        raise UserError(
            f"{plan.source_path or plan.name}: the plan's busiest hour asks for {busiest:g} rps; expected at most "
            f"{MAX_SIM_RPS:g} requests per second from one simulator (capcon sim PLAN --rps-scale "
            f"{MAX_SIM_RPS / busiest:.4g} runs it scaled down)"
        )
    raise UserError(
        f"{option} {scale:g}: the plan's busiest hour of {busiest:g} rps becomes {offered:g} rps; "
        f"expected at most {MAX_SIM_RPS:g} requests per second from one simulator "
        f"({option} at most {MAX_SIM_RPS / busiest:.4g})"
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from console.bench.estimate import load_plan
    from console.plan.sizing import size

    plan = load_plan(args.plan)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: expected a port number from 1 to 65535 (or 0 for free ports)")
    if not plan.workloads:
        raise UserError(f"{args.plan}: the plan has no workloads to simulate")
    check_rps_scale(plan, args.rps_scale, args.traffic)
    replicas = args.replicas or size(plan).replicas_with_redundancy
    if replicas > MAX_REPLICAS:
        raise UserError(
            f"{args.plan}: the plan needs {replicas} replicas; at most {MAX_REPLICAS} run on one machine, "
            f"expected --replicas N (N <= {MAX_REPLICAS}) with --rps-scale to match"
        )
    if args.port and args.port + 2 * replicas - 1 > 65535:
        raise UserError(
            f"--port {args.port}: {replicas} replicas and their GPU pages need ports up to {args.port + 2 * replicas - 1}"
        )
    try:
        asyncio.run(_serve(args, plan, replicas))
    except ValueError as error:  # a plan the simulator cannot run (no KV left after the weights)
        raise UserError(f"{args.plan}: {error}") from None
    sys.stdout.flush()
    return 0
