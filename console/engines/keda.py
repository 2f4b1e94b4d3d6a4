"""The week's schedule for a scaler: a KEDA ScaledObject, a plain JSON document, and what reactive scaling loses.

Pure: the functions return dicts (the command dumps them as YAML or JSON).

KEDA's cron trigger asks for `desiredReplicas` between a `start` and an `end` cron time in
a `timezone`; KEDA (through the HPA) runs the largest count any active trigger asks for,
never below `minReplicaCount`. Each run of hours with the same replicas in the schedule
becomes one trigger: it starts `lead_time_minutes` before the run's first hour and ends
when the run does, in the plan's own zone, so a week of triggers gives exactly the
schedule's replicas by hour, lead time and N+1 included. Runs at the week's floor need no
trigger (`minReplicaCount` holds them).

Daylight saving: a cron time the clocks skip never fires, and KEDA then keeps the trigger
active (or inactive) for a whole week. A start or an end that falls in a skipped hour of
the plan's zone is moved out of it to the safe side, with a note: a start earlier by the
skipped hour (exact on the night the clocks go forward, an hour early on other weeks), an
end to the first minute after it. A start whose replicas must serve by the end of a
skipped hour is moved earlier by it as well (the night is an hour shorter). On the night
the clocks go back, a time in the repeated hour fires twice and KEDA's window opens at the
second: right for a start whose hour begins after the repeated one, too late for one that
must serve inside it, which is moved to the minute before the repeated hour; an end there
lasts until its second run (up to an hour more, that night only). Never fewer replicas
than the schedule asks for.

A Prometheus trigger adds replicas when load runs above the plan: it reads the fleet's
request rate the rule file records (`capcon rules`, the series the above-plan and N+1
alerts read) and asks for ceil(rate / capacity per replica) + redundancy replicas, the
schedule's own formula applied to the live load, so it asks for more than the cron
triggers only when the live load needs more than the plan's load for the hour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from console.engines.rules import PLAN_LABEL, YEARS_COVERED, offset_transitions, promql_string, record
from console.plan.model import Plan
from console.plan.schedule import Schedule

WEEK_MINUTES = 7 * 24 * 60
DAY_MINUTES = 24 * 60
DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class Window:
    """One cron trigger: `replicas` from `start` to `end`, minutes of the week on the plan's clock (Monday 00:00 = 0)."""

    start: int
    end: int
    replicas: int
    note: str = ""  # why a time was moved out of a skipped hour


@dataclass(frozen=True)
class ReactiveShortfall:
    """What scaling on the queue instead of the schedule loses: each added replica serves a lead time late."""

    minutes_week: int  # minutes a week with fewer replicas serving than the schedule
    replica_minutes_week: int  # the missing replicas summed over those minutes
    worst_day: int  # weekday (Monday 0) of the longest shortfall
    worst_day_minutes: int


def _runs(table: tuple[tuple[int, ...], ...]) -> list[tuple[int, int, int]]:
    """Runs of equal replicas as (first hour of the week, hours, replicas); one that wraps Sunday into Monday is one run."""
    flat = [table[d][h] for d in range(7) for h in range(24)]
    hours = len(flat)
    if len(set(flat)) == 1:
        return [(0, hours, flat[0])]
    first = next(h for h in range(hours) if flat[h] != flat[h - 1])  # a run starts here
    runs = []
    start = first
    for step in range(1, hours + 1):
        hour = (first + step) % hours
        if step == hours or flat[hour] != flat[start]:
            runs.append((start, (hour - start) % hours or hours, flat[start]))
            start = hour
    return runs


