"""The steps of `capcon whatif` past its options: read the fleet (or the plan alone), run the scenarios, say them.

The situation, the run and the report live in console/ahead/whatif_report.py (the console's dialog shares them).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from itertools import pairwise
from typing import TYPE_CHECKING

from console.ahead.whatif import DEFAULT_LEVERS, Lever
from console.ahead.whatif_report import (
    Report,
    Situation,
    deferrable_share_at,
    from_view,
    run_levers,
    targets_workload,
)
from console.plan.model import Plan
from console.plan.sizing import size

if TYPE_CHECKING:
    from console.fleet.view import FleetView
    from console.live.handle import FleetHandle
    from console.plan.schema import CapacityEstimator


def from_plan(plan: Plan, args: argparse.Namespace) -> Situation:
    """The plan alone at --rps: its replicas at the peak (redundancy included), its lengths, its peak hour's mix."""
    sizing = size(plan)
    tokens = targets_workload(plan).tokens
    gateways = bool(getattr(args, "gateway", None)) or bool(plan.fleet is not None and plan.fleet.gateways)
    return Situation(
        fleet=plan.name,
        replicas=max(1, sizing.replicas_with_redundancy),
        rps=float(args.rps),
        rps_by_minute=(float(args.rps),) * args.minutes,
        basis="--rps, the plan alone",
        input_mean=tokens.input_mean,
        output_mean=tokens.output_mean,
        gateway=gateways,
        tpot_p95_seconds=None,
        ttft_p95_seconds=None,
        ttft_seen_by="replicas",
        deferrable_share=deferrable_share_at(plan, sizing.peak_weekday, sizing.peak_hour),
    )


def from_fleet(plan: Plan, args: argparse.Namespace) -> Situation | str:
    """The fleet read once as `watch --once` reads it; why not, in words, when it cannot be read."""
    import asyncio

    from console.live.setup import fleet_handles

    args.once = True
    args.window = getattr(args, "window", None)
    [handle] = fleet_handles(args, [plan])
    answer = asyncio.run(_read(handle, args.interval))
    if isinstance(answer, str):
        return f"{handle.name}: the fleet could not be read: {answer}"
    return from_view(
        plan, handle.name, answer, bool(handle.gateways), args.minutes, args.interval, args.rps, args.rps_scale
    )


def from_recording(plan: Plan, args: argparse.Namespace, estimate: CapacityEstimator) -> Situation | str:
    """The fleet as recorded at --at (the view the replay shows then: the minutes before it give the lengths, the
    TPOT for the correction and the rate), with the arrivals the recording holds for the minutes after it (what
    came); past the recording's end the last recorded minute's rate is held. Why not, in words."""
    import time

    from console.errors import UserError
    from console.replay.controller import first_view
    from console.replay.fleet_replay import WARMUP_SECONDS
    from console.when import parse_when

    try:
        at = parse_when(args.at, time.time())
    except ValueError as problem:
        raise UserError(f"--at {problem}") from None
    name = plan.name
    try:
        # From a warm-up before the moment to the moment: the view then is the one the replay shows.
        controller, _ = first_view(args.db, [name], start=at - WARMUP_SECONDS, end=at, estimate=estimate)
    except UserError as problem:
        raise UserError(str(problem).replace("--fleet ", "the plan's fleet ", 1)) from None
    try:
        frame = controller.seek(at)
        view = frame.views[0] if frame.views else None
        if view is None:
            return f"{args.db}: no view of fleet {name!r} at {args.at} (no poll recorded by then)"
        window = view.figures.window_seconds or 60.0
        situation = from_view(
            plan, name, view, view.gateway is not None, args.minutes, window, args.rps, args.rps_scale
        )
        if isinstance(situation, str) or args.rps is not None:
            return situation
        came = recorded_minutes(args.db, name, at, args.minutes)
        if came is None:
            return replace(situation, basis=f"{situation.basis}: nothing recorded after --at")
        scale = args.rps_scale if args.rps_scale is not None else 1.0
        basis = "recorded arrivals after --at" + (f" x{scale:g}" if args.rps_scale is not None else "")
        return replace(situation, rps_by_minute=tuple(r * scale for r in came), basis=basis)
    finally:
        controller.replay.close()


def recorded_minutes(path: str, fleet: str, at: float, minutes: int) -> tuple[float, ...] | None:
    """The fleet's recorded request rate for each of the `minutes` after `at`: per replica, its counter's rise
    over the recorded steps ending in that minute over their length (a restart's step left out), summed over
    the replicas; a minute not recorded holds the one before. None: none recorded."""
    from console.store.arrivals import minute_requests
    from console.store.database import Store

    store = Store.open(path, read_only=True)
    try:
        points = minute_requests(store, fleet, at - 120.0, at + minutes * 60.0 + 60.0)
    finally:
        store.close()
    rates: list[float | None] = []
    for minute in range(minutes):
        start, stop = at + minute * 60.0, at + (minute + 1) * 60.0
        total, known = 0.0, False
        for series in points.values():
            rose = elapsed = 0.0
            for (t0, r0, s0), (t1, r1, s1) in pairwise(series):
                if r0 is None or r1 is None or r1 < r0 or (s0 is not None and s1 is not None and s0 != s1):
                    continue  # unknown, or a restart between the two
                if start < t1 <= stop and t1 > t0:
                    rose += r1 - r0
                    elapsed += t1 - t0
            if elapsed > 0:
                total, known = total + rose / elapsed, True
        rates.append(total if known else None)
    if all(rate is None for rate in rates):
        return None
    held: list[float] = []
    first = next(rate for rate in rates if rate is not None)
    for rate in rates:
        held.append(rate if rate is not None else (held[-1] if held else first))
    return tuple(held)


async def _read(handle: FleetHandle, interval: float) -> FleetView | str:
    """The fleet's last view after two samples `interval` apart (one answer through Prometheus), or why not."""
    from console.live.feed import PollFeed, gateway_watch
    from console.live.loop import Cadence, failure_words, poll_loop

    feed = PollFeed(handle, None, gateways=gateway_watch(handle))
    views: list[FleetView] = []
    polls = 2 if handle.watcher.source_name == "scrape" or feed.gateways is not None else 1
    failures: list[str] = []

    def failed(error: Exception) -> None:
        failures.append(f"poll failed: {failure_words(error)}")
        raise _Failed

    try:
        await poll_loop(feed, Cadence(interval), views.append, failed, polls=polls)
    except _Failed:
        return failures[-1]
    finally:
        await feed.aclose()
    return views[-1] if views else "no poll was made"


class _Failed(Exception):
    """A poll that failed as a whole: a what-if has no next poll to wait for."""


def levers(args: argparse.Namespace) -> list[Lever]:
    chosen = [Lever(replicas=r) for r in args.replicas]
    for mode in args.mode:
        chosen.append(
            Lever(
                mode=mode,
                max_queue=args.max_queue,
                max_wait_seconds=args.max_wait,
                hosted_after_queue=args.hosted_after,
            )
        )
    return chosen or list(DEFAULT_LEVERS)


def report(plan: Plan, situation: Situation, args: argparse.Namespace) -> Report:
    from console.errors import UserError

    try:
        lead = None if args.lead_time is None else args.lead_time * 60.0
        return run_levers(plan, situation, levers(args), args.minutes, args.seed, lead_seconds=lead)
    except ValueError as problem:
        raise UserError(f"--replicas {problem}") from None
