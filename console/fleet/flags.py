"""Flags: pure rules over the live figures and the plan, with hysteresis and a minimum duration.

Each rule reads the figures and says, per subject (a replica or the fleet),
whether its raise condition holds, whether its clear condition holds, or
neither (the value sits between the two thresholds: an active flag stays, a
pending one is dropped, so a value wobbling around one threshold never flaps).
A raise condition must hold for the rule's minimum duration before the flag
shows. State is carried between polls as an immutable `FlagState`:

    state = evaluate(state, inputs, now)

What to do follows the capacity method, docs/method.md, 'Watching the fleet' and
the sections after it: scale out on queues and KV pressure, and on latency drift;
keep N+1; scale by the schedule ahead of the ramp; above the plan, apply the
overflow policy chosen in advance. Each `todo` says it in words, then names the
section that explains it with `_see`; tests/test_docs.py checks the names are headings.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

from console.ahead.forecast import Forecast
from console.ahead.words import minutes_words
from console.fleet import slo
from console.fleet.gpus import ReplicaGpu
from console.fleet.plan_now import PlanNow
from console.metrics.figures import FAILED, FLEET_TOTAL, SERVING, Figures, FleetFigures, ReplicaState
from console.metrics.gateway import GatewayFigures

Severity = Literal["critical", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"critical": 3, "warning": 2, "info": 1}

# Each kind of flag in words: the console's flags panel and overview, and `watch --once`'s flag lines, say these;
# the kind itself stays the machine key (the history, --json, `export`).
FLAG_TITLES: dict[str, str] = {
    "saturation": "saturated",
    "replica_down": "replica down",
    "replica_stale": "stale figures",
    "replica_restarted": "replica restarted",
    "latency_drift": "latency drift",
    "slo_breach_ttft": "SLO breach: TTFT",
    "slo_breach_tpot": "SLO breach: TPOT",
    "slo_breach_e2e": "SLO breach: end-to-end",
    "slo_undetermined_ttft": "SLO undetermined: TTFT",
    "slo_undetermined_tpot": "SLO undetermined: TPOT",
    "slo_undetermined_e2e": "SLO undetermined: end-to-end",
    "above_plan": "load over plan",
    "n_plus_1_at_risk": "N+1 at risk",
    "workload_drift_input": "workload drift: input",
    "workload_drift_output": "workload drift: output",
    "schedule_lag": "behind the schedule",
    "scale_up_due": "scale-up due",
    "saturation_ahead": "saturation ahead",
    "source_error": "source unreachable",
}


def flag_title(kind: str) -> str:
    """A kind of flag in words; a kind without words (a newer recording's) as itself."""
    return FLAG_TITLES.get(kind, kind)


OVERFLOW_WORDS = {
    "bounded_queue": "bounded queue: reject the excess early",
    "hosted": "hosted: send the excess to the hosted model",
    "defer": "defer: move batch work out of the peak",
}


@dataclass(frozen=True)
class Thresholds:
    """Defaults for every rule; latency targets, capacity and lead time come from the plan."""

    min_duration_seconds: float = 30.0
    queue_raise: float = 1.0  # requests waiting on one replica
    queue_clear: float = 0.5
    kv_raise: float = 0.90  # fractions, 0-1, never percents
    kv_clear: float = 0.85
    drift_raise_share: float = 0.80  # p95 TPOT at this share of its target
    drift_clear_share: float = 0.70
    drift_flat_band: float = 0.10  # generation tokens/s within +-10 % counts as flat
    drift_lookback_seconds: float = 120.0
    slo_clear_share: float = 0.90  # a breach clears below 90 % of its target
    load_clear_share: float = 0.95  # load flags clear below 95 % of the capacity they compare with
    workload_raise: float = 0.50  # observed mean tokens 50 % away from the plan's
    workload_clear: float = 0.30
    workload_min_duration_seconds: float = 120.0
    # Saturation ahead rises when the forecast passes the replicas up sooner than the lead time, and clears
    # once it is this many lead times away or not within the forecast's last horizon.
    ahead_clear_lead_times: float = 1.5
    # The GPU's own counters on a saturated replica (console.fleet.gpus): DRAM active at or over this share is
    # near its ceiling (decode reads weights and KV at 0.5-0.7 of the datasheet bandwidth when it is the limit):
    # memory-bound; SM or tensor active at or over this share with the KV cache below kv_clear: compute-bound.
    dram_bound_share: float = 0.5
    compute_bound_share: float = 0.5
    down_after_seconds: float = 10.0
    restart_hold_seconds: float = 300.0  # a restart stays on screen this long


@dataclass(frozen=True)
class FlagInputs:
    figures: FleetFigures
    plan: PlanNow | None = None
    # Fleet p95 TPOT and generation tokens/s `drift_lookback_seconds` ago (from the trends).
    tpot_p95_before: float | None = None
    generation_before: float | None = None
    # Arrivals ahead and when they pass the replicas up (console.ahead.forecast), from the view.
    forecast: Forecast | None = None
    # The fleet's gateways as their clients saw them (queue wait included): with a gateway in front, the
    # plan's latency targets are the users' targets, so TTFT and end-to-end are judged on these figures.
    client: GatewayFigures | None = None
    # Each replica's GPU counters by name (dcgm-exporter, read in the same step); None without GPU pages.
    gpus: Mapping[str, ReplicaGpu] | None = None


@dataclass(frozen=True)
class Reading:
    kind: str
    subject: str
    raise_: bool
    clear: bool
    severity: Severity
    why: str
    todo: str
    raise_after: float
    hold: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.subject}"


