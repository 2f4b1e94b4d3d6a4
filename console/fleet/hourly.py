"""A fleet's hours and days from recorded per-minute points: what `capcon history` shows.

Each replica's series is a list of `MinutePoint`s (the last sample of each minute,
with the minute's peaks of running, waiting and KV usage), oldest first. A span
(an hour, or a day made of hours) is summarised as:

* busiest five-minute rps: the fleet's request rate over the five minutes ending at
  each minute boundary inside the span (each replica's counter increase over its own
  elapsed time, summed), the highest of them;
* p95 TTFT and TPOT from the bucket increases over the span merged across replicas
  (TPOT falls back to the inter-token histogram when a server has no per-request one,
  as the console does);
* max KV usage, preemptions (counter increase), restarts, raised flags by kind;
* the seconds of the row's whole period (its hour, or its day) the recording covers, and
  whether that is the whole period: a row whose recording started, stopped or broke off
  inside it is `partial`, and its figures are for the part recorded.

Counter and bucket increases follow Prometheus' `increase`: a counter that went down
(or a new process start time) means the process restarted, and the increase across
that step is the new process's count since it started, never negative. A step across
a recording gap longer than `MAX_GAP_SECONDS` is left out: nobody knows when its
requests came. Anything that cannot be computed is None (unknown, never 0).

Pure: plain data in (series, times, tzinfo objects), no clock, no I/O.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta, tzinfo
from itertools import pairwise

from console.metrics.vllm import Histogram, ReplicaSample, restarted
from console.metrics.window import BucketDelta, delta_quantile, histogram_delta, merge_deltas
from console.plan.model import Plan
from console.plan.schedule import capacity_at, interactive_rps

MINUTE = 60.0
HOUR = 3600.0
BUSY_WINDOW_SECONDS = 300.0  # the plan's unit of load: the busiest five minutes of an hour
MAX_GAP_SECONDS = 900.0  # a longer step between two points is a recording gap, not a window
MERGED_HISTOGRAMS = ("ttft", "tpot", "itl", "prompt_length", "output_length")
# A whole hour's recording ends on the last sample of its last minute, up to a minute before the hour does.
TAIL_ALLOWANCE_SECONDS = MINUTE


@dataclass(frozen=True)
class MinutePoint:
    """One replica in one minute: its last sample, and the minute's peaks of the gauges."""

    sample: ReplicaSample
    running_max: float | None = None
    waiting_max: float | None = None
    kv_usage_max: float | None = None

    @property
    def at(self) -> float:
        return self.sample.at


@dataclass(frozen=True)
class PlanHour:
    """What the plan has for one hour of its week."""

    weekday: int  # 0 = Monday, on the plan's clock
    hour: int
    replicas: int
    capacity_rps: float
    planned_rps: float  # interactive workloads, busiest five minutes


@dataclass(frozen=True)
class Summary:
    start: float
    end: float
    replicas: int  # replicas with at least one point in the span
    busiest_rps: float | None
    busiest_at: float | None  # end of the busiest five minutes
    ttft_p95_seconds: float | None
    tpot_p95_seconds: float | None
    tpot_from: str | None  # "tpot", or "itl" when the servers have no per-request TPOT
    kv_usage_max: float | None
    preemptions: float | None
    requests: float | None  # finished requests in the span
    restarts: int
    flags: Mapping[str, int]  # raised flags by kind
    mean_input_tokens: float | None
    mean_output_tokens: float | None
    plan: PlanHour | None = None
    load: float | None = None  # busiest rps / planned capacity (a day: its most loaded hour)
    deltas: Mapping[str, BucketDelta] = field(default_factory=dict, repr=False)  # merged, for days
    # Seconds `busiest_rps` covers: five minutes, or less when the span never held five recorded minutes.
    busiest_seconds: float | None = None
    recorded_seconds: float | None = None  # of the row's period, covered by recorded steps (None without data)
    partial: bool = False  # the recording covers only part of the row's period (its figures: that part)

    @property
    def busiest_is_short(self) -> bool:
        return self.busiest_seconds is not None and self.busiest_seconds < BUSY_WINDOW_SECONDS

    @property
    def has_data(self) -> bool:
        return self.replicas > 0

    @property
    def flags_raised(self) -> int | None:
        return sum(self.flags.values()) if self.has_data or self.flags else None


