"""What a what-if starts from and what it says: the situation (a fleet's view, or the plan alone), the scenarios
run on it, and the report (the verb's table and its JSON). Shared by `capcon whatif` and the console's dialog.

Pure: the caller reads the fleet (console/commands/whatif_run.py, or the console's last poll) and passes it in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from console.ahead.forecast import Forecast
from console.ahead.whatif import (
    CORRECTION_BOUNDS,
    Backlog,
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
from console.fleet.view import FleetView
from console.overflow.policy import MODES, Policy, policy_from_plan
from console.plan.model import Plan
from console.plan.model import Workload as PlanWorkload
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
    gateway_mode: str | None = None  # the mode the gateway said it enforces; None: not read
    backlog: Backlog = field(default_factory=Backlog)  # what the fleet held when read: carried into every scenario


@dataclass(frozen=True)
class Report:
    plan: Plan
    situation: Situation
    minutes: int
    correction: Correction
    results: list[Result]
    lead_seconds: float = 0.0  # how long an added replica took to serve in the scenarios

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
                "backlog": {
                    "running_per_replica": _num(s.backlog.running_per_replica),
                    "waiting_per_replica": _num(s.backlog.waiting_per_replica),
                    "gateway_queued": _num(s.backlog.gateway_queued),
                },
            },
            "lead_time_seconds": _num(self.lead_seconds),
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
        b = s.backlog
        if not b.empty:
            observed += (
                f" · carried in: {b.running_per_replica:.1f} decoding and {b.waiting_per_replica:.1f} waiting per "
                f"replica" + (f", {b.gateway_queued:.0f} in the gateway's queue" if b.gateway_queued > 0 else "")
            )
        c = self.correction
        if c.observed_tpot_p95_seconds is not None:
            said = (
                f"correction: simulated steps x{c.factor:.2f} (live TPOT p95 {_seconds(c.observed_tpot_p95_seconds)}, "
                f"the simulator's {_seconds(c.simulated_tpot_p95_seconds)} at "
                f"{rps_words(c.at_rps_per_replica)} rps per replica: "
                + (
                    "held at its bound, the plan's model and the fleet disagree more than a correction should fix)"
                    if c.factor in CORRECTION_BOUNDS
                    else "the factor that makes them meet)"
                )
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


def targets_workload(plan: Plan) -> PlanWorkload:
    return plan.interactive[0] if plan.interactive else plan.workloads[0]


def deferrable_share_at(plan: Plan, weekday: int, hour: int) -> float:
    deferrable = sum(w.rps_by_hour[weekday][hour] for w in plan.workloads if w.kind != "interactive")
    total = sum(w.rps_by_hour[weekday][hour] for w in plan.workloads)
    return deferrable / total if total > 0 else 0.0


def from_view(
    plan: Plan,
    name: str,
    view: FleetView,
    gateways: bool,
    minutes: int,
    window_seconds: float,
    rps: float | None = None,
    rps_scale: float | None = None,
) -> Situation | str:
    """The situation a fleet's view gives (a `watch --once` read, or the console's latest poll); why not, in words.

    `window_seconds`: how long the view's figures were counted over (how many requests the mean lengths hold)."""
    fleet = view.figures.fleet
    serving = view.replicas_serving
    if serving < 1:
        return f"{name}: the fleet could not be read: no replica answered"
    rps_now = fleet.requests_per_second
    if rps_now is None and rps is None:
        return f"{name}: the fleet's request rate is unknown (one sample only); expected --rps R"
    workload = targets_workload(plan)
    if rps is not None:
        by_minute = (float(rps),) * minutes
        basis = "--rps"
    else:
        assert rps_now is not None  # one of the two, said above
        by_minute, basis = _forecast_minutes(view.forecast, float(rps_now), minutes)
        if rps_scale is not None:
            by_minute = tuple(r * rps_scale for r in by_minute)
            basis += f" x{rps_scale:g}"
    finished = (rps_now or 0.0) * window_seconds  # requests the window's length histograms hold, about
    gateway = view.gateway
    client_ttft = gateway.client_ttft_p95_seconds if gateway is not None else None
    plan_now = view.plan
    return Situation(
        fleet=name,
        replicas=serving,
        rps=float(rps_now if rps_now is not None else by_minute[0]),
        rps_by_minute=by_minute,
        basis=basis,
        input_mean=blended_mean(fleet.mean_input_tokens, finished, workload.tokens.input_mean),
        output_mean=blended_mean(fleet.mean_output_tokens, finished, workload.tokens.output_mean),
        gateway=gateways,
        tpot_p95_seconds=fleet.tpot_p95_seconds,
        ttft_p95_seconds=client_ttft if client_ttft is not None else fleet.ttft_p95_seconds,
        ttft_seen_by="clients" if client_ttft is not None else "replicas",
        deferrable_share=deferrable_share_at(plan, plan_now.weekday, plan_now.hour) if plan_now is not None else 0.0,
        gateway_mode=gateway.policy.mode if gateway is not None and gateway.policy is not None else None,
        backlog=Backlog(
            running_per_replica=_per(fleet.running, serving),
            waiting_per_replica=_per(fleet.waiting, serving),
            gateway_queued=_per(gateway.queue_length if gateway is not None else None, 1),
        ),
    )