def changed_minutes(zone: str, first_year: int, years: int = YEARS_COVERED) -> tuple[list[tuple[int, int]], ...]:
    """(skipped, repeated): local wall-clock spans the zone's clocks jump over, and those they run twice, as
    (first minute of the week, minutes), over the years covered."""
    first, changes = offset_transitions(zone, first_year, years)
    skipped: set[tuple[int, int]] = set()
    repeated: set[tuple[int, int]] = set()
    before = first
    for at, after in changes:
        # The wall clock at the change: just before the jump forward, or just after the one back.
        local = datetime.fromtimestamp(at + min(before, after), UTC)
        minute = local.weekday() * DAY_MINUTES + local.hour * 60 + local.minute
        (skipped if after > before else repeated).add((minute, abs(after - before) // 60))
        before = after
    return sorted(skipped), sorted(repeated)


def skipped_minutes(zone: str, first_year: int, years: int = YEARS_COVERED) -> list[tuple[int, int]]:
    """Local wall-clock spans the zone's clocks skip, as (first minute of the week, minutes)."""
    return changed_minutes(zone, first_year, years)[0]


def _inside(minute: int, span: tuple[int, int]) -> bool:
    start, length = span
    return (minute - start) % WEEK_MINUTES < length


def windows(schedule: Schedule, zone: str, first_year: int) -> tuple[int, tuple[Window, ...]]:
    """(the week's floor, one Window per run above it), times moved out of the zone's skipped hours."""
    table = schedule.replicas_by_hour
    floor = min(map(min, table))
    lead = round(schedule.lead_time_seconds / 60)
    skipped, repeated = changed_minutes(zone, first_year)
    found = []
    for first_hour, hours, replicas in _runs(table):
        if replicas <= floor:
            continue
        if hours * 60 + lead >= WEEK_MINUTES:  # on all week: the floor, not a trigger
            floor = max(floor, replicas)
            continue
        start = (first_hour * 60 - lead) % WEEK_MINUTES
        end = (first_hour + hours) * 60 % WEEK_MINUTES
        notes = []
        for span in skipped:
            if _inside(start, span) or _inside(span[0], (start, lead)):
                start = (start - span[1]) % WEEK_MINUTES
                notes.append(f"start moved {span[1]} min earlier: the clocks skip {_clock(span[0])}")
            if _inside(end, span):
                end = (span[0] + span[1]) % WEEK_MINUTES
                notes.append(f"end moved to {_clock(end)}: the clocks skip {_clock(span[0])}")
        for span in repeated:
            # Started and ready inside the hour the clocks run twice: KEDA would start it at the second run.
            if _inside(start, span) and _inside(start + lead, span):
                start = (span[0] - 1) % WEEK_MINUTES
                notes.append(f"start moved to {_clock(start)}: the clocks run {_clock(span[0])} twice")
        found.append(Window(start, end, replicas, "; ".join(notes)))
    kept = tuple(w for w in found if w.replicas > floor)
    return floor, kept


def _clock(minute: int) -> str:
    day, rest = divmod(minute % WEEK_MINUTES, DAY_MINUTES)
    return f"{DAY_NAMES[day]} {rest // 60:02d}:{rest % 60:02d}"


def _trigger_name(plan: Plan, window: Window) -> str:
    """`<plan>-mon-0750-5`: the plan, when the trigger starts and the replicas it asks for."""
    day, rest = divmod(window.start, DAY_MINUTES)
    when = f"{DAY_NAMES[day]}-{rest // 60:02d}{rest % 60:02d}"
    return f"{kubernetes_name(plan.name)[:40].strip('-')}-{when}-{window.replicas}"


def cron(minute: int) -> str:
    """A minute of the week as a weekly cron time: `minute hour * * day` (cron's day 0 is Sunday)."""
    day, rest = divmod(minute % WEEK_MINUTES, DAY_MINUTES)
    return f"{rest % 60} {rest // 60} * * {(day + 1) % 7}"


def kubernetes_name(text: str) -> str:
    """A DNS-1123 label from a plan name: lower case, letters, digits and '-', at most 63 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return name or "capcon"


NO_LOAD_TRIGGER = (
    "left out: no Prometheus to query the live load (set fleet.prometheus_url in the plan, or give --prometheus URL)"
)


def load_query(plan: Plan) -> str:
    """The fleet's request rate as the rule file records it, plus the spare replicas' worth: N+1 on the live load."""
    spare = plan.redundancy * plan.capacity.rps_per_replica
    name = record("fleet_requests:rate")
    return f"{name}{{{PLAN_LABEL}={promql_string(plan.name)}}} + {spare!r}"


def scaled_object(
    plan: Plan,
    schedule: Schedule,
    *,
    first_year: int,
    prometheus_url: str | None,
    deployment: str | None = None,
    max_replicas: int | None = None,
) -> dict:
    """A KEDA ScaledObject (keda.sh/v1alpha1) for the plan's Deployment. Without `prometheus_url` it holds the
    schedule's cron triggers alone: the load trigger (N+1 on the live load) needs a Prometheus to query."""
    floor, found = windows(schedule, plan.timezone, first_year)
    peak = max(map(max, schedule.replicas_by_hour))
    triggers: list[dict] = []
    for window in found:
        trigger = {
            "type": "cron",
            "name": _trigger_name(plan, window),
            "metadata": {
                "timezone": plan.timezone,
                "start": cron(window.start),
                "end": cron(window.end),
                "desiredReplicas": str(window.replicas),
            },
        }
        triggers.append(trigger)
    if prometheus_url is not None:
        triggers.append(
            {
                "type": "prometheus",
                "name": "above-plan",
                "metadata": {
                    "serverAddress": prometheus_url,
                    "query": load_query(plan),
                    "threshold": repr(plan.capacity.rps_per_replica),
                },
            }
        )
    name = kubernetes_name(plan.name)
    notes = {f"capcon.io/{_trigger_name(plan, w)}": w.note for w in found if w.note}
    if prometheus_url is None:
        notes["capcon.io/above-plan"] = NO_LOAD_TRIGGER
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": f"{name}-schedule"[:63],
            "labels": {"app.kubernetes.io/managed-by": "capcon"},
            "annotations": {"capcon.io/plan": plan.name, **notes},
        },
        "spec": {
            "scaleTargetRef": {"name": kubernetes_name(deployment or plan.name)},
            "minReplicaCount": floor,
            "maxReplicaCount": max(max_replicas or peak, floor),
            "advanced": {
                # The schedule says when to scale down: on the hour, not five minutes later (the HPA's default).
                "horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}
            },
            "triggers": triggers,
        },
    }