# --- clocks ------------------------------------------------------------------


def _offset(at: float, zone: tzinfo) -> float:
    offset = datetime.fromtimestamp(at, zone).utcoffset()
    if offset is None:  # a tzinfo may say it does not know; ZoneInfo and timezone always know
        raise ValueError(f"{zone!r} gives no UTC offset at {at}")
    return offset.total_seconds()


def hour_starts(start: float, end: float, zone: tzinfo) -> list[float]:
    """Starts of the hours of `zone`'s clock that overlap [start, end), oldest first.

    An hour is 3,600 s of real time even across a DST change (whole-hour offsets): the
    wall clock skips or repeats a label, the buckets stay contiguous.
    """
    first = start - (start + _offset(start, zone)) % HOUR
    starts = []
    at = first
    while at < end:
        starts.append(at)
        at += HOUR
    return starts


def day_starts(start: float, end: float, zone: tzinfo) -> list[float]:
    """Starts (local midnight) of `zone`'s days that overlap [start, end): 23, 24 or 25 hours long."""
    day = datetime.fromtimestamp(start, zone).date()
    starts: list[float] = []
    while True:
        midnight = datetime.combine(day, time(), tzinfo=zone).timestamp()
        if midnight >= end:
            return starts
        starts.append(midnight)
        day += timedelta(days=1)


def plan_hour(plan: Plan, at: float, zone: tzinfo) -> PlanHour:
    """The plan's hour that contains `at`, read on the plan's clock (`zone`)."""
    local = datetime.fromtimestamp(at, zone)
    weekday, hour = local.weekday(), local.hour
    replicas, capacity = capacity_at(plan, weekday, hour)
    return PlanHour(weekday, hour, int(replicas), float(capacity), float(interactive_rps(plan, weekday, hour)))


def plan_hour_at_clock(plan: Plan, plan_clock: float) -> PlanHour:
    """The plan's hour at a recorded plan clock (`polls.plan_clock`: the plan's offset already folded in, read as UTC)."""
    return plan_hour(plan, plan_clock, UTC)


# --- increases ---------------------------------------------------------------


def _whole(histogram: Histogram) -> BucketDelta:
    """A new process's histogram: everything it holds was observed since it started."""
    return BucketDelta(dict(zip(histogram.bounds, histogram.counts)), histogram.sum, histogram.count)


def _counter_step(older: ReplicaSample, newer: ReplicaSample, name: str, reset: bool) -> float | None:
    new = newer.counters.get(name)
    if new is None:
        return None
    if reset:
        return new
    old = older.counters.get(name)
    return new - old if old is not None and new >= old else None


def _runs(
    points: Sequence[MinutePoint], start: float, end: float
) -> Iterator[tuple[ReplicaSample, ReplicaSample, bool]]:
    """(older, newer, reset) steps whose newer point falls in [start, end), joined into runs.

    Inside a run nothing restarted, so its increase is last minus first; a reset step
    stands alone (its increase is the newer sample's own count). Gaps break runs.
    """
    first = max(bisect_left([p.at for p in points], start) - 1, 0)
    run: tuple[MinutePoint, MinutePoint] | None = None  # the first and the last point of the run
    for older, newer in zip(points[first:], points[first + 1 :]):
        if newer.at < start or newer.at >= end or not newer.at > older.at:
            continue
        if newer.at - older.at > MAX_GAP_SECONDS:
            if run is not None:
                yield run[0].sample, run[1].sample, False
            run = None
            continue
        if restarted(older.sample, newer.sample):
            if run is not None:
                yield run[0].sample, run[1].sample, False
            run = None
            yield older.sample, newer.sample, True
            continue
        run = (older if run is None else run[0], newer)
    if run is not None:
        yield run[0].sample, run[1].sample, False