@dataclass(frozen=True)
class Flag:
    id: str
    kind: str
    subject: str  # a replica name, or FLEET_TOTAL
    severity: Severity
    since: float  # when the raise condition began to hold
    why: str  # the figures that raised it
    todo: str  # what to do, in words, naming the section of docs/method.md that explains it


@dataclass(frozen=True)
class Pending:
    """A rule whose condition holds but not yet for its minimum duration: not a flag, not "all clear" either."""

    id: str
    kind: str
    subject: str
    severity: Severity  # what it will be once it shows
    since: float  # when the condition began to hold
    needed_seconds: float  # the rule's minimum duration
    why: str


@dataclass(frozen=True)
class Tracker:
    kind: str
    subject: str
    severity: Severity
    why: str
    todo: str
    pending_since: float
    active_since: float | None = None
    last_raised: float | None = None
    raise_after: float = 0.0  # how long the condition must hold before the flag shows


@dataclass(frozen=True)
class FlagState:
    """The trackers after one evaluate; what screens read of them is built once per state, on first use.

    `active`, `pending` and the worst severity per subject are cached: the console reads them
    for every row and widget of a refresh, and at 10,000 flagged replicas rebuilding and sorting
    them per read made a refresh cost replicas x flags. The trackers are never mutated, so a
    cached answer stays right for the state's life.
    """

    trackers: dict[str, Tracker] = field(default_factory=dict)  # never mutated: evaluate builds a new one

    @cached_property
    def active(self) -> tuple[Flag, ...]:
        flags = [
            Flag(i, t.kind, t.subject, t.severity, t.pending_since, t.why, t.todo)
            for i, t in self.trackers.items()
            if t.active_since is not None
        ]
        return tuple(sorted(flags, key=lambda f: (-SEVERITY_RANK[f.severity], f.since, f.id)))

    @cached_property
    def pending(self) -> tuple[Pending, ...]:
        """Conditions that hold but have not lasted long enough yet, worst first, then oldest."""
        found = [
            Pending(i, t.kind, t.subject, t.severity, t.pending_since, t.raise_after, t.why)
            for i, t in self.trackers.items()
            if t.active_since is None
        ]
        return tuple(sorted(found, key=lambda p: (-SEVERITY_RANK[p.severity], p.since, p.id)))

    @cached_property
    def worst_active(self) -> dict[str, Severity]:
        """Each subject's worst active severity (subjects without an active flag are absent)."""
        return worst_by_subject(self.active)

    @cached_property
    def worst_pending(self) -> dict[str, Severity]:
        """Each subject's worst pending severity."""
        return worst_by_subject(self.pending)

    def worst_for(self, subject: str) -> Severity | None:
        return self.worst_active.get(subject)


def worst_by_subject(items: tuple[Flag, ...] | tuple[Pending, ...]) -> dict[str, Severity]:
    """Each subject's worst severity, in one pass: the items are sorted worst first, so the first seen wins."""
    found: dict[str, Severity] = {}
    for item in items:
        found.setdefault(item.subject, item.severity)
    return found


