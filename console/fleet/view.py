"""FleetView: the immutable picture of one fleet that the console renders.

Built from the latest figures, what the plan expects now, and the previous
view (its trends and flag state), so one call per poll gives everything a
screen needs:

    view = advance(previous, name, figures, plan_now, now)

Units stay SI here; formatting happens at the edge.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from console.ahead.forecast import TREND_WINDOW_SECONDS, Forecast, Profile
from console.ahead.forecast import forecast as forecast_arrivals
from console.fleet import judge, slo
from console.fleet.columns import CONSOLE_BY_KEY, CONSOLE_COLUMNS, CONSOLE_NAMES, CellValue, name_form
from console.fleet.flags import Flag, FlagInputs, FlagState, Pending, Severity, Thresholds, evaluate
from console.fleet.gpu_view import FleetGpu, GpuPages, fleet_gpu
from console.fleet.gpus import ReplicaGpu
from console.fleet.plan_now import PlanNow
from console.fleet.trends import TrendPoint, Trends
from console.metrics.figures import FAILED, FLEET_TOTAL, SERVING, Figures, FleetFigures
from console.metrics.gateway import GatewayFigures

Mark = Literal["critical", "warning", "info", "pending", "over", "ok", "unknown"]


@dataclass(frozen=True)
class Row:
    key: str  # replica name, or FLEET_TOTAL
    figures: Figures
    severity: Severity | None  # the worst active flag on this replica (on the total row: in the fleet)
    pending: Severity | None = None  # the worst condition that holds but is inside its minimum duration
    over: tuple[tuple[str, judge.CellSeverity], ...] = ()  # (column, severity) of cells over their limit now
    # The replica's GPU counters (on the total row: the fleet's means); None when the fleet has no GPU pages.
    gpu: ReplicaGpu | None = None

    def value(self, column: str) -> CellValue:
        return CONSOLE_BY_KEY[column].read(self.figures, self.gpu)

    @property
    def mark(self) -> Mark:
        """What the row's badge says: never "ok" while a cell is over its limit or a condition is pending."""
        if self.severity in ("critical", "warning"):
            return self.severity
        if self.figures.state in FAILED:
            return "critical"  # down before its flag's minimum duration: still shown as bad
        if self.pending is not None:
            return "pending"
        if self.over:
            return "over"
        if self.severity == "info":
            return "info"
        return "ok" if self.figures.state in SERVING else "unknown"


def sort_rows(rows: tuple[Row, ...], column: str, descending: bool = False) -> tuple[Row, ...]:
    """Rows sorted on one column; unknown values always go last, whatever the direction."""
    known = [r for r in rows if r.value(column) is not None]
    unknown = [r for r in rows if r.value(column) is None]
    known.sort(key=lambda r: (r.value(column), r.key), reverse=descending)
    return tuple(known + sorted(unknown, key=lambda r: r.key))


# A column is named as the header shows it (`req/s`, `out t/s`, `TTFT95`) or by its key: letters, digits, `/` and
# spaces; text with other characters before an operator (a URL with `?a=b`) is a plain search.
_FILTER = re.compile(
    r"^\s*(?P<column>[a-z0-9][a-z0-9/ ]*?)\s*(?P<op>>=|<=|!=|=|>|<|~)\s*(?P<value>.+?)\s*$", re.IGNORECASE
)
_OPS = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "=": operator.eq, "!=": operator.ne}


class FilterError(ValueError):
    """A filter the console cannot read; the message says what was expected."""


@dataclass(frozen=True)
class RowFilter:
    text: str = ""

    def matches(self, row: Row) -> bool:
        return _compile(self.text)(row)


