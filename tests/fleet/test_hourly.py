"""Hours and days from per-minute points: expected values come from the arrivals the test generates."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

from console.fleet.hourly import MinutePoint, combine, day_starts, hour_starts, plan_hour, summarise
from console.metrics.vllm import Histogram, ReplicaSample
from console.plan.schema import load_plan

TTFT_BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5, math.inf)
TOKEN_BOUNDS = (250.0, 500.0, 1000.0, 2000.0, 4000.0, math.inf)
T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC, a Thursday


class FakeReplica:
    """A replica's cumulative counters, built from the requests the test says it served."""

    def __init__(self, started: float = 1.0) -> None:
        self.restart(started)

    def restart(self, at: float) -> None:
        self.started = at
        self.requests = 0.0
        self.preemptions = 0.0
        self.ttft = [0.0] * len(TTFT_BOUNDS)  # per bucket, not cumulative
        self.ttft_sum = 0.0
        self.tpot = [0.0] * len(TTFT_BOUNDS)
        self.tpot_sum = 0.0
        self.prompt = [0.0] * len(TOKEN_BOUNDS)
        self.prompt_sum = 0.0
        self.output = [0.0] * len(TOKEN_BOUNDS)
        self.output_sum = 0.0

    def serve(
        self,
        n: int,
        ttft: float = 0.05,
        tpot: float = 0.02,
        prompt: float = 800.0,
        output: float = 300.0,
        preempted: int = 0,
    ):
        self.requests += n
        self.preemptions += preempted
        for buckets, bounds, value, total in (
            (self.ttft, TTFT_BOUNDS, ttft, "ttft_sum"),
            (self.tpot, TTFT_BOUNDS, tpot, "tpot_sum"),
            (self.prompt, TOKEN_BOUNDS, prompt, "prompt_sum"),
            (self.output, TOKEN_BOUNDS, output, "output_sum"),
        ):
            buckets[next(i for i, b in enumerate(bounds) if value <= b)] += n
            setattr(self, total, getattr(self, total) + n * value)

    @staticmethod
    def _histogram(bounds, buckets, total) -> Histogram:
        cumulative, running = [], 0.0
        for count in buckets:
            running += count
            cumulative.append(running)
        return Histogram(bounds, tuple(cumulative), total, running)

    def sample(self, at: float, kv: float = 0.5, running: float = 3.0, tpot: bool = True) -> ReplicaSample:
        histograms = {
            "ttft": self._histogram(TTFT_BOUNDS, self.ttft, self.ttft_sum),
            "prompt_length": self._histogram(TOKEN_BOUNDS, self.prompt, self.prompt_sum),
            "output_length": self._histogram(TOKEN_BOUNDS, self.output, self.output_sum),
        }
        histograms["tpot" if tpot else "itl"] = self._histogram(TTFT_BOUNDS, self.tpot, self.tpot_sum)
        return ReplicaSample(
            at=at,
            counters={"requests": self.requests, "preemptions": self.preemptions},
            running=running,
            waiting=0.0,
            kv_usage_by_engine={"0": kv},
            histograms=histograms,
            start_time=self.started,
        )


def minute_at(k: int, start: float = T0) -> float:
    """The last sample of minute k of the hour starting at `start` (k < 0: the lead-in)."""
    return start + 60.0 * k + 50.0


def steady(per_minute: int, minutes=range(-6, 60), start: float = T0, **serve) -> list[MinutePoint]:
    replica = FakeReplica()
    points = []
    for k in minutes:
        replica.serve(per_minute, **serve)
        points.append(MinutePoint(replica.sample(minute_at(k, start)), kv_usage_max=0.5))
    return points