def _per(total: float | None, replicas: int) -> float:
    """A fleet's count per replica; an unknown or impossible one carries nothing in."""
    if total is None or not math.isfinite(total) or total <= 0:
        return 0.0
    return total / replicas


LENGTH_PRIOR_REQUESTS = 30.0


def blended_mean(observed: float | None, requests: float, planned: float) -> float:
    """The observed mean length, weighed against the plan's as if the plan's were LENGTH_PRIOR_REQUESTS requests.

    A quiet window holds a handful of requests: their mean is mostly chance (two answers of 45 tokens where
    the plan's mean is 60), and a scenario's capacity scales with it. From about 30 requests on, the fleet's
    own figure leads."""
    if observed is None or not math.isfinite(observed) or not requests > 0:
        return planned
    return (observed * requests + planned * LENGTH_PRIOR_REQUESTS) / (requests + LENGTH_PRIOR_REQUESTS)


def _forecast_minutes(forecast: Forecast | None, rps_now: float, minutes: int) -> tuple[tuple[float, ...], str]:
    """Each minute's rate: the mean of the forecast at its start and end; past the forecast its last figure."""
    known = [v for v in (forecast.by_minute if forecast is not None else ()) if v is not None]
    if forecast is None or len(known) < 2 or len(known) != len(forecast.by_minute):
        return (rps_now,) * minutes, "the rate now, held (no forecast)"
    curve = known  # every minute known (checked above)
    rates = []
    for minute in range(minutes):
        a = curve[min(minute, len(curve) - 1)]
        b = curve[min(minute + 1, len(curve) - 1)]
        rates.append((a + b) / 2)
    return tuple(rates), f"forecast, {forecast.basis}"


# ---- the run ------------------------------------------------------------------------------------


def planned_cap(plan: Plan) -> int:
    """The gateway's in-flight cap per replica: the planner's concurrency at the peak, as the gateway sets it
    (console.gateway.config.planned_cap_from_plan, for one gateway; read here so the gateway's room stays out)."""
    sizing = size(plan)
    concurrency = sizing.expected_concurrency
    if not math.isfinite(concurrency) or concurrency <= 0:
        concurrency = sizing.concurrency
    return max(1, math.ceil(min(concurrency, plan.replica.max_num_seqs)))


def now_policy_of(plan_policy: Policy, situation: Situation) -> Policy:
    """What "now" runs: no gateway, every request forwarded; a gateway that said its mode, that mode with the
    plan's bounds (its queue bound is not on its page); a gateway not read, the plan's policy."""
    if not situation.gateway:
        return Policy(mode="pass")
    mode = next((m for m in MODES if m == situation.gateway_mode), None)
    if mode is not None and mode != plan_policy.mode:
        return replace(plan_policy, mode=mode)
    return plan_policy


def run_levers(
    plan: Plan,
    situation: Situation,
    chosen_levers: list[Lever],
    minutes: int,
    seed: int = 0,
    lead_seconds: float | None = None,
) -> Report:
    """ "now" and each lever over `minutes` on the plan's simulated replica, corrected by the fleet's live TPOT,
    from the backlog the fleet held; replicas added serve after `lead_seconds` (default: the plan's lead time).
    ValueError for a lever that cannot be (a replica count that leaves none). Pure CPU: a worker's job."""
    lead = plan.lead_time_seconds if lead_seconds is None else lead_seconds
    shape = replica_shape(plan)
    tokens = targets_workload(plan).tokens
    input_scale = situation.input_mean / tokens.input_mean if tokens.input_mean > 0 else 1.0
    lengths = Lengths(
        input_mean=situation.input_mean,
        input_p95=max(situation.input_mean, tokens.input_p95 * input_scale),
        output_mean=min(situation.output_mean, tokens.output_max),
        output_max=int(tokens.output_max),
        max_model_len=min(shape.max_model_len, shape.kv_capacity_tokens),
    )
    plan_policy = policy_from_plan(plan, situation.replicas)
    now_policy = now_policy_of(plan_policy, situation)
    chosen = scenarios(
        situation.replicas,
        now_policy,
        chosen_levers,
        planned_cap(plan),
        bool(plan.data.prompts_may_leave),
        mode_base=plan_policy,
        lead_seconds=lead,
    )
    if situation.tpot_p95_seconds is None and situation.basis.startswith("--rps, the plan"):
        correction = no_correction("none: no fleet was read (the plan alone)")
    else:
        correction = calibrate(
            shape, lengths, situation.rps / situation.replicas, situation.tpot_p95_seconds, seed=seed
        )
    workload = Workload(situation.rps_by_minute, lengths, situation.deferrable_share, situation.backlog)
    costs = Costs(size(plan).gpus_per_replica, plan.overflow.hosted_price_per_million)
    results = run_all(shape, chosen, workload, costs, correction, seed=seed)
    return Report(plan, replace(situation), minutes, correction, results, lead)