def _compile(text: str) -> Callable[[Row], bool]:
    if not text.strip():
        return lambda row: True
    match = _FILTER.match(text)
    if match is None:
        needle = text.strip().lower()
        return lambda row: (
            needle in row.figures.name.lower() or needle in row.figures.state or needle in row.figures.url.lower()
        )
    named, op, raw = match["column"], match["op"], match["value"]
    column = CONSOLE_NAMES.get(name_form(named))
    if column is None:
        raise FilterError(f"unknown column {named!r}: {accepted_names()}")
    spec = CONSOLE_BY_KEY[column]
    if spec.is_text or op == "~":
        if op not in ("=", "!=", "~"):
            raise FilterError(f"{named} holds text: use =, != or ~ (contains), not {op}")
        needle = raw.lower()
        if op == "~":
            return lambda row: needle in str(row.value(column) or "").lower()
        compare = _OPS[op]
        return lambda row: compare(str(row.value(column) or "").lower(), needle)
    try:
        number = float(raw.rstrip("%")) / (100 if raw.endswith("%") else 1)
    except ValueError:
        raise FilterError(f"{named} {op} {raw!r}: expected a number (KV and prefix as 0.9 or 90%)") from None
    compare = _OPS[op]
    # An unknown value satisfies no comparison: it is not 0.
    return lambda row: (v := row.value(column)) is not None and compare(v, number)


def accepted_names() -> str:
    """The column names a filter takes, in words: the header's titles, then the older keys."""
    titles = [c.console.title for c in CONSOLE_COLUMNS if c.console]
    keys = [c.key for c in CONSOLE_COLUMNS if c.console and name_form(c.console.title) != c.key]
    return f"expected a column title as the header shows it ({', '.join(titles)}; any case) or {', '.join(keys)}"


def parse_filter(text: str) -> RowFilter:
    """A filter such as `kv>0.8`, `KV>=90%`, `TTFT95>0.3`, `out t/s<100`, `state=down`, `name~gpu-3` or plain
    text; a column by its title in the header or its key, in any case; raises FilterError."""
    _compile(text)
    return RowFilter(text)


# --- plan beside actual ----------------------------------------------------


Status = Literal["ok", "warning", "critical", "unknown"]


@dataclass(frozen=True)
class Comparison:
    label: str
    planned: float | None
    actual: float | None
    unit: Literal["rps", "share", "count", "bytes", "seconds", "tokens", "dollars_per_million"]
    status: Status
    note: str = ""


def _status_at_most(actual: float | None, limit: float | None, warn_share: float = 0.8) -> Status:
    if actual is None or limit is None:
        return "unknown"
    if actual > limit:
        return "critical"
    return "warning" if actual >= warn_share * limit else "ok"


def _serving(figures: FleetFigures) -> int:
    return sum(1 for r in figures.replicas if r.state in SERVING)


def _fullest_engine_tokens(replica: Figures) -> float | None:
    """KV tokens in use on the replica's fullest engine: max over engines of usage x that engine's cache.

    An engine without its own capacity (older sources, or its cache_config_info lacks
    the figure) gets an even share of the replica's total, else the mean of the engines
    that reported one: the engines of a data-parallel server share one cache config.
    """
    usage = dict(replica.kv_usage_by_engine)
    if not usage and replica.kv_usage is not None:
        usage = {"0": replica.kv_usage}
    by_engine = replica.kv_capacity_tokens_by_engine
    engines = max(len(usage), len(by_engine), 1)
    if replica.kv_capacity_tokens is not None:
        even_share: float | None = replica.kv_capacity_tokens / engines
    else:
        even_share = sum(by_engine.values()) / len(by_engine) if by_engine else None
    used = [
        share * capacity
        for engine, share in usage.items()
        if (capacity := by_engine.get(engine, even_share)) is not None
    ]
    return max(used) if used else None


def _kv_used_bytes(figures: FleetFigures, plan: PlanNow) -> float | None:
    """KV in use on the fullest engine of any replica, in bytes: occupancy x cache tokens x bytes per token.

    The plan's replica is one model copy (one engine, tensor parallel over its GPUs)
    with its own KV budget; each engine of a data-parallel server is such a copy, so
    the budget compares with one engine's cache, never the server's total.
    """
    if plan.kv_bytes_per_token is None:
        return None
    used = [tokens for r in figures.replicas if (tokens := _fullest_engine_tokens(r)) is not None]
    return max(used) * plan.kv_bytes_per_token if used else None


