"""The steps of `capcon whatif` past its options: read the fleet (or the plan alone), run the scenarios, say them."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from console.ahead.whatif import (
    DEFAULT_LEVERS,
    Correction,
    Costs,
    Lengths,
    Lever,
    Result,
    Workload,
    calibrate,
    no_correction,
    run_all,
    scenarios,
)
from console.ahead.words import rps_words
from console.overflow.policy import Policy, policy_from_plan
from console.plan.model import Plan
from console.plan.sizing import size
from console.sim.shape import replica_shape
from console.text import printable

UNKNOWN = "–"


@dataclass(frozen=True)
class Situation:
    """What the scenarios start from: the fleet as read (or the plan alone)."""

    fleet: str
    replicas: int
    rps: float  # the fleet's arrivals now
    rps_by_minute: tuple[float, ...]
    basis: str  # where the arrivals come from, in words
    input_mean: float
    output_mean: float
    gateway: bool
    tpot_p95_seconds: float | None  # the replicas' own, observed
    ttft_p95_seconds: float | None  # observed: the clients' with a gateway, else the replicas'
    ttft_seen_by: str  # "clients" or "replicas"
    deferrable_share: float = 0.0


@dataclass(frozen=True)
class Report:
    plan: Plan
    situation: Situation
    minutes: int
    correction: Correction
    results: list[Result]

    def to_json(self) -> dict:
        s = self.situation
        targets = self.plan.interactive[0].targets if self.plan.interactive else self.plan.workloads[0].targets
        return {
            "plan": self.plan.name,
            "fleet": s.fleet,
            "minutes": self.minutes,
            "arrivals": {
                "basis": s.basis,
                "rps_now": _num(s.rps),
                "rps_by_minute": [_num(r) for r in s.rps_by_minute],
            },
            "observed": {
                "replicas": s.replicas,
                "gateway": s.gateway,
                "mean_input_tokens": _num(s.input_mean),
                "mean_output_tokens": _num(s.output_mean),
                "ttft_p95_seconds": _num(s.ttft_p95_seconds),
                "ttft_seen_by": s.ttft_seen_by,
                "tpot_p95_seconds": _num(s.tpot_p95_seconds),
            },
            "targets": {"ttft_p95_seconds": targets.ttft_p95_seconds, "tpot_p95_seconds": targets.tpot_p95_seconds},
            "correction": self.correction.to_json(),
            "scenarios": [r.to_json() for r in self.results],
        }

    def lines(self) -> list[str]:
        s = self.situation
        first, last = s.rps_by_minute[0], s.rps_by_minute[-1]
        header = (
            f"what-if for {printable(s.fleet)} over the next {self.minutes} min: arrivals {rps_words(first)} -> "
            f"{rps_words(last)} rps ({s.basis}), {s.replicas} replica{'s' if s.replicas != 1 else ''}"
            + (", behind a gateway" if s.gateway else ", no gateway")
        )
        observed = (
            f"observed: TTFT p95 {_seconds(s.ttft_p95_seconds)} ({s.ttft_seen_by}) · TPOT p95 "
            f"{_seconds(s.tpot_p95_seconds)} · {s.input_mean:.0f} tokens in, {s.output_mean:.0f} out per request"
        )
        c = self.correction
        if c.observed_tpot_p95_seconds is not None:
            said = (
                f"correction: simulated steps x{c.factor:.2f} (live TPOT p95 {_seconds(c.observed_tpot_p95_seconds)}, "
                f"the simulator's {_seconds(c.simulated_tpot_p95_seconds)} at "
                f"{rps_words(c.at_rps_per_replica)} rps per replica: the factor that makes them meet)"
            )
        else:
            said = f"correction: x{c.factor:.2f}, {c.reason}"
        rows = [
            (
                "scenario",
                "replicas",
                "mode",
                "TTFT p95",
                "TPOT p95",
                "refused",
                "deferred",
                "hosted",
                "hosted $",
                "GPU-h",
            )
        ]
        notes = []
        for r in self.results:
            mark = "*" if r.simulated_replicas < r.replicas else ""
            rows.append(
                (
                    printable(r.name) + mark,
                    str(r.replicas),
                    r.mode,
                    _seconds(r.ttft_p95_seconds) + ("+" if r.unfinished_share > 0 else ""),
                    _seconds(r.tpot_p95_seconds),
                    _share(r.refused_share),
                    _share(r.deferred_share),
                    _share(r.hosted_share),
                    UNKNOWN if r.hosted_cost is None else f"{r.hosted_cost:,.2f}",
                    f"{r.gpu_hours:,.1f}",
                )
            )
            if r.note:
                notes.append(f"{printable(r.name)}: {printable(r.note)}")
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        table = [
            "  ".join(cell.ljust(w) if i in (0, 2) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            for row in rows
        ]
        targets = self.plan.interactive[0].targets if self.plan.interactive else self.plan.workloads[0].targets
        foot = [
            f"targets: TTFT p95 {_seconds(targets.ttft_p95_seconds)}, TPOT p95 {_seconds(targets.tpot_p95_seconds)}"
        ]
        if any(r.simulated_replicas < r.replicas for r in self.results):
            foot.append("* a slice of the replicas simulated, with its share of the arrivals and of the queue bounds")
        if any(r.unfinished_share > 0 for r in self.results):
            foot.append("+ some requests had no first token by the end: their wait so far counts, a floor")
        return [header, observed, said, "", *table, "", *foot, *notes]


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def _seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return UNKNOWN
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 100 else f"{value:,.0f} s"


def _share(value: float) -> str:
    return f"{value * 100:.1f} %"


# ---- the situation ------------------------------------------------------------------------------


def _targets_workload(plan: Plan):
    return plan.interactive[0] if plan.interactive else plan.workloads[0]


def _deferrable_share(plan: Plan, weekday: int, hour: int) -> float:
    deferrable = sum(w.rps_by_hour[weekday][hour] for w in plan.workloads if w.kind != "interactive")
    total = sum(w.rps_by_hour[weekday][hour] for w in plan.workloads)
    return deferrable / total if total > 0 else 0.0


def from_plan(plan: Plan, args) -> Situation:
    """The plan alone at --rps: its replicas at the peak (redundancy included), its lengths, its peak hour's mix."""
    sizing = size(plan)
    tokens = _targets_workload(plan).tokens
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
        deferrable_share=_deferrable_share(plan, sizing.peak_weekday, sizing.peak_hour),
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
    view = answer
    fleet = view.figures.fleet
    serving = view.replicas_serving
    if serving < 1:
        return f"{handle.name}: the fleet could not be read: no replica answered"
    rps_now = fleet.requests_per_second
    if rps_now is None and args.rps is None:
        return f"{handle.name}: the fleet's request rate is unknown (one sample only); expected --rps R"
    workload = _targets_workload(plan)
    minutes = args.minutes
    if args.rps is not None:
        by_minute = (float(args.rps),) * minutes
        basis = "--rps"
    else:
        by_minute, basis = _forecast_minutes(view.forecast, float(rps_now), minutes)
        if args.rps_scale is not None:
            by_minute = tuple(r * args.rps_scale for r in by_minute)
            basis += f" x{args.rps_scale:g}"
    gateway = view.gateway
    client_ttft = gateway.client_ttft_p95_seconds if gateway is not None else None
    plan_now = view.plan
    return Situation(
        fleet=handle.name,
        replicas=serving,
        rps=float(rps_now if rps_now is not None else by_minute[0]),
        rps_by_minute=by_minute,
        basis=basis,
        input_mean=fleet.mean_input_tokens or workload.tokens.input_mean,
        output_mean=fleet.mean_output_tokens or workload.tokens.output_mean,
        gateway=bool(handle.gateways),
        tpot_p95_seconds=fleet.tpot_p95_seconds,
        ttft_p95_seconds=client_ttft if client_ttft is not None else fleet.ttft_p95_seconds,
        ttft_seen_by="clients" if client_ttft is not None else "replicas",
        deferrable_share=_deferrable_share(plan, plan_now.weekday, plan_now.hour) if plan_now is not None else 0.0,
    )