def reactive_shortfall(schedule: Schedule) -> ReactiveShortfall:
    """Minutes a week the fleet runs short if each scale-up waits for its hour's load (the queue) to start.

    Replicas asked for at minute u serve from u + lead time; with scale-downs at once, the
    replicas serving at t are the fewest the schedule asked for over [t - lead, t]. The
    shortfall is the schedule's count at t minus that, counted minute by minute over the
    week. Optimistic: a real reactive scaler also waits for its metric window and polling.
    """
    table = schedule.replicas_by_hour
    lead = round(schedule.lead_time_seconds / 60)
    minutes = replica_minutes = 0
    by_day = [0] * 7
    for t in range(WEEK_MINUTES):
        wanted = _at(table, t)
        # The schedule is constant within an hour: its fewest over [t - lead, t] is at t - lead or an hour start.
        hour_starts = range((t - lead) // 60 * 60 + 60, t + 1, 60)
        serving = min([_at(table, t - lead), *(_at(table, b) for b in hour_starts)])
        short = wanted - serving
        if short > 0:
            minutes += 1
            replica_minutes += short
            by_day[t // DAY_MINUTES] += 1
    worst = max(range(7), key=lambda d: (by_day[d], -d))
    return ReactiveShortfall(minutes, replica_minutes, worst, by_day[worst])


def _at(table: tuple[tuple[int, ...], ...], minute: int) -> int:
    day, rest = divmod(minute % WEEK_MINUTES, DAY_MINUTES)
    return table[day][rest // 60]


def schedule_document(plan: Plan, schedule: Schedule, first_year: int) -> dict:
    """The schedule for anything else (an HPA script, a Terraform variable): plain numbers and the same windows."""
    floor, found = windows(schedule, plan.timezone, first_year)
    shortfall = reactive_shortfall(schedule)
    return {
        "plan": plan.name,
        "timezone": plan.timezone,
        "lead_time_minutes": schedule.lead_time_seconds / 60,
        "redundancy": schedule.redundancy,
        "rps_per_replica": schedule.rps_per_replica,
        "capacity_estimated": schedule.capacity_estimated,  # the counts rest on an estimate, not a measurement
        "min_replicas": floor,
        "max_replicas": max(map(max, schedule.replicas_by_hour)),
        "replicas_by_hour": [list(day) for day in schedule.replicas_by_hour],
        "windows": [
            {
                "start": {"weekday": w.start // DAY_MINUTES, "minute_of_day": w.start % DAY_MINUTES},
                "end": {"weekday": w.end // DAY_MINUTES, "minute_of_day": w.end % DAY_MINUTES},
                "start_cron": cron(w.start),
                "end_cron": cron(w.end),
                "replicas": w.replicas,
                "note": w.note,
            }
            for w in found
        ],
        "saving_share": schedule.saving_share,
        "reactive_shortfall": {
            "minutes_week": shortfall.minutes_week,
            "replica_minutes_week": shortfall.replica_minutes_week,
            "worst_day": DAY_NAMES[shortfall.worst_day],
            "worst_day_minutes": shortfall.worst_day_minutes,
        },
    }