def cost_per_million_tokens(figures: FleetFigures, plan: PlanNow | None) -> float | None:
    """Fleet cost per hour (every replica listed is paid for) over millions of tokens generated per hour."""
    gen = figures.fleet.generation_tokens_per_second
    if plan is None or plan.gpus_per_replica is None or not gen:
        return None
    cost_per_hour = len(figures.replicas) * plan.gpus_per_replica * plan.gpu_price_per_hour
    return cost_per_hour / (gen * 3600 / 1e6)


def compare(figures: FleetFigures, plan: PlanNow, thresholds: Thresholds | None = None) -> tuple[Comparison, ...]:
    drift = (thresholds or Thresholds()).workload_raise  # where the workload drift flag rises
    fleet = figures.fleet
    rps = fleet.requests_per_second
    serving = _serving(figures)
    carried = max(serving - plan.redundancy, 0) * plan.rps_per_replica
    headroom = None if rps is None or plan.planned_capacity_rps <= 0 else 1 - rps / plan.planned_capacity_rps
    # An estimated per-replica capacity (no measurement in the plan) reads ~ wherever it counts.
    per = f"{'~' if plan.capacity_estimated else ''}{plan.rps_per_replica:g} req/s"
    kv_used = _kv_used_bytes(figures, plan)
    rows = [
        # Two capacities, named apart: the replicas the schedule has for this hour, and the replicas up now
        # less the spare N+1 keeps (with more up than scheduled the second reads larger).
        Comparison(
            "load/sched cap",
            plan.planned_capacity_rps,
            rps,
            "rps",
            _status_at_most(rps, plan.planned_capacity_rps),
            f"{plan.replicas_scheduled} x {per} scheduled at {plan.hour:02d}:00"
            + (" (capacity estimated, not measured)" if plan.capacity_estimated else ""),
        ),
        Comparison(
            "headroom",
            None,
            headroom,
            "share",
            "unknown" if headroom is None else ("critical" if headroom < 0 else "warning" if headroom < 0.2 else "ok"),
        ),
        Comparison(
            "replicas up",
            plan.replicas_scheduled,
            serving,
            "count",
            "warning" if serving < plan.replicas_scheduled else "ok",
            f"{plan.replicas_scheduled_soon} due within lead time"
            if plan.replicas_scheduled_soon > plan.replicas_scheduled
            else "",
        ),
        Comparison(
            f"load/up-{plan.redundancy} cap",
            carried,
            rps,
            "rps",
            "unknown" if rps is None else ("warning" if rps > carried else "ok"),
            f"{max(serving - plan.redundancy, 0)} x {per}: the {serving} up, "
            f"{plan.redundancy} lost (N+{plan.redundancy})",
        ),
        Comparison(
            "KV fullest",
            plan.kv_budget_bytes,
            kv_used,
            "bytes",
            _status_at_most(kv_used, plan.kv_budget_bytes, 0.9),
            "fullest engine's KV in use vs plan's budget per replica (one engine)",
        ),
        *_latency_comparisons(fleet, plan),
        Comparison(
            "mean input",
            plan.input_tokens_mean,
            fleet.mean_input_tokens,
            "tokens",
            _drift_status(fleet.mean_input_tokens, plan.input_tokens_mean, drift),
        ),
        Comparison(
            "mean output",
            plan.output_tokens_mean,
            fleet.mean_output_tokens,
            "tokens",
            _drift_status(fleet.mean_output_tokens, plan.output_tokens_mean, drift),
        ),
        Comparison(
            "$ per M tokens",
            None,
            cost_per_million_tokens(figures, plan),
            "dollars_per_million",
            "unknown" if cost_per_million_tokens(figures, plan) is None else "ok",
            "now",
        ),
    ]
    return tuple(rows)