def worst(flags: tuple[Flag, ...]) -> Flag | None:
    return flags[0] if flags else None  # `active` is sorted worst first


FlagChangeKind = Literal["raised", "cleared"]


def changes(before: FlagState | None, after: FlagState) -> tuple[tuple[FlagChangeKind, Flag], ...]:
    """Flags raised and cleared between two states, as ("raised" | "cleared", flag); what the history records."""
    old = {f.id: f for f in before.active} if before is not None else {}
    new = {f.id: f for f in after.active}
    raised: list[tuple[FlagChangeKind, Flag]] = [("raised", f) for i, f in new.items() if i not in old]
    cleared: list[tuple[FlagChangeKind, Flag]] = [("cleared", f) for i, f in old.items() if i not in new]
    return tuple(cleared + raised)


# --- the rules -------------------------------------------------------------


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


# Every `todo` that asks for the overflow policy holds these words: a console that can switch it names its key.
OVERFLOW_ADVICE = "overflow policy"


def asks_for_overflow(todo: str) -> bool:
    return OVERFLOW_ADVICE in todo


def _overflow(plan: PlanNow | None) -> str:
    if plan is None:
        return "the overflow policy chosen in advance"
    return f"the plan's overflow policy ({OVERFLOW_WORDS.get(plan.overflow_mode, plan.overflow_mode)})"


def _see(section: str) -> str:
    """The pointer a `todo` ends with: a heading of docs/method.md, checked by tests/test_docs.py."""
    return f"(docs/method.md, '{section}')"


def _saturation_todo(plan: PlanNow | None) -> str:
    """The saturation advice: the same for every replica, so `readings` writes it once a refresh."""
    return f"Replica saturated: add a replica {_see('Scaling out')}; if over the plan, apply {_overflow(plan)}."


def gpu_bound(kv: float | None, gpu: ReplicaGpu | None, t: Thresholds) -> str:
    """What a saturated replica's GPU counters say holds it back, naming the figure that led there; "" when they
    say nothing (unknown, or neither near its limit). The method's reading: DRAM near its ceiling is
    memory-bound; SM or tensor active high with the KV cache free is compute-bound."""
    if gpu is None:
        return ""
    if gpu.dram_active is not None and gpu.dram_active >= t.dram_bound_share:
        return f"memory-bound: DRAM active {_pct(gpu.dram_active)}"
    busy = [(name, v) for name, v in (("tensor", gpu.tensor_active), ("SM", gpu.sm_active)) if v is not None]
    high = [(name, v) for name, v in busy if v >= t.compute_bound_share]
    if high and kv is not None and kv < t.kv_clear:
        name, value = max(high, key=lambda item: item[1])
        return f"compute-bound: {name} active {_pct(value)} with KV {_pct(kv)}"
    return ""


def _saturation(
    r: Figures,
    t: Thresholds,
    plan: PlanNow | None,
    tracked: Container[str] | None = None,
    todo: str | None = None,
    gpu: ReplicaGpu | None = None,
) -> Reading | None:
    if r.state not in SERVING:
        return None
    waiting, kv, pre = r.waiting, r.kv_usage, r.preemptions_per_second
    if waiting is None and kv is None:
        return None
    queued = waiting is not None and waiting >= t.queue_raise
    kv_full = kv is not None and kv >= t.kv_raise and pre is not None and pre > 0
    queue_gone = waiting is None or waiting < t.queue_clear
    kv_gone = kv is None or kv < t.kv_clear or not pre
    parts = []
    if waiting is not None:
        parts.append(f"{waiting:.0f} waiting")
    if kv is not None:
        parts.append(f"KV {_pct(kv)}" + (f" with {pre:.2f} preemptions/s" if pre else ""))
    if not _needed(queued or kv_full, "saturation", r.name, tracked):
        return None
    bound = gpu_bound(kv, gpu, t) if queued or kv_full else ""
    if bound:
        parts.append(bound)
    return Reading(
        "saturation",
        r.name,
        raise_=queued or kv_full,
        clear=queue_gone and kv_gone,
        severity="critical" if queued and kv_full else "warning",
        why=", ".join(parts),
        todo=todo if todo is not None else _saturation_todo(plan),
        raise_after=t.min_duration_seconds,
    )