def test_busiest_five_minutes_catches_a_known_burst_summed_over_replicas():
    a, b = FakeReplica(), FakeReplica()
    series = {"a": [], "b": []}
    for k in range(-6, 60):
        # a: 60 requests a minute, plus a burst of 900 over minutes 20-24; b: 30 a minute throughout.
        a.serve(60 + (180 if 20 <= k <= 24 else 0))
        b.serve(30)
        series["a"].append(MinutePoint(a.sample(minute_at(k))))
        series["b"].append(MinutePoint(b.sample(minute_at(k))))
    hour = summarise(series, T0, T0 + 3600)
    # The five minutes holding the whole burst: (5 x 60 + 900 + 5 x 30) requests over 300 s.
    assert hour.busiest_rps == (5 * 60 + 900 + 5 * 30) / 300
    assert hour.busiest_at == T0 + 25 * 60  # the window ending as minute 24 closes
    assert hour.requests == 60 * 60 + 900 + 30 * 60
    assert hour.replicas == 2


def test_p95_comes_from_the_merged_buckets_of_all_replicas():
    fast, slow = FakeReplica(), FakeReplica()
    series = {"fast": [MinutePoint(fast.sample(minute_at(-1)))], "slow": [MinutePoint(slow.sample(minute_at(-1)))]}
    fast.serve(80, ttft=0.05)
    slow.serve(20, ttft=0.3)
    series["fast"].append(MinutePoint(fast.sample(minute_at(10))))
    series["slow"].append(MinutePoint(slow.sample(minute_at(10))))
    hour = summarise(series, T0, T0 + 3600)
    # Rank 95 of 100 lies in (0.25, 0.5], which holds observations 81-100: 0.25 + 0.25 x 15/20.
    assert math.isclose(hour.ttft_p95_seconds, 0.25 + 0.25 * 15 / 20)
    assert hour.tpot_from == "tpot"


def test_tpot_falls_back_to_the_inter_token_histogram():
    replica = FakeReplica()
    points = []
    for k in (-1, 10):
        replica.serve(100, tpot=0.2)
        points.append(MinutePoint(replica.sample(minute_at(k), tpot=False)))
    hour = summarise({"r": points}, T0, T0 + 3600)
    assert hour.tpot_from == "itl"
    assert 0.1 < hour.tpot_p95_seconds <= 0.25


def test_a_restart_inside_the_hour_counts_from_the_new_process_never_negative():
    replica = FakeReplica(started=100.0)
    points = []
    for k in range(-6, 60):
        if k == 30:
            replica.restart(at=minute_at(29) + 5)
        replica.serve(10, ttft=0.05 if k < 30 else 0.7, preempted=1)
        points.append(MinutePoint(replica.sample(minute_at(k))))
    hour = summarise({"r": points}, T0, T0 + 3600)
    assert hour.restarts == 1
    assert hour.requests == 60 * 10  # every minute's 10 requests, before and after the restart
    assert hour.preemptions == 60
    # 300 fast and 300 slow requests: the p95 lies among the slow ones, in (0.5, 1.0].
    assert 0.5 < hour.ttft_p95_seconds <= 1.0
    assert hour.busiest_rps == 10 / 60 * 1.0  # steady 10 a minute, also across the restart


def test_an_hour_without_data_is_unknown_not_zero():
    hour = summarise({"r": steady(10, minutes=range(-6, 0))}, T0, T0 + 3600)
    assert not hour.has_data
    for value in (
        hour.busiest_rps,
        hour.ttft_p95_seconds,
        hour.tpot_p95_seconds,
        hour.kv_usage_max,
        hour.preemptions,
        hour.requests,
        hour.flags_raised,
        hour.mean_input_tokens,
        hour.load,
    ):
        assert value is None


def test_a_recording_gap_is_not_counted_as_one_minute_of_requests():
    replica = FakeReplica()
    points = []
    for k in list(range(-6, 10)) + list(range(40, 60)):
        replica.serve(10 + (30 * 10 if k == 40 else 0))  # the 30 unrecorded minutes' requests show at minute 40
        points.append(MinutePoint(replica.sample(minute_at(k))))
    hour = summarise({"r": points}, T0, T0 + 3600)
    assert hour.requests == 10 * 10 + 19 * 10  # minutes 0-9 and 41-59: the step over the gap is left out
    assert hour.busiest_rps == 10 / 60