def _latency_comparisons(fleet: Figures, plan: PlanNow) -> list[Comparison]:
    """Each p95 target beside the replicas' p95, judged on their buckets (console.fleet.slo): critical only where
    missed, a warning with the reason where the buckets cannot tell; the share within the target as the note."""
    found = []
    for label, key, value in (
        ("TTFT p95", "ttft", fleet.ttft_p95_seconds),
        ("TPOT p95", "tpot", fleet.tpot_p95_seconds),
        ("E2E p95", "e2e", fleet.e2e_p95_seconds),
    ):
        check = next((c for c in slo.checks(fleet, plan) if c.key == key), None)
        target = check.target if check is not None else None
        status = _status_at_most(value, target)
        note = ""
        if check is not None and check.judgement is not None:
            verdict = check.verdict
            status = "critical" if verdict == "missed" else "warning" if verdict == "undetermined" else status
            status = "ok" if status == "critical" and verdict != "missed" else status
            note = slo.attainment_words(check) + (
                ": undetermined, target inside a bucket" if verdict == "undetermined" else ""
            )
        found.append(Comparison(label, target, value, "seconds", status, note))
    return found


def _drift_status(observed: float | None, planned: float | None, raise_share: float) -> Status:
    if observed is None or not planned:
        return "unknown"
    return "warning" if abs(observed / planned - 1) >= raise_share else "ok"


# --- the view --------------------------------------------------------------


@dataclass(frozen=True)
class FleetView:
    name: str
    figures: FleetFigures
    plan: PlanNow | None
    now: float
    rows: tuple[Row, ...]  # one per replica, in the source's order
    total: Row
    comparisons: tuple[Comparison, ...]
    trends: Trends
    flag_state: FlagState = field(default_factory=FlagState)
    forecast: Forecast | None = None  # arrivals ahead and when they pass the replicas up (console.ahead)
    # The gateways in front of the fleet over the same window, as their clients saw them; None without one.
    gateway: GatewayFigures | None = None
    # The GPUs' own counters (dcgm-exporter) read in the same step; None when the fleet has no GPU pages.
    gpu: FleetGpu | None = None

    @property
    def client(self) -> GatewayFigures | None:
        """The gateways where any answered: what the latency targets are judged on, as the flags judge them."""
        return self.gateway if self.gateway is not None and self.gateway.answering else None

    @property
    def slo_checks(self) -> tuple[slo.TargetCheck, ...]:
        """Each latency target of the plan judged on the window's buckets, as the SLO flags judged it."""
        return slo.checks(self.figures.fleet, self.plan, self.client)

    @property
    def flags(self) -> tuple[Flag, ...]:
        return self.flag_state.active

    @property
    def pending(self) -> tuple[Pending, ...]:
        """Rule conditions that hold but are still inside their minimum duration."""
        return self.flag_state.pending

    @property
    def data_age_seconds(self) -> float:
        return max(self.now - self.figures.at, 0.0)

    @property
    def replicas_serving(self) -> int:
        return _serving(self.figures)

    @property
    def headroom(self) -> float | None:
        rps = self.figures.fleet.requests_per_second
        if self.plan is None or rps is None or self.plan.planned_capacity_rps <= 0:
            return None
        return 1 - rps / self.plan.planned_capacity_rps

    def row(self, key: str) -> Row | None:
        if key == FLEET_TOTAL:
            return self.total
        return self._rows_by_key.get(key)

    @cached_property
    def _rows_by_key(self) -> dict[str, Row]:
        # Built once: the recorder looks up a row per flag change, 10,000 of them when a fleet peaks.
        found: dict[str, Row] = {}
        for row in self.rows:
            found.setdefault(row.key, row)  # the first of a repeated name, as a scan would find
        return found


def _trend_point(figures: FleetFigures, plan: PlanNow | None) -> TrendPoint:
    fleet = figures.fleet
    kv = [r.kv_usage for r in figures.replicas if r.kv_usage is not None]
    return TrendPoint(
        at=figures.at,
        load_rps=fleet.requests_per_second,
        capacity_rps=plan.planned_capacity_rps if plan else None,
        waiting=fleet.waiting,
        kv_usage=max(kv) if kv else fleet.kv_usage,
        ttft_p95_seconds=fleet.ttft_p95_seconds,
        tpot_p95_seconds=fleet.tpot_p95_seconds,
        generation_tokens_per_second=fleet.generation_tokens_per_second,
    )