# Why a replica counts as down, and what to do, by how it failed: refused outright, or only its /metrics page.
METRICS_FAILING = {
    ReplicaState.BAD_PAYLOAD: "its /metrics page is not a valid metrics page",
    ReplicaState.TIMEOUT: "its /metrics page timed out",
}


def _down_words(r: Figures, detail: str) -> tuple[str, str]:
    if r.state in METRICS_FAILING:
        return (
            f"{r.name}: {METRICS_FAILING[r.state]}{detail} at {r.url}",
            "Its /metrics page fails; it may still serve traffic: check the API server's /metrics and that the "
            "host answers. Its capacity is counted as lost until the page answers.",
        )
    return (
        f"{r.name} is {r.state.replace('_', ' ')}{detail} at {r.url}",
        "Check the replica's process and host; the fleet runs without that capacity (and maybe its spare).",
    )


def _replica_state(r: Figures, t: Thresholds, tracked: Container[str] | None = None) -> list[Reading]:
    """Down, stale and restarted; a reading that neither raises nor steps a tracker is left out (`_needed`)."""
    detail = f" ({r.error})" if r.error else ""
    down = r.state in FAILED
    stale = r.state == ReplicaState.STALE
    restarted = r.state == ReplicaState.RESTARTED
    found = []
    if _needed(down, "replica_down", r.name, tracked):
        why, todo = _down_words(r, detail)
        found.append(
            Reading(
                "replica_down",
                r.name,
                raise_=down,
                clear=not down,
                severity="critical",
                why=why,
                todo=todo,
                raise_after=t.down_after_seconds,
            )
        )
    if _needed(stale, "replica_stale", r.name, tracked):
        found.append(
            Reading(
                "replica_stale",
                r.name,
                raise_=stale,
                clear=not stale,
                severity="warning",
                why=f"{r.name}: no fresh data"
                + (f" for {r.data_age_seconds:.0f} s" if r.data_age_seconds else "")
                + detail,
                todo="Figures for this replica are old: check the scrape target or Prometheus job before trusting "
                "them.",
                raise_after=t.min_duration_seconds,
            )
        )
    if _needed(restarted, "replica_restarted", r.name, tracked):
        found.append(
            Reading(
                "replica_restarted",
                r.name,
                raise_=restarted,
                clear=not restarted,
                severity="warning",
                why=f"{r.name}: counters went down (the engine restarted){detail}",
                todo="Find why it restarted (OOM, deploy, crash) before it happens at peak; its rates restart from "
                "zero.",
                raise_after=0.0,
                hold=t.restart_hold_seconds,
            )
        )
    return found


_STATE_KINDS = ("replica_down:", "replica_stale:", "replica_restarted:")
_STATE_READ = (*FAILED, ReplicaState.STALE, ReplicaState.RESTARTED)  # states that raise one of them


def _needed(raised: bool, kind: str, subject: str, tracked: Container[str] | None) -> bool:
    """Whether a per-replica reading can change the state: it raises, or a tracker of its id exists.

    A reading that does not raise, for an id without a tracker, steps to nothing (`_step`), so
    leaving it out is exact; it saves building thousands of readings per poll for healthy replicas.
    """
    return raised or tracked is None or f"{kind}:{subject}" in tracked


def _latency_drift(f: Figures, inputs: FlagInputs, t: Thresholds) -> Reading | None:
    plan = inputs.plan
    target = plan.tpot_p95_target_seconds if plan else None
    tpot, gen = f.tpot_p95_seconds, f.generation_tokens_per_second
    if target is None or tpot is None:
        return None
    before_tpot, before_gen = inputs.tpot_p95_before, inputs.generation_before
    rising = before_tpot is not None and tpot > before_tpot
    flat = (
        gen is not None
        and before_gen is not None
        and before_gen > 0
        and abs(gen - before_gen) <= t.drift_flat_band * before_gen
    )
    why = f"p95 TPOT {_ms(tpot)} of a {_ms(target)} target"
    if before_tpot is not None:
        why += f" (was {_ms(before_tpot)})"
    if gen is not None and before_gen is not None:
        why += f"; generation {gen:.0f} tok/s (was {before_gen:.0f})"
    # On the TPOT buckets where the figures have them: near the target only where the buckets say so, not where
    # the interpolation inside a wide bucket says so (console.fleet.slo).
    near, far = tpot >= t.drift_raise_share * target, tpot < t.drift_clear_share * target
    b = f.latency_buckets.get("tpot")
    if b is not None:
        near = slo.verdict_on(b, t.drift_raise_share * target) == "missed"
        far = slo.verdict_on(b, t.drift_clear_share * target) == "met"
    return Reading(
        "latency_drift",
        FLEET_TOTAL,
        raise_=near and rising and flat,
        clear=far,
        severity="warning",
        why=why,
        todo="Batches are too large for the replicas: add a replica before p95 TPOT reaches its target "
        f"{_see('Latency drift')}.",
        raise_after=t.min_duration_seconds,
    )