def test_raised_flags_are_counted_by_kind_inside_the_hour_only():
    flags = [(T0 - 1, "kv"), (T0 + 10, "kv"), (T0 + 20, "queue"), (T0 + 3599, "kv"), (T0 + 3600, "queue")]
    hour = summarise({"r": steady(5)}, T0, T0 + 3600, flags)
    assert hour.flags == {"kv": 2, "queue": 1}
    assert hour.flags_raised == 3


def test_kv_max_and_token_means():
    replica = FakeReplica()
    points = []
    for k in range(-1, 60):
        replica.serve(2, prompt=1500.0 if k % 2 else 500.0, output=100.0)
        points.append(MinutePoint(replica.sample(minute_at(k)), kv_usage_max=0.9 if k == 17 else 0.4))
    hour = summarise({"r": points}, T0, T0 + 3600)
    assert hour.kv_usage_max == 0.9
    assert hour.mean_input_tokens == (30 * 2 * 1500 + 30 * 2 * 500) / 120
    assert hour.mean_output_tokens == 100.0


def test_a_day_takes_p95_from_merged_buckets_not_from_its_hours():
    series = {"r": steady(95, ttft=0.05)}
    quiet = summarise(series, T0, T0 + 3600)
    replica = FakeReplica()
    slow_points = []
    for k in range(-1, 60):
        replica.serve(5 if k >= 0 else 0, ttft=2.0)
        slow_points.append(MinutePoint(replica.sample(minute_at(k, T0 + 3600))))
    slow = summarise({"r": slow_points}, T0 + 3600, T0 + 7200)
    day = combine([quiet, slow], T0, T0 + 7200)
    assert slow.ttft_p95_seconds > 1.0 and quiet.ttft_p95_seconds < 0.1
    # 60 x 95 fast and 60 x 5 slow requests: rank 95 % of 6,000 = 5,700 is the last fast one.
    assert day.ttft_p95_seconds <= 0.1
    assert day.busiest_rps == max(quiet.busiest_rps, slow.busiest_rps)
    assert day.requests == quiet.requests + slow.requests


def test_hours_in_a_zone_without_dst_are_24_a_day():
    tokyo = ZoneInfo("Asia/Tokyo")
    start = datetime(2026, 3, 29, tzinfo=tokyo).timestamp()
    hours = hour_starts(start, start + 86400, tokyo)
    assert len(hours) == 24
    assert [datetime.fromtimestamp(h, tokyo).hour for h in hours] == list(range(24))
    assert day_starts(start, start + 3 * 86400, tokyo) == [start, start + 86400, start + 2 * 86400]


def test_hours_across_dst_changes_skip_and_repeat_wall_clock_labels():
    warsaw = ZoneInfo("Europe/Warsaw")
    spring = datetime(2026, 3, 29, tzinfo=warsaw).timestamp()
    days = day_starts(spring, spring + 2 * 86400, warsaw)
    assert days[1] - days[0] == 23 * 3600  # the day the clocks go forward
    hours = hour_starts(days[0], days[1], warsaw)
    assert [datetime.fromtimestamp(h, warsaw).hour for h in hours] == [0, 1] + list(range(3, 24))
    autumn = datetime(2026, 10, 25, tzinfo=warsaw).timestamp()
    days = day_starts(autumn, autumn + 2 * 86400, warsaw)
    assert days[1] - days[0] == 25 * 3600
    labels = [datetime.fromtimestamp(h, warsaw).hour for h in hour_starts(days[0], days[1], warsaw)]
    assert labels == [0, 1, 2, 2] + list(range(3, 24))