def fleet_forecast(
    trends: Trends, figures: FleetFigures, plan: PlanNow | None, now: float, profile: Profile | None = None
) -> Forecast:
    """Arrivals ahead from the trend ring's request rates, blended with the plan's `profile` (without one,
    the plan's rps for this hour, flat); saturation against the replicas up x the plan's capacity per replica."""
    if profile is None and plan is not None:
        profile = Profile(((0.0, plan.planned_load_rps),))
    oldest = now - TREND_WINDOW_SECONDS
    return forecast_arrivals(
        [(p.at, p.load_rps) for p in trends.points if p.at >= oldest],
        now,
        profile if plan is not None else None,
        capacity_rps=_serving(figures) * plan.rps_per_replica if plan is not None else None,
        lead_time_minutes=plan.lead_time_seconds / 60.0 if plan is not None else None,
    )


def advance(
    previous: FleetView | None,
    name: str,
    figures: FleetFigures,
    plan: PlanNow | None,
    now: float,
    thresholds: Thresholds | None = None,
    trend_span_seconds: float = 600.0,
    profile: Profile | None = None,
    gateway: GatewayFigures | None = None,
    gpus: GpuPages | None = None,
) -> FleetView:
    """The next view: trends and flags carried from `previous`, everything else from these figures.

    `gateway`: the fleet's gateways over the same window; their clients' TTFT and end-to-end p95 are what the
    plan's targets are judged on (console.fleet.flags.client_or_replicas).

    `profile`: what the plan expects over the minutes ahead (console.ahead.profile.plan_profile); without
    it the forecast leans on the plan's rps for this hour alone.

    `gpus`: the fleet's dcgm-exporter pages read in the same step; each replica is paired with its GPUs
    (console.fleet.gpu_view) and the saturation flag says which GPU figure led to it.
    """
    thresholds = thresholds or Thresholds()
    gpu = fleet_gpu(figures.replicas, gpus, plan.gpus_per_replica if plan else None) if gpus is not None else None
    trends = previous.trends if previous else Trends(span_seconds=trend_span_seconds)
    trends_now = trends.add(_trend_point(figures, plan))
    ahead = fleet_forecast(trends_now, figures, plan, now, profile)
    looked_back = figures.at - thresholds.drift_lookback_seconds
    inputs = FlagInputs(
        figures=figures,
        plan=plan,
        tpot_p95_before=trends.value_at("tpot_p95_seconds", looked_back),
        generation_before=trends.value_at("generation_tokens_per_second", looked_back),
        forecast=ahead,
        client=gateway if gateway is not None and gateway.answering else None,
        gpus=gpu.by_replica if gpu is not None else None,
    )
    flag_state = evaluate(previous.flag_state if previous else FlagState(), inputs, now, thresholds)
    active, pending = flag_state.active, flag_state.pending
    worst_active, worst_pending = flag_state.worst_active, flag_state.worst_pending
    judged = judge.limits(plan, thresholds)
    rows = tuple(
        Row(
            r.name,
            r,
            worst_active.get(r.name),
            worst_pending.get(r.name),
            judge.over(r, judged),
            gpu.replica(r.name) if gpu is not None else None,
        )
        for r in figures.replicas
    )
    # The total row speaks for the whole fleet: the worst flag or pending condition anywhere in it.
    total = Row(
        FLEET_TOTAL,
        figures.fleet,
        active[0].severity if active else None,
        pending[0].severity if pending else None,
        judge.over(figures.fleet, judged),
        gpu.fleet if gpu is not None else None,
    )
    return FleetView(
        name=name,
        figures=figures,
        plan=plan,
        now=now,
        rows=rows,
        total=total,
        comparisons=compare(figures, plan, thresholds) if plan else (),
        trends=trends_now,
        flag_state=flag_state,
        forecast=ahead,
        gateway=gateway,
        gpu=gpu,
    )