def _slo_breach(f: Figures, plan: PlanNow | None, t: Thresholds, client: GatewayFigures | None = None) -> list[Reading]:
    """Each latency target judged on the window's buckets (console.fleet.slo): a breach only where even the
    fewest requests the buckets allow over the target are too many; a target inside a bucket whose counts
    allow either answer is undetermined, said as such (info, never critical) with what makes it judgeable.
    A breach clears once the p95 is known to be within `slo_clear_share` of its target."""
    readings = []
    for check in slo.checks(f, plan, client):
        verdict = check.verdict
        if verdict is None:
            continue
        cleared = slo.judged_at(check, t.slo_clear_share * check.target)
        readings.append(
            Reading(
                f"slo_breach_{check.key}",
                FLEET_TOTAL,
                raise_=verdict == "missed",
                clear=cleared == "met",
                severity="critical",
                why=slo.why(check),
                todo=f"Add replicas now {_see('Scaling out')}; if over the plan, apply {_overflow(plan)}.",
                raise_after=t.min_duration_seconds,
            )
        )
        readings.append(
            Reading(
                f"slo_undetermined_{check.key}",
                FLEET_TOTAL,
                raise_=verdict == "undetermined",
                clear=verdict != "undetermined",
                severity="info",
                why=slo.why(check),
                todo=f"{slo.fix(check)} {_see('Targets and buckets')}",
                raise_after=t.min_duration_seconds,
            )
        )
    return readings


def client_or_replicas(
    f: Figures, client: GatewayFigures | None
) -> tuple[tuple[str, float | None], tuple[str, float | None]]:
    """The p95 TTFT and end-to-end a plan's targets are judged on, with their words: the clients' (through the
    gateways, queue wait included) where the gateways gave them, else the replicas' own."""
    ttft = ("p95 TTFT", f.ttft_p95_seconds)
    e2e = ("p95 end-to-end", f.e2e_p95_seconds)
    if client is not None and client.client_ttft_p95_seconds is not None:
        ttft = ("client p95 TTFT", client.client_ttft_p95_seconds)
    if client is not None and client.client_e2e_p95_seconds is not None:
        e2e = ("client p95 end-to-end", client.client_e2e_p95_seconds)
    return ttft, e2e


def _above(value: float, limit: float, clear_share: float) -> tuple[bool, bool]:
    """(raise, clear) for a load compared with a capacity: raise above it, clear below its clear share."""
    if limit <= 0:
        return value > 0, value <= 0
    return value > limit, value < clear_share * limit


def _load(f: Figures, replicas: tuple[Figures, ...], plan: PlanNow | None, t: Thresholds) -> list[Reading]:
    rps = f.requests_per_second
    if plan is None or rps is None:
        return []
    over, under = _above(rps, plan.planned_capacity_rps, t.load_clear_share)
    serving = sum(1 for r in replicas if r.state in SERVING)
    kept = max(serving - plan.redundancy, 0)
    carried = kept * plan.rps_per_replica
    risk, safe = _above(rps, carried, t.load_clear_share)
    return [
        Reading(
            "above_plan",
            FLEET_TOTAL,
            raise_=over,
            clear=under,
            severity="critical",
            why=f"{rps:.2f} req/s against {plan.planned_capacity_rps:.2f} planned for this hour "
            f"({plan.replicas_scheduled} x {plan.rps_per_replica:.2f}{' estimated' if plan.capacity_estimated else ''})",
            todo=f"Apply {_overflow(plan)}; add replicas if it lasts, re-plan if it recurs {_see('Above the plan')}.",
            raise_after=t.min_duration_seconds,
        ),
        Reading(
            "n_plus_1_at_risk",
            FLEET_TOTAL,
            raise_=risk,
            clear=safe,
            severity="warning",
            why=f"{rps:.2f} req/s; with {plan.redundancy} of {serving} serving replicas lost the fleet carries "
            f"{carried:.2f} ({kept} x {plan.rps_per_replica:.2f})",
            todo="Losing one replica now would overload the rest: add a replica to restore the spare "
            f"{_see('Keeping N+1')}.",
            raise_after=t.min_duration_seconds,
        ),
    ]