def test_a_summary_bucketed_after_spring_forward_holds_that_hours_data():
    warsaw = ZoneInfo("Europe/Warsaw")
    three = datetime(2026, 3, 29, 3, tzinfo=warsaw).timestamp()  # 01:00 UTC, straight after 01:59 CET
    hours = hour_starts(three - 3600, three + 3600, warsaw)
    assert hours == [three - 3600, three]
    series = {"r": steady(12, start=three)}
    before = summarise(series, hours[0], hours[1])
    after = summarise(series, hours[1], hours[1] + 3600)
    assert after.requests == 12 * 60 and after.busiest_rps == 12 / 60
    assert before.requests == 12 * 6 - 12  # only the lead-in's minutes fell in the hour before


def test_the_plans_capacity_is_read_on_the_plans_clock():
    plan = load_plan("plans/internal-assistant-18rps.yaml")
    warsaw = ZoneInfo(plan.timezone)
    monday_ten = datetime(2026, 11, 30, 10, tzinfo=warsaw).timestamp()
    expected = plan_hour(plan, monday_ten, warsaw)
    assert (expected.weekday, expected.hour) == (0, 10)
    assert expected.planned_rps == plan.workloads[0].rps_by_hour[0][10]
    assert expected.capacity_rps == expected.replicas * plan.capacity.rps_per_replica
    hour = summarise({"r": steady(600, start=monday_ten)}, monday_ten, monday_ten + 3600, plan=expected)
    assert hour.load == hour.busiest_rps / expected.capacity_rps


def test_a_span_shorter_than_five_minutes_gets_the_rate_over_what_was_recorded_marked_short():
    replica = FakeReplica()
    points = []
    for k in range(3):  # three minutes recorded: 12 requests a minute
        replica.serve(12)
        points.append(MinutePoint(replica.sample(T0 + 60 * (k + 1))))
    hour = summarise({"r": points}, T0, T0 + 3600)
    assert hour.busiest_rps == 24 / 120  # the 24 requests between the first and the last point, over their 120 s
    assert hour.busiest_seconds == 120 and hour.busiest_is_short
    full = summarise({"r": steady(10, minutes=range(-6, 60))}, T0, T0 + 3600)
    assert full.busiest_seconds == 300 and not full.busiest_is_short


def test_a_day_prefers_an_hour_with_a_full_five_minutes_over_a_short_busier_one():
    short = FakeReplica()
    quick = [MinutePoint(short.sample(T0 + 60))]
    short.serve(600)  # a burst over two recorded minutes: 5 rps
    quick.append(MinutePoint(short.sample(T0 + 120)))
    steady_hour = summarise({"r": steady(10, minutes=range(54, 120))}, T0 + 3600, T0 + 7200)
    short_hour = summarise({"r": quick}, T0, T0 + 3600)
    assert short_hour.busiest_is_short and short_hour.busiest_rps > steady_hour.busiest_rps
    day = combine([short_hour, steady_hour], T0, T0 + 7200)
    assert day.busiest_rps == steady_hour.busiest_rps and not day.busiest_is_short


def test_a_plan_hour_found_later_sets_the_load_and_a_plan_clock_reads_the_plans_week():
    from console.fleet.hourly import plan_hour_at_clock, with_plan
    from console.fleet.plan_now import week_time
    from console.plan.schedule import capacity_at

    plan = load_plan("plans/chat-8b-l40s.yaml")
    clocked = plan_hour_at_clock(plan, week_time(4 * 86400 + 11 * 3600 + 1800))  # Friday 11:30 on the plan's clock
    assert (clocked.weekday, clocked.hour) == (4, 11)
    assert (clocked.replicas, clocked.capacity_rps) == capacity_at(plan, 4, 11)
    bare = summarise({}, 0.0, 3600.0)
    assert with_plan(bare, clocked).load is None  # no rate, no load
    busy = replace(bare, busiest_rps=3.0)
    assert with_plan(busy, clocked).load == 3.0 / clocked.capacity_rps
    assert with_plan(busy, None).plan is None