def _adjusted_requests(points: Sequence[MinutePoint]) -> list[tuple[int, float] | None]:
    """The requests counter made monotonic across restarts, as (segment, total).

    The increase between two points of one segment is a subtraction; a point without
    the counter (or a step that cannot be read) starts a new segment.
    """
    adjusted: list[tuple[int, float] | None] = []
    segment = 0
    total: float | None = None
    previous: ReplicaSample | None = None
    for point in points:
        sample = point.sample
        value = sample.counters.get("requests")
        if value is None:
            total = None
            adjusted.append(None)
        else:
            step = None
            if previous is not None and total is not None:
                step = _counter_step(previous, sample, "requests", restarted(previous, sample))
            if total is not None and step is not None:
                total += step
            else:
                segment, total = segment + 1, value
            adjusted.append((segment, total))
        previous = sample
    return adjusted


def _busiest(
    series: Mapping[str, Sequence[MinutePoint]], start: float, end: float
) -> tuple[float | None, float | None, float | None]:
    """(rps, end of the window, seconds it covers) of the busiest five minutes ending at a minute boundary in (start, end].

    A span that never holds five recorded minutes (a recording of three minutes, a console
    started at 10:58) gets the fleet's rate over what was recorded in it, with the seconds that
    covers: shown, and marked as shorter, rather than left unknown.
    """
    prepared = []
    for points in series.values():
        if points:
            prepared.append(([p.at for p in points], _adjusted_requests(points)))
    best: tuple[float | None, float | None] = (None, None)
    edge = math.floor(start / MINUTE) * MINUTE + MINUTE
    while edge <= end + 1e-9:
        total, known = 0.0, False
        for ats, adjusted in prepared:
            j = bisect_right(ats, edge) - 1
            i = bisect_right(ats, edge - BUSY_WINDOW_SECONDS) - 1
            # Both ends must be fresh: the newer within the last minute, the older within a minute of the start.
            if i < 0 or j <= i or ats[j] <= edge - MINUTE or ats[i] <= edge - BUSY_WINDOW_SECONDS - MINUTE:
                continue
            older, newer = adjusted[i], adjusted[j]
            if older is None or newer is None or older[0] != newer[0]:
                continue
            total += (newer[1] - older[1]) / (ats[j] - ats[i])
            known = True
        if known and (best[0] is None or total > best[0]):
            best = (total, edge)
        edge += MINUTE
    if best[0] is not None:
        return best[0], best[1], BUSY_WINDOW_SECONDS
    return _recorded_rate(prepared, start, end)


def _recorded_rate(
    prepared: Iterable[tuple[Sequence[float], Sequence[tuple[int, float] | None]]],
    start: float,
    end: float,
) -> tuple[float | None, float | None, float | None]:
    """The fleet's request rate over the recorded points inside [start, end], for spans without five minutes."""
    total, known = 0.0, False
    newest: float | None = None
    covered: float | None = None
    for ats, adjusted in prepared:
        # (time, (segment, requests)) of each point inside that has the counter.
        inside = [(at, point) for at, point in zip(ats, adjusted) if start <= at <= end and point is not None]
        if not inside:
            continue
        last_at, (segment, last_requests) = inside[-1]
        # The oldest point on the same process as the newest: a restart starts the count over.
        first_at, (_, first_requests) = next(p for p in inside if p[1][0] == segment)
        elapsed = last_at - first_at
        # Any two points will do: the per-minute points of a 90 s recording can lie 30 s apart, and
        # the requests counted between them are a known rate (marked short), not an unknown one.
        if not elapsed > 0:
            continue
        total += (last_requests - first_requests) / elapsed
        known = True
        newest = last_at if newest is None else max(newest, last_at)
        covered = elapsed if covered is None else min(covered, elapsed)
    return (total, newest, covered) if known else (None, None, None)


# --- coverage ----------------------------------------------------------------