def _workload_drift(f: Figures, plan: PlanNow | None, t: Thresholds) -> list[Reading]:
    if plan is None:
        return []
    checks = (
        ("input", f.mean_input_tokens, plan.input_tokens_mean),
        ("output", f.mean_output_tokens, plan.output_tokens_mean),
    )
    readings = []
    for key, observed, planned in checks:
        if observed is None or not planned:
            continue
        off = abs(observed / planned - 1)
        readings.append(
            Reading(
                f"workload_drift_{key}",
                FLEET_TOTAL,
                raise_=off >= t.workload_raise,
                clear=off < t.workload_clear,
                severity="warning",
                why=f"mean {key} {observed:.0f} tokens against {planned:.0f} planned ({_pct(off)} off)",
                todo="The plan's token means no longer hold: re-run `capcon plan` with the observed ones; cap "
                f"context per request if long prompts dominate {_see('Workload drift')}.",
                raise_after=t.workload_min_duration_seconds,
            )
        )
    return readings


def _schedule(replicas: tuple[Figures, ...], plan: PlanNow | None, t: Thresholds) -> list[Reading]:
    if plan is None:
        return []
    up = sum(1 for r in replicas if r.state in SERVING)
    lead_minutes = plan.lead_time_seconds / 60
    return [
        Reading(
            "schedule_lag",
            FLEET_TOTAL,
            raise_=up < plan.replicas_scheduled,
            clear=up >= plan.replicas_scheduled,
            severity="warning",
            why=f"{up} replicas serving, {plan.replicas_scheduled} scheduled for {plan.hour:02d}:00",
            todo=f"Start replicas now: a new one needs about {lead_minutes:.0f} min to load "
            f"{_see('Scaling by the schedule')}.",
            raise_after=t.min_duration_seconds,
        ),
        Reading(
            "scale_up_due",
            FLEET_TOTAL,
            raise_=plan.replicas_scheduled_soon > max(up, plan.replicas_scheduled),
            clear=plan.replicas_scheduled_soon <= max(up, plan.replicas_scheduled),
            severity="info",
            why=f"the schedule asks for {plan.replicas_scheduled_soon} replicas within {lead_minutes:.0f} min; "
            f"{up} serving",
            todo="Start the scheduled replicas now, ahead of the ramp; do not wait for queues "
            f"{_see('Scaling by the schedule')}.",
            raise_after=0.0,
        ),
    ]


def switch_to(plan: PlanNow) -> str:
    """The overflow mode to switch to ahead of saturation: the plan's (bounded_queue unless it names another)."""
    return plan.overflow_mode or "bounded_queue"


def _saturation_ahead(inputs: FlagInputs, t: Thresholds) -> Reading | None:
    """The forecast passes the replicas up sooner than a new replica can start: only the overflow policy is in time.

    Raised when saturation is ahead (more than 0 minutes away: a fleet over capacity now has its saturation
    and load flags) and sooner than the lead time; an active flag stays while the fleet is over capacity, and
    clears once saturation is `ahead_clear_lead_times` lead times away or not in sight.
    """
    plan, ahead = inputs.plan, inputs.forecast
    if plan is None or ahead is None or ahead.capacity_rps is None or ahead.lead_time_minutes is None:
        return None
    if ahead.rps[0] is None:
        return None  # no forecast at all: nothing to say
    minutes, lead = ahead.minutes_to_saturation, ahead.lead_time_minutes
    if minutes is None:
        within = max(ahead.horizon_minutes, default=0)
        why = f"not heading past the {ahead.capacity_rps:.2f} req/s the replicas up carry within {within} min"
    else:
        why = (
            f"forecast passes the {ahead.capacity_rps:.2f} req/s the replicas up carry in {minutes_words(minutes)}; "
            f"a new replica takes {minutes_words(lead)} to serve"
        )
    mode = switch_to(plan)
    return Reading(
        "saturation_ahead",
        FLEET_TOTAL,
        raise_=minutes is not None and 0 < minutes < lead,
        clear=minutes is None or minutes >= t.ahead_clear_lead_times * lead,
        severity="warning",
        why=why,
        todo=f"Saturation comes before a new replica can serve: switch the {OVERFLOW_ADVICE} to {mode} now, "
        f"then add replicas {_see('Above the plan')}.",
        raise_after=t.min_duration_seconds,
    )