def _forecast_minutes(forecast, rps_now: float, minutes: int) -> tuple[tuple[float, ...], str]:
    """Each minute's rate: the mean of the forecast at its start and end; past the forecast its last figure."""
    known = [v for v in (forecast.by_minute if forecast is not None else ()) if v is not None]
    if forecast is None or len(known) < 2 or len(known) != len(forecast.by_minute):
        return (rps_now,) * minutes, "the rate now, held (no forecast)"
    curve = forecast.by_minute
    rates = []
    for minute in range(minutes):
        a = curve[min(minute, len(curve) - 1)]
        b = curve[min(minute + 1, len(curve) - 1)]
        rates.append((a + b) / 2)
    return tuple(rates), f"forecast, {forecast.basis}"


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


# ---- the run ------------------------------------------------------------------------------------


def planned_cap(plan: Plan) -> int:
    """The gateway's in-flight cap per replica: the planner's concurrency at the peak, as the gateway sets it
    (console.gateway.config.planned_cap_from_plan, for one gateway; read here so the gateway's room stays out)."""
    sizing = size(plan)
    concurrency = sizing.expected_concurrency
    if not math.isfinite(concurrency) or concurrency <= 0:
        concurrency = sizing.concurrency
    return max(1, math.ceil(min(concurrency, plan.replica.max_num_seqs)))


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

    shape = replica_shape(plan)
    tokens = _targets_workload(plan).tokens
    input_scale = situation.input_mean / tokens.input_mean if tokens.input_mean > 0 else 1.0
    lengths = Lengths(
        input_mean=situation.input_mean,
        input_p95=max(situation.input_mean, tokens.input_p95 * input_scale),
        output_mean=min(situation.output_mean, tokens.output_max),
        output_max=int(tokens.output_max),
        max_model_len=min(shape.max_model_len, shape.kv_capacity_tokens),
    )
    plan_policy = policy_from_plan(plan, situation.replicas)
    now_policy = plan_policy if situation.gateway else Policy(mode="pass")
    try:
        chosen = scenarios(
            situation.replicas,
            now_policy,
            levers(args),
            planned_cap(plan),
            bool(plan.data.prompts_may_leave),
            mode_base=plan_policy,
        )
    except ValueError as problem:
        raise UserError(f"--replicas {problem}") from None
    if situation.tpot_p95_seconds is None and situation.basis.startswith("--rps, the plan"):
        correction = no_correction("none: no fleet was read (the plan alone)")
    else:
        correction = calibrate(
            shape, lengths, situation.rps / situation.replicas, situation.tpot_p95_seconds, seed=args.seed
        )
    workload = Workload(situation.rps_by_minute, lengths, situation.deferrable_share)
    costs = Costs(size(plan).gpus_per_replica, plan.overflow.hosted_price_per_million)
    results = run_all(shape, chosen, workload, costs, correction, seed=args.seed)
    return Report(plan, replace(situation), args.minutes, correction, results)
