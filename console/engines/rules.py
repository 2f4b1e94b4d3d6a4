"""A Prometheus rule file from a plan: the console's figures as recording rules, its flags as alerts.

Pure: `rule_file` returns the document as dicts and lists (the command dumps it as YAML).
One group per plan, evaluated in order, so each alert reads the figures recorded in the
same evaluation:

- figures: per-replica rates, waiting, running and KV usage, and the fleet's rates and
  windowed quantiles (`histogram_quantile` over bucket rates summed by `le`), written with
  the PromQL of the `prometheus` source (console.metrics.promql): every vLLM name in both
  spellings, joined with `or`, under the plan's selector;
- the plan: its clock's UTC offset, the hour of the week on that clock, the replicas the
  schedule has serving in that hour and their capacity. PromQL only knows UTC, so the
  offset is a sum over the zone's transitions in the years covered (`first_year` onwards):
  one series the rules compute, rather than 168 rules, so the schedule is one expression
  of its runs of equal replicas;
- each latency target's share of requests surely over it (over vLLM's bucket bound at or above the target) and
  the share that met it (exact on a bound, else a range: at most over the bound above, at least `:least`);
- alerts for the console's flags (console.fleet.flags): saturation, SLO breaches (on the share surely over the
  target, so never where the buckets cannot tell; a `bucket` annotation says so when a target lies inside one), above
  the plan, N+1 at risk, replica down, behind the schedule. `for:` is each flag's minimum
  duration; the clear thresholds (hysteresis) hold through the `ALERTS` series: once
  firing, an alert stays while its value sits between the clear and the raise threshold,
  as an active flag does. The `do` annotation is the flag's own text, read from the flags
  module; `why` says what the console says, rendered by Prometheus' templates (tests run
  both on the same figures and compare the words).

Not mirrored: latency drift and workload drift (they compare with the console's trends),
stale and restarted replicas, and the source error (Prometheus' own alerts cover those).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from console.errors import UserError
from console.fleet import slo
from console.fleet.flags import FlagInputs, Thresholds, readings
from console.fleet.plan_now import A_MONDAY, plan_now
from console.metrics.attainment import allowed_share
from console.metrics.figures import FLEET_TOTAL, Figures, FleetFigures, ReplicaState
from console.metrics.promql import duration, instant_of, rate_of, selector_matchers, series
from console.metrics.vllm import BUCKET_BOUNDS, COUNTERS, GAUGES, HISTOGRAMS
from console.metrics.window import QUANTILE_FIGURES
from console.plan.model import Plan
from console.plan.schedule import schedule

PREFIX = "capcon"
PLAN_LABEL = "capcon_plan"
MONDAY_UNIX = -3 * 86400  # 1969-12-29 00:00 UTC, the Monday before the epoch: hours of the week stay >= 0
WEEK_HOURS = 7 * 24
YEARS_COVERED = 10

# Alert name -> the console's flag kind it mirrors (the subject is `instance`, or the fleet).
ALERT_FLAGS = {
    "CapconSaturation": "saturation",
    "CapconSloBreachTtft": "slo_breach_ttft",
    "CapconSloBreachTpot": "slo_breach_tpot",
    "CapconSloBreachE2e": "slo_breach_e2e",
    "CapconAbovePlan": "above_plan",
    "CapconNPlus1AtRisk": "n_plus_1_at_risk",
    "CapconReplicaDown": "replica_down",
    "CapconScheduleLag": "schedule_lag",
}


@dataclass(frozen=True)
class RuleOptions:
    selector: str  # PromQL label matchers of the fleet's vLLM series
    window_seconds: float  # what rates and quantiles cover (the console's default is 60 s)
    first_year: int  # the plan's clock is exact from January 1 of this year ...
    years: int = YEARS_COVERED  # ... for this many years


def record(name: str) -> str:
    return f"{PREFIX}:{name}"


def promql_string(text: str) -> str:
    """A PromQL string literal: JSON's escapes for quotes and backslashes are Go's, which PromQL reads; other
    characters stay as they are (an escaped astral character would be a pair of surrogates, which Go refuses)."""
    return json.dumps(text, ensure_ascii=False)


def template_literal(text: str) -> str:
    """`text` as an alert label's value, which Prometheus expands as a template: a name holding `{{` is
    written as a template that prints it, so it is the label's value as is."""
    return "{{ " + promql_string(text) + " }}" if "{{" in text else text