def _source(figures: FleetFigures) -> Reading:
    return Reading(
        "source_error",
        FLEET_TOTAL,
        raise_=bool(figures.source_error),
        clear=not figures.source_error,
        severity="critical",
        why=figures.source_error or "",
        todo="The figures cannot be read: check the scrape targets or the Prometheus server.",
        raise_after=0.0,
    )


def readings(inputs: FlagInputs, t: Thresholds, tracked: Collection[str] | None = None) -> list[Reading]:
    """Every rule's reading; with `tracked` (the ids that have a tracker), per-replica readings that
    neither raise nor are tracked are left out: they would step to nothing."""
    figures, plan, fleet = inputs.figures, inputs.plan, inputs.figures.fleet
    found: list[Reading] = [_source(figures)]
    # The replicas with a down, stale or restarted tracker: a replica that is up and has none gets no such
    # reading (`_needed`), found without making its three ids (30,000 strings a refresh at 10,000).
    state_tracked = None if tracked is None else {i.partition(":")[2] for i in tracked if i.startswith(_STATE_KINDS)}
    todo = _saturation_todo(plan)
    gpus = inputs.gpus or {}
    for replica in figures.replicas:
        if state_tracked is None or replica.state in _STATE_READ or replica.name in state_tracked:
            found += _replica_state(replica, t, tracked)
        saturation = _saturation(replica, t, plan, tracked, todo, gpus.get(replica.name))
        if saturation is not None:
            found.append(saturation)
    drift = _latency_drift(fleet, inputs, t)
    if drift is not None:
        found.append(drift)
    found += _slo_breach(fleet, plan, t, inputs.client)
    found += _load(fleet, figures.replicas, plan, t)
    found += _workload_drift(fleet, plan, t)
    found += _schedule(figures.replicas, plan, t)
    ahead = _saturation_ahead(inputs, t)
    if ahead is not None:
        found.append(ahead)
    return found


# --- the state machine -----------------------------------------------------


def _step(tracker: Tracker | None, reading: Reading | None, now: float) -> Tracker | None:
    if reading is None:
        return None  # the subject is gone, or its figures are unknown: nothing to say
    if reading.raise_:
        pending = tracker.pending_since if tracker else now
        active = tracker.active_since if tracker else None
        if active is None and now - pending >= reading.raise_after:
            active = now
        return Tracker(
            reading.kind,
            reading.subject,
            reading.severity,
            reading.why,
            reading.todo,
            pending,
            active,
            now,
            reading.raise_after,
        )
    if tracker is None or tracker.active_since is None:
        return None  # a pending flag whose condition broke starts over
    if reading.clear:
        held = tracker.last_raised is not None and now - tracker.last_raised < reading.hold
        return tracker if held else None
    return replace(tracker, why=reading.why)  # between the thresholds: an active flag stays


def evaluate(state: FlagState, inputs: FlagInputs, now: float, thresholds: Thresholds | None = None) -> FlagState:
    """The next flag state: pure, so replay and tests get exactly what the console showed."""
    found = {r.id: r for r in readings(inputs, thresholds or Thresholds(), state.trackers)}
    trackers: dict[str, Tracker] = {}
    for flag_id in list(state.trackers) + [i for i in found if i not in state.trackers]:
        stepped = _step(state.trackers.get(flag_id), found.get(flag_id), now)
        if stepped is not None:
            trackers[flag_id] = stepped
    return FlagState(trackers)