def _recorded_steps(series: Mapping[str, Sequence[MinutePoint]], start: float, end: float) -> list[tuple[float, float]]:
    """The steps between a replica's neighbouring points (no longer than a gap) clipped to [start, end), merged."""
    steps = []
    for points in series.values():
        for older, newer in pairwise(points):
            if not 0 < newer.at - older.at <= MAX_GAP_SECONDS or newer.at <= start or older.at >= end:
                continue
            steps.append((max(older.at, start), min(newer.at, end)))
    merged: list[tuple[float, float]] = []
    for a, b in sorted(steps):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _coverage(steps: Sequence[tuple[float, float]], period_start: float, period_end: float) -> tuple[float, bool]:
    """(seconds covered, partial) of a row's period by merged recorded steps inside it.

    The period is whole when the steps cover it from its start, without a hole, to within a
    minute of its end (the last per-minute point of a whole hour falls in its last minute).
    """
    covered = sum(b - a for a, b in steps)
    if not steps:
        return covered, True
    holes = steps[0][0] - period_start + sum(b[0] - a[1] for a, b in pairwise(steps))
    tail = period_end - steps[-1][1]
    return covered, holes > 0 or tail > TAIL_ALLOWANCE_SECONDS


# --- summaries ---------------------------------------------------------------


def summarise(
    series: Mapping[str, Sequence[MinutePoint]],
    start: float,
    end: float,
    flags: Iterable[tuple[float, str]] = (),
    plan: PlanHour | None = None,
    period: tuple[float, float] | None = None,
) -> Summary:
    """One span (usually an hour) of a fleet. `series` may start up to six minutes before `start` (the lead-in).

    `period` is the whole row the span belongs to (its hour, when the range cuts it): a span
    that is not the whole period, or not wholly recorded, is partial.
    """
    replicas = restarts = 0
    kv_max: float | None = None
    preemptions: float | None = None
    requests: float | None = None
    deltas: dict[str, list[BucketDelta]] = {name: [] for name in MERGED_HISTOGRAMS}
    for points in series.values():
        inside = [p for p in points if start <= p.at < end]
        if not inside:
            continue
        replicas += 1
        for point in inside:
            usage = point.kv_usage_max
            if usage is not None and (kv_max is None or usage > kv_max):
                kv_max = usage
        for older, newer, reset in _runs(points, start, end):
            restarts += reset
            step = _counter_step(older, newer, "preemptions", reset)
            if step is not None:
                preemptions = (preemptions or 0.0) + step
            step = _counter_step(older, newer, "requests", reset)
            if step is not None:
                requests = (requests or 0.0) + step
            for name in MERGED_HISTOGRAMS:
                histogram = newer.histograms.get(name)
                if histogram is None:
                    continue
                delta = _whole(histogram) if reset else histogram_delta(older.histograms.get(name), histogram)
                if delta is not None:
                    deltas[name].append(delta)
    merged = {name: m for name, found in deltas.items() if (m := merge_deltas(found)) is not None}
    busiest, busiest_at, busiest_seconds = _busiest(series, start, end)
    raised: dict[str, int] = {}
    for at, kind in flags:
        if start <= at < end:
            raised[kind] = raised.get(kind, 0) + 1
    recorded: float | None = None
    partial = False
    if replicas:
        period_start, period_end = period if period is not None else (start, end)
        recorded, partial = _coverage(_recorded_steps(series, start, end), period_start, period_end)
    return _summary(
        start,
        end,
        replicas,
        busiest,
        busiest_at,
        kv_max,
        preemptions,
        requests,
        restarts,
        raised,
        merged,
        plan,
        busiest_seconds=busiest_seconds,
        recorded_seconds=recorded,
        partial=partial,
    )


def with_plan(summary: Summary, plan: PlanHour | None) -> Summary:
    """The summary set against a plan hour found after it was computed (the plan clock at its busiest moment)."""
    load = None
    if plan is not None and summary.busiest_rps is not None and plan.capacity_rps > 0:
        load = summary.busiest_rps / plan.capacity_rps
    return replace(summary, plan=plan, load=load)