# --- the plan's clock -------------------------------------------------------


def offset_transitions(zone: str, first_year: int, years: int) -> tuple[int, list[tuple[int, int]]]:
    """(UTC offset in seconds at the start, [(unix time, offset from then on), ...]) over the years covered."""
    info = ZoneInfo(zone)
    start = datetime(first_year, 1, 1, tzinfo=UTC)
    end = datetime(first_year + years, 1, 1, tzinfo=UTC)

    def offset(at: datetime) -> int:
        delta = at.astimezone(info).utcoffset()
        return int(delta.total_seconds()) if delta is not None else 0

    first = offset(start)
    changes: list[tuple[int, int]] = []
    current, day = first, start
    while day < end:
        following = day + timedelta(days=1)
        if offset(following) != current:
            low, high = int(day.timestamp()), int(following.timestamp())
            while high - low > 1:  # the exact second the offset changes
                middle = (low + high) // 2
                if offset(datetime.fromtimestamp(middle, UTC)) == current:
                    low = middle
                else:
                    high = middle
            current = offset(datetime.fromtimestamp(high, UTC))
            changes.append((high, current))
        day = following
    return first, changes


def offset_expression(zone: str, first_year: int, years: int) -> str:
    """A scalar PromQL expression: the zone's UTC offset in seconds at the evaluation time."""
    first, changes = offset_transitions(zone, first_year, years)
    terms = [str(first)]
    previous = first
    for at, value in changes:
        terms.append(f"{value - previous} * (time() >= bool {at})")
        previous = value
    return " + ".join(terms)


def _runs(table: tuple[tuple[int, ...], ...]) -> list[tuple[int, int, int]]:
    """[(first hour of the week, hour after the last, replicas), ...]: runs of equal replicas, Monday 00:00 first."""
    flat = [table[d][h] for d in range(7) for h in range(24)]
    found: list[tuple[int, int, int]] = []
    start = 0
    for hour in range(1, WEEK_HOURS + 1):
        if hour == WEEK_HOURS or flat[hour] != flat[start]:
            found.append((start, hour, flat[start]))
            start = hour
    return found


# --- the console's figures --------------------------------------------------


def _figures(matchers: str, window: str, plan_matcher: str) -> list[dict]:
    def rule(name: str, expr: str) -> dict:
        return {"record": record(name), "expr": expr, "labels": {PLAN_LABEL: plan_matcher}}

    rates = {
        "requests": COUNTERS["requests"],
        "prompt_tokens": COUNTERS["prompt_tokens"],
        "generation_tokens": COUNTERS["generation_tokens"],
        "preemptions": COUNTERS["preemptions"],
    }
    rules = [
        rule("replica_up", f"max by (instance) ({series('up', matchers)})"),
    ]
    for name, names in rates.items():
        rules.append(rule(f"replica_{name}:rate", f"sum by (instance) ({rate_of(names, matchers, window)})"))
    rules += [
        rule("replica_waiting", f"sum by (instance) ({instant_of(GAUGES['waiting'], matchers)})"),
        rule("replica_running", f"sum by (instance) ({instant_of(GAUGES['running'], matchers)})"),
        rule("replica_kv_usage:max", f"max by (instance) ({instant_of(GAUGES['kv_usage'], matchers)})"),
        rule("fleet_replicas_serving", f"count({series('up', matchers)} == 1) or vector(0)"),
    ]
    for name, names in rates.items():
        rules.append(rule(f"fleet_{name}:rate", f"sum({rate_of(names, matchers, window)})"))
    rules.append(rule("fleet_waiting", f"sum({instant_of(GAUGES['waiting'], matchers)})"))
    for field_name, canonical, q in QUANTILE_FIGURES:
        buckets = rate_of(HISTOGRAMS[canonical], matchers, window, "_bucket")
        figure = field_name.removesuffix("_seconds")  # ttft_p95 -> capcon:fleet_ttft_p95:seconds
        rules.append(rule(f"fleet_{figure}:seconds", f"histogram_quantile({q:g}, sum by (le) ({buckets}))"))
    return rules


