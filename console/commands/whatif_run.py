"""The steps of `capcon whatif` past its options: read the fleet (or the plan alone), run the scenarios, say them.

The situation, the run and the report live in console/ahead/whatif_report.py (the console's dialog shares them).
"""

from __future__ import annotations

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


def from_plan(plan: Plan, args) -> Situation:
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


def from_fleet(plan: Plan, args) -> Situation | str:
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


async def _read(handle, interval: float):
    """The fleet's last view after two samples `interval` apart (one answer through Prometheus), or why not."""
    from console.live.feed import PollFeed, gateway_watch
    from console.live.loop import Cadence, failure_words, poll_loop

    feed = PollFeed(handle, None, gateways=gateway_watch(handle))
    views: list = []
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


def levers(args) -> list[Lever]:
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


def report(plan: Plan, situation: Situation, args) -> Report:
    from console.errors import UserError

    try:
        return run_levers(plan, situation, levers(args), args.minutes, args.seed)
    except ValueError as problem:
        raise UserError(f"--replicas {problem}") from None