def _summary(
    start: float,
    end: float,
    replicas: int,
    busiest: float | None,
    busiest_at: float | None,
    kv_max: float | None,
    preemptions: float | None,
    requests: float | None,
    restarts: int,
    raised: Mapping[str, int],
    merged: Mapping[str, BucketDelta],
    plan: PlanHour | None,
    load: float | None = None,
    busiest_seconds: float | None = None,
    recorded_seconds: float | None = None,
    partial: bool = False,
) -> Summary:
    tpot = delta_quantile(0.95, merged.get("tpot"))
    tpot_from = "tpot" if tpot is not None else None
    if tpot is None:
        tpot = delta_quantile(0.95, merged.get("itl"))
        tpot_from = "itl" if tpot is not None else None
    if load is None and plan is not None and busiest is not None and plan.capacity_rps > 0:
        load = busiest / plan.capacity_rps
    return Summary(
        start=start,
        end=end,
        replicas=replicas,
        busiest_rps=busiest,
        busiest_at=busiest_at,
        ttft_p95_seconds=delta_quantile(0.95, merged.get("ttft")),
        tpot_p95_seconds=tpot,
        tpot_from=tpot_from,
        kv_usage_max=kv_max,
        preemptions=preemptions,
        requests=requests,
        restarts=restarts,
        flags=dict(sorted(raised.items())),
        mean_input_tokens=_mean(merged.get("prompt_length")),
        mean_output_tokens=_mean(merged.get("output_length")),
        plan=plan,
        load=load,
        deltas=merged,
        busiest_seconds=busiest_seconds,
        recorded_seconds=recorded_seconds,
        partial=partial,
    )


def _mean(delta: BucketDelta | None) -> float | None:
    if delta is None or delta.sum is None or delta.count is None or not delta.count > 0:
        return None
    return delta.sum / delta.count


def combine(hours: Sequence[Summary], start: float, end: float, period: tuple[float, float] | None = None) -> Summary:
    """A day (or any run of spans) from its hours: peaks are the hours' peaks, p95s from the merged buckets.

    It is partial when the range cuts its `period` (the whole day), or an hour of it is partial or unrecorded.
    """
    known = [h for h in hours if h.has_data]
    period_start, period_end = period if period is not None else (start, end)
    partial = bool(known) and (
        start > period_start or end < period_end or any(h.partial or not h.has_data for h in hours)
    )

    def peak(values: Iterable[float | None]) -> float | None:
        found = [v for v in values if v is not None]
        return max(found) if found else None

    def total(values: Iterable[float | None]) -> float | None:
        found = [v for v in values if v is not None]
        return sum(found) if found else None

    # A full five-minute window beats a shorter one: a short span's rate is not the same measure.
    busiest_hour = max(
        (h for h in known if h.busiest_rps is not None),
        key=lambda h: (not h.busiest_is_short, h.busiest_rps),
        default=None,
    )
    merged = {}
    for name in MERGED_HISTOGRAMS:
        found = merge_deltas(h.deltas.get(name) for h in known)
        if found is not None:
            merged[name] = found
    raised: dict[str, int] = {}
    for h in hours:
        for kind, count in h.flags.items():
            raised[kind] = raised.get(kind, 0) + count
    return _summary(
        start,
        end,
        replicas=max((h.replicas for h in known), default=0),
        busiest=busiest_hour.busiest_rps if busiest_hour else None,
        busiest_at=busiest_hour.busiest_at if busiest_hour else None,
        kv_max=peak(h.kv_usage_max for h in known),
        preemptions=total(h.preemptions for h in known),
        requests=total(h.requests for h in known),
        restarts=sum(h.restarts for h in known),
        raised=raised,
        merged=merged,
        plan=None,
        load=peak(h.load for h in known),
        busiest_seconds=busiest_hour.busiest_seconds if busiest_hour else None,
        recorded_seconds=total(h.recorded_seconds for h in known),
        partial=partial,
    )