def _plan_rules(plan: Plan, options: RuleOptions, plan_matcher: str) -> list[dict]:
    labels = {PLAN_LABEL: plan_matcher}
    own = f"{{{PLAN_LABEL}={promql_string(plan_matcher)}}}"
    offset = offset_expression(plan.timezone, options.first_year, options.years)
    hour = record("plan_hour_of_week") + own
    pieces = [f"({hour} >= {a} < {b}) * 0 + {replicas}" for a, b, replicas in _runs(schedule(plan).replicas_by_hour)]
    return [
        {"record": record("plan_utc_offset_seconds"), "expr": f"vector({offset})", "labels": labels},
        {
            "record": record("plan_hour_of_week"),
            "expr": f"floor((vector(time()) + scalar({record('plan_utc_offset_seconds')}{own}) + {-MONDAY_UNIX}) "
            f"/ 3600) % {WEEK_HOURS}",
            "labels": labels,
        },
        {"record": record("plan_replicas_scheduled"), "expr": " or ".join(pieces), "labels": labels},
        {
            "record": record("plan_capacity_rps"),
            "expr": f"{record('plan_replicas_scheduled')}{own} * {plan.capacity.rps_per_replica!r}",
            "labels": labels,
        },
        {
            "record": record("plan_rules_valid_until"),
            "expr": f"vector({int(datetime(options.first_year + options.years, 1, 1, tzinfo=UTC).timestamp())})",
            "labels": labels,
        },
    ]


# --- the console's flags ----------------------------------------------------


def target_bounds(key: str, target: float) -> tuple[float, float]:
    """vLLM's bucket bounds either side of a target (both the target when it is one): 0 below the first, +Inf past
    the last."""
    bounds = BUCKET_BOUNDS[key]
    lo = max((b for b in bounds if b <= target), default=0.0)
    hi = min((b for b in bounds if b >= target), default=math.inf)
    return lo, hi


def le_matcher(bound: float) -> str:
    """A bucket's `le` as any exporter writes it: 0.075, 1 or 1.0, 2.5e+01 never (vLLM writes repr)."""
    if math.isinf(bound):
        return 'le="+Inf"'
    forms = sorted({repr(bound), f"{bound:g}", *([str(int(bound))] if bound == int(bound) else [])})
    return "le=~" + promql_string("|".join(re.escape(f) for f in forms))


def _share_over(key: str, bound: float, matchers: str, window: str) -> str:
    """The share of the fleet's requests over a bucket bound in the window: 1 - bucket(le) / bucket(+Inf);
    every request over a 0 bound, none over +Inf."""
    names = HISTOGRAMS[key]
    everything = f"sum({rate_of(names, _and(matchers, le_matcher(math.inf)), window, '_bucket')})"
    if math.isinf(bound):
        return f"(0 * {everything})"
    if bound <= 0:
        return f"({everything} / {everything})"
    within = f"sum({rate_of(names, _and(matchers, le_matcher(bound)), window, '_bucket')})"
    return f"(({everything} - {within}) / {everything})"  # as the console computes it, to the last bit


def _attained(key: str, bound: float, matchers: str, window: str) -> str:
    return f"(1 - {_share_over(key, bound, matchers, window)})"


def _and(matchers: str, more: str) -> str:
    return f"{matchers},{more}" if matchers else more


def bound_note(key: str, target: float) -> str:
    """Words for a target inside one of vLLM's buckets: what the alert waits for and what makes it exact."""
    lo, hi = target_bounds(key, target)
    if lo == hi:
        return ""
    allowed = f"{allowed_share(slo.QUANTILE) * 100:g} %"
    past = f"over {_ms(hi)}" if math.isfinite(hi) else "past the last bound (never)"
    return (
        f"The {_ms(target)} target lies inside vLLM's {lo * 1000:g}-{_ms(hi)} bucket: this alert fires when more "
        f"than {allowed} of requests took {past}, the most the buckets can tell; put the target on a bound "
        f"({_ms(lo)} or {_ms(hi)}) to judge it exactly."
    )


def _target_rules(plan: Plan, matchers: str, window: str, plan_matcher: str) -> list[dict]:
    """Per latency target: the share of requests surely over it (over the bound at or above it, what the alert
    reads) and the share that met it (attainment; exact on a bound, else at most this, at least `:least`)."""
    expect = plan_now(plan, A_MONDAY)
    found = []
    for key, target in (
        ("ttft", expect.ttft_p95_target_seconds),
        ("tpot", expect.tpot_p95_target_seconds),
        ("e2e", expect.e2e_p95_target_seconds),
    ):
        if target is None:
            continue
        lo, hi = target_bounds(key, target)
        labels = {PLAN_LABEL: plan_matcher}
        found.append(
            {
                "record": record(f"fleet_{key}_over_target:share"),
                "expr": _share_over(key, hi, matchers, window),
                "labels": labels,
            }
        )
        found.append(
            {
                "record": record(f"fleet_{key}_attainment:share"),
                "expr": _attained(key, hi, matchers, window),
                "labels": labels,
            }
        )
        if lo != hi:
            found.append(
                {
                    "record": record(f"fleet_{key}_attainment:least"),
                    "expr": _attained(key, lo, matchers, window),
                    "labels": labels,
                }
            )
    return found


def _todos(plan: Plan, t: Thresholds) -> dict[str, str]:
    """Each flag kind's `todo`, as the flags module words it for this plan: read from figures that raise every rule."""
    expect = plan_now(plan, A_MONDAY)
    busy = Figures(
        name="r1",
        url="r1",
        state=ReplicaState.UP,
        waiting=1e6,
        kv_usage=1.0,
        preemptions_per_second=1.0,
        requests_per_second=1e9,
    )
    down = Figures(name="r2", url="r2", state=ReplicaState.DOWN)
    fleet = Figures(
        name=FLEET_TOTAL,
        url="",
        state=ReplicaState.UP,
        requests_per_second=1e9,
        ttft_p95_seconds=1e9,
        tpot_p95_seconds=1e9,
        e2e_p95_seconds=1e9,
    )
    found = readings(FlagInputs(FleetFigures(60.0, "prometheus", (busy, down), fleet, A_MONDAY), expect), t)
    return {r.kind: r.todo for r in found}


def _with(expression: str, figure: str) -> str:
    """A Go template fragment: `expression`'s first value through printf `figure`, nothing when it has none."""
    return f"{{{{ with printf {_go(expression)} $labels.{PLAN_LABEL} | query }}}}{figure}{{{{ end }}}}"


def _with_instance(expression: str, figure: str) -> str:
    return f"{{{{ with printf {_go(expression)} $labels.{PLAN_LABEL} $labels.instance | query }}}}{figure}{{{{ end }}}}"


def _go(text: str) -> str:
    return "`" + text + "`"  # a Go raw string: PromQL's quotes need no escaping inside it


def _value(form: str) -> str:
    return f'{{{{ . | first | value | printf "{form}" }}}}'


def _fleet_series(name: str, extra: str = "") -> str:
    return f"{record(name)}{{{PLAN_LABEL}=%q}}{extra}"


def _replica_series(name: str, extra: str = "") -> str:
    return f"{record(name)}{{{PLAN_LABEL}=%q,instance=%q}}{extra}"


def _held(alert: str, plan_matcher: str, on: str) -> str:
    """The `ALERTS` series of `alert` while it fires: what keeps an alert up between its clear and raise lines."""
    return (
        f'and on ({on}) ALERTS{{alertname="{alert}", alertstate="firing", {PLAN_LABEL}={promql_string(plan_matcher)}}}'
    )


def _saturation_code(waiting: str, kv: str, pre: str, queue_line: float, kv_line: float) -> str:
    """1 queued, 2 KV full while preempting, 3 both, 0 neither; a figure a replica lacks counts as not over its line."""
    queued = f"({waiting} >= bool {queue_line!r})"
    full = f"(({kv} >= bool {kv_line!r}) * ({pre} > bool 0))"
    return f"(({queued} + 2 * ({full} or {queued} * 0)) or 2 * {full})"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _alerts(plan: Plan, options: RuleOptions, t: Thresholds, plan_matcher: str) -> list[dict]:
    expect = plan_now(plan, A_MONDAY)
    todo = _todos(plan, t)
    own = f"{{{PLAN_LABEL}={promql_string(plan_matcher)}}}"
    matchers, window = selector_matchers(options.selector), duration(options.window_seconds)

    def alert(name: str, expr: str, after: float, severity: str, why: str) -> dict:
        rule: dict = {"alert": name, "expr": expr}
        if after > 0:
            rule["for"] = duration(after)
        rule["labels"] = {
            "severity": severity,
            PLAN_LABEL: template_literal(plan_matcher),
            "capcon_flag": ALERT_FLAGS[name],
        }
        rule["annotations"] = {"why": why, "do": todo[ALERT_FLAGS[name]]}
        return rule

    found = []
    # Saturation, per replica: 1 queued, 2 KV full with preemptions, 3 both (critical, as the console says).
    waiting, kv, pre = (
        record(n) + own for n in ("replica_waiting", "replica_kv_usage:max", "replica_preemptions:rate")
    )
    code = _saturation_code(waiting, kv, pre, t.queue_raise, t.kv_raise)
    stays = _saturation_code(waiting, kv, pre, t.queue_clear, t.kv_clear)
    why = (
        _with_instance(_replica_series("replica_waiting"), _value("%.0f") + " waiting")
        + ", KV "
        + _with_instance(_replica_series("replica_kv_usage:max", " * 100"), _value("%.0f") + " %")
        + _with_instance(
            _replica_series("replica_preemptions:rate", " > 0"), " with " + _value("%.2f") + " preemptions/s"
        )
    )
    rule = alert(
        "CapconSaturation",
        f"({code} > 0) or ({stays} > 0 {_held('CapconSaturation', plan_matcher, 'instance')})",
        t.min_duration_seconds,
        "warning",
        why,
    )
    rule["labels"]["severity"] = "{{ if eq $value 3.0 }}critical{{ else }}warning{{ end }}"
    found.append(rule)

    targets = (
        ("CapconSloBreachTtft", "ttft", "p95 TTFT", expect.ttft_p95_target_seconds),
        ("CapconSloBreachTpot", "tpot", "p95 TPOT", expect.tpot_p95_target_seconds),
        ("CapconSloBreachE2e", "e2e", "p95 end-to-end", expect.e2e_p95_target_seconds),
    )
    allowed = allowed_share(slo.QUANTILE)
    for name, key, label, target in targets:
        if target is None:
            continue
        # The share over the bound at or above the target: requests surely over it, so the alert fires only where
        # the console's judgement is a breach, never where the buckets cannot tell (console.fleet.slo).
        over = f"{record(f'fleet_{key}_over_target:share')}{own}"
        # Held while the p95 is not known within the clear share: the share over the bound at or below it.
        clear_bound = target_bounds(key, t.slo_clear_share * target)[0]
        held = (
            f"({_share_over(key, clear_bound, matchers, window)} > {allowed!r} {_held(name, plan_matcher, PLAN_LABEL)})"
        )
        p95 = _with(_fleet_series(f"fleet_{key}_p95:seconds", " * 1000"), _value("%.0f"))
        rule = alert(
            name,
            f"{over} > {allowed!r} or {held}",
            t.min_duration_seconds,
            "critical",
            f"{label} {p95} ms over its {_ms(target)} target",
        )
        note = bound_note(key, target)
        if note:
            rule["annotations"]["bucket"] = note
        found.append(rule)

    rps = record("fleet_requests:rate") + own
    capacity = record("plan_capacity_rps") + own
    per = plan.capacity.rps_per_replica
    found.append(
        alert(
            "CapconAbovePlan",
            f"{rps} > on ({PLAN_LABEL}) {capacity} or ({rps} >= on ({PLAN_LABEL}) ({capacity} * "
            f"{t.load_clear_share!r}) {_held('CapconAbovePlan', plan_matcher, PLAN_LABEL)})",
            t.min_duration_seconds,
            "critical",
            '{{ $value | printf "%.2f" }} req/s against '
            + _with(_fleet_series("plan_capacity_rps"), _value("%.2f"))
            + " planned for this hour ("
            + _with(_fleet_series("plan_replicas_scheduled"), _value("%.0f"))
            + f" x {per:.2f}{' estimated' if plan.capacity.estimated else ''})",
        )
    )
    serving = record("fleet_replicas_serving") + own
    carried = f"(clamp_min({serving} - {plan.redundancy}, 0) * {per!r})"
    found.append(
        alert(
            "CapconNPlus1AtRisk",
            f"{rps} > on ({PLAN_LABEL}) {carried} or ({rps} > 0 and {rps} >= on ({PLAN_LABEL}) ({carried} * "
            f"{t.load_clear_share!r}) {_held('CapconNPlus1AtRisk', plan_matcher, PLAN_LABEL)})",
            t.min_duration_seconds,
            "warning",
            '{{ $value | printf "%.2f" }} req/s; with '
            + f"{plan.redundancy} of "
            + _with(_fleet_series("fleet_replicas_serving"), _value("%.0f"))
            + " serving replicas lost the fleet carries "
            + _with(
                f"clamp_min({_fleet_series('fleet_replicas_serving')} - {plan.redundancy}, 0) * {per!r}",
                _value("%.2f"),
            )
            + " ("
            + _with(f"clamp_min({_fleet_series('fleet_replicas_serving')} - {plan.redundancy}, 0)", _value("%.0f"))
            + f" x {per:.2f}{' estimated' if plan.capacity.estimated else ''})",
        )
    )
    found.append(
        alert(
            "CapconReplicaDown",
            f"{record('replica_up')}{own} == 0",
            t.down_after_seconds,
            "critical",
            "{{ $labels.instance }} is down (Prometheus' last scrape of this target failed (up == 0)) "
            "at {{ $labels.instance }}",
        )
    )
    scheduled = record("plan_replicas_scheduled") + own
    found.append(
        alert(
            "CapconScheduleLag",
            f"{serving} < on ({PLAN_LABEL}) {scheduled}",
            t.min_duration_seconds,
            "warning",
            '{{ $value | printf "%.0f" }} replicas serving, '
            + _with(_fleet_series("plan_replicas_scheduled"), _value("%.0f"))
            + " scheduled for "
            + _with(f"{_fleet_series('plan_hour_of_week')} %% 24", _value("%02.0f"))
            + ":00",
        )
    )
    found.append(
        {
            "alert": "CapconPlanRulesOutdated",
            "expr": f"time() >= on () group_left {record('plan_rules_valid_until')}{own}",
            "labels": {"severity": "warning", PLAN_LABEL: template_literal(plan_matcher)},
            "annotations": {
                "why": f"these rules know the plan's clock ({plan.timezone}) until the end of "
                f"{options.first_year + options.years - 1}",
                "do": "Regenerate them with `capcon rules` and reload Prometheus.",
            },
        }
    )
    return found


def rule_file(plan: Plan, options: RuleOptions, thresholds: Thresholds | None = None) -> dict:
    """The rule file's document: one group named after the plan, figures, then the plan's clock, then alerts.

    `thresholds` is the flags' (console.fleet.flags.Thresholds); a test may pass shorter durations.
    Raises UserError for a selector that is not one (or is empty: the rules would read every vLLM in Prometheus).
    """
    t = thresholds or Thresholds()
    matchers = selector_matchers(options.selector)
    if not matchers:
        raise UserError(
            f"plan {plan.name!r}: no selector for the fleet's series; expected fleet.selector in the plan "
            "(e.g. selector: 'job=\"vllm\"') or --selector"
        )
    window = duration(options.window_seconds)
    return {
        "groups": [
            {
                "name": f"{PREFIX}-{plan.name}",
                "rules": _figures(matchers, window, plan.name)
                + _target_rules(plan, matchers, window, plan.name)
                + _plan_rules(plan, options, plan.name)
                + _alerts(plan, options, t, plan.name),
            }
        ]
    }
