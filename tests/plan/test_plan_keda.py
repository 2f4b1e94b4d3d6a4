"""`capcon plan --schedule --format keda`: a week of KEDA's cron semantics replayed gives the schedule, to the minute.

KEDA's cron trigger, as its scaler computes it: the next `start` and the next `end` after
now, as robfig/cron finds them in the trigger's `timezone`; the trigger is active unless
the next start comes before the next end (then it is waiting for its window). A local time
the clocks skip never fires; one they repeat fires at both occurrences. KEDA (through the
HPA) runs the largest `desiredReplicas` of the active triggers, at least `minReplicaCount`,
at most `maxReplicaCount`. The Prometheus trigger is left out: with no load it asks for
fewer replicas than the floor.

The expected count at t comes from `capcon plan --json --schedule` alone: the table's
replicas for the local hour at t, or for any local hour that starts within the lead time
after t (a replica for it must already be loading), read with zoneinfo.
"""

from __future__ import annotations

import bisect
import json
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.engines.keda import cron, reactive_shortfall, scaled_object, windows
from console.engines.rules import offset_transitions
from console.plan.schedule import schedule
from console.plan.schema import load_plan

from conftest import PLANS

WEEK = 7 * 24 * 3600


def fires(expression: str, zone: ZoneInfo, first: date, last: date) -> list[float]:
    """Unix times a weekly `m h * * dow` cron fires in `zone` between two dates, as robfig/cron finds them."""
    minute, hour, dom, month, dow = expression.split()
    assert (dom, month) == ("*", "*"), expression
    found = set()
    day = first
    while day <= last:
        if (day.weekday() + 1) % 7 == int(dow):
            wall = datetime(day.year, day.month, day.day, int(hour), int(minute))
            for fold in (0, 1):
                at = wall.replace(tzinfo=zone, fold=fold).timestamp()
                if datetime.fromtimestamp(at, zone).replace(tzinfo=None) == wall:  # the wall time exists
                    found.add(at)
        day += timedelta(days=1)
    return sorted(found)


def keda_replicas(scaled: dict, begin: float, end: float):
    """A function t -> the replicas KEDA runs at t, for begin <= t < end."""
    spec = scaled["spec"]
    first = datetime.fromtimestamp(begin, UTC).date() - timedelta(days=9)
    last = datetime.fromtimestamp(end, UTC).date() + timedelta(days=9)
    crons = []
    for trigger in spec["triggers"]:
        if trigger["type"] != "cron":
            continue
        meta = trigger["metadata"]
        zone = ZoneInfo(meta["timezone"])
        crons.append(
            (
                fires(meta["start"], zone, first, last),
                fires(meta["end"], zone, first, last),
                int(meta["desiredReplicas"]),
            )
        )

    def at(t: float) -> int:
        wanted = spec["minReplicaCount"]
        for starts, ends, replicas in crons:
            next_start = starts[bisect.bisect_right(starts, t)]
            next_end = ends[bisect.bisect_right(ends, t)]
            if not (next_start < next_end and t < next_start):
                wanted = max(wanted, replicas)
        return min(wanted, spec["maxReplicaCount"])

    return at


def scheduled_replicas(table, lead_minutes: int, zone: ZoneInfo, begin: float, end: float):
    """t (at minute marks plus 30 s) -> what the schedule asks for: this local hour's replicas, or a later hour's
    that starts within the lead time."""
    minutes = int((end - begin) // 60) + lead_minutes + 2
    local = []
    for i in range(minutes):
        wall = datetime.fromtimestamp(begin + 60 * i, zone)
        local.append(table[wall.weekday()][wall.hour])

    def at(t: float) -> int:
        i = int((t - begin) // 60)
        return max(local[i : i + lead_minutes + 1])

    return at


def replay(scaled: dict, table, lead_minutes: int, zone: str, monday: date) -> list[tuple[str, int, int]]:
    """Every minute of the week from `monday` 00:00 local: [(local time, KEDA, schedule)] where they differ."""
    info = ZoneInfo(zone)
    begin = datetime(monday.year, monday.month, monday.day, tzinfo=info).timestamp()
    end = begin + WEEK
    keda = keda_replicas(scaled, begin, end)
    expected = scheduled_replicas(table, lead_minutes, info, begin, end)
    differ = []
    t = begin + 30
    while t < end:
        got, want = keda(t), expected(t)
        if got != want:
            differ.append((datetime.fromtimestamp(t, info).isoformat(), got, want))
        t += 60
    return differ


def exported(capcon, path) -> tuple[dict, dict]:
    code, out, err = capcon("plan", path, "--schedule", "--format", "keda", "--prometheus", "http://prometheus:9090")
    assert code == 0, err
    (scaled,) = list(yaml.safe_load_all(out))
    code, out, err = capcon("plan", path, "--json", "--schedule")
    assert code == 0, err
    return scaled, json.loads(out)


@pytest.mark.parametrize(
    "monday",
    [
        date(2026, 3, 23),  # Europe's clocks go forward on Sunday 29 March
        date(2026, 10, 19),  # and back on Sunday 25 October
        date(2026, 6, 1),  # a week without a change
    ],
)
def test_keda_replays_the_schedule_across_daylight_saving(capcon, monday):
    # Worked example B on Warsaw's clock: its 2 -> 5 ramp at 08:00 on weekdays, started 10 min ahead.
    path = PLANS / "internal-assistant-18rps.yaml"
    scaled, figures = exported(capcon, path)
    table = figures["replicas_by_hour"]
    plan = load_plan(str(path))
    assert scaled["spec"]["minReplicaCount"] == min(map(min, table))
    assert scaled["spec"]["maxReplicaCount"] == max(map(max, table))
    assert {t["metadata"]["timezone"] for t in scaled["spec"]["triggers"] if t["type"] == "cron"} == {plan.timezone}
    differ = replay(scaled, table, round(plan.lead_time_seconds / 60), plan.timezone, monday)
    assert differ == []


def test_keda_replays_a_busy_week_with_many_levels(capcon, write_plan):
    """Every hour its own level (ramps up and down all day, weekend included), N+1, a 45 min lead, New York's clock."""
    weekday = [1, 1, 2, 3, 5, 8, 13, 21, 34, 40, 44, 47, 50, 47, 40, 33, 25, 18, 12, 8, 5, 3, 2, 1]
    path = write_plan(
        {
            "timezone": "America/New_York",
            "lead_time_minutes": 45,
            "redundancy": 1,
            "workloads": [
                {
                    "name": "chat",
                    "kind": "interactive",
                    "arrivals": {"weekday": weekday, "weekend": [max(1, n // 2) for n in weekday]},
                    "tokens": {"input_mean": 1000, "input_p95": 3000, "output_mean": 300, "output_max": 1000},
                    "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.05},
                }
            ],
        }
    )
    scaled, figures = exported(capcon, path)
    table = figures["replicas_by_hour"]
    assert len({n for day in table for n in day}) > 8
    for monday in (date(2026, 3, 2), date(2026, 3, 9), date(2026, 10, 26), date(2026, 11, 2)):  # 8 Mar, 1 Nov
        assert replay(scaled, table, 45, "America/New_York", monday) == [], monday


def test_a_start_the_clocks_skip_is_moved_earlier_and_never_runs_short(capcon, write_plan):
    """A scale-up ready at 03:00 on Sunday starts at 02:50, which Warsaw skips on the last Sunday of March: KEDA would
    never fire it that week. It is moved an hour earlier, with a note: never short, an hour early on other Sundays."""
    weekend = [2.0] * 24
    weekend[3:6] = [14.0] * 3
    path = write_plan(
        {
            "timezone": "Europe/Warsaw",
            "lead_time_minutes": 10,
            "workloads": [
                {
                    "name": "chat",
                    "kind": "interactive",
                    "arrivals": {"weekday": [2.0] * 24, "weekend": weekend},
                    "tokens": {"input_mean": 1000, "input_p95": 3000, "output_mean": 300, "output_max": 1000},
                    "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.05},
                }
            ],
        }
    )
    scaled, figures = exported(capcon, path)
    table = figures["replicas_by_hour"]
    notes = [
        v for k, v in scaled["metadata"]["annotations"].items() if k.startswith("capcon.io/") and k != "capcon.io/plan"
    ]
    assert notes == ["start moved 60 min earlier: the clocks skip sun 02:00"]
    sunday = [t for t in scaled["spec"]["triggers"] if t["type"] == "cron" and t["metadata"]["start"].endswith(" 0")]
    assert [t["metadata"]["start"] for t in sunday] == ["50 1 * * 0"]
    for monday in (date(2026, 3, 23), date(2026, 6, 1), date(2026, 10, 19)):
        differ = replay(scaled, table, 10, "Europe/Warsaw", monday)
        assert all(got > want for _, got, want in differ), differ  # more, never fewer
        early = [when for when, *_ in differ]
        if monday == date(2026, 3, 23):
            assert early == []  # the night the clocks skip: exact
        else:
            # The hour the move adds, from 01:50 on that Sunday; in October the repeated hour adds another.
            assert len(early) == (120 if monday.month == 10 else 60), early
            assert "T01:50:30" in early[0] and "T02:49:30" in early[-1], early


def test_json_format_holds_the_same_windows_as_the_triggers(capcon):
    path = PLANS / "chat-8b-l40s.yaml"
    code, out, err = capcon("plan", path, "--schedule", "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    plan = load_plan(str(path))
    floor, found = windows(schedule(plan), plan.timezone, 2026)
    assert document["min_replicas"] == floor
    assert [(w["start_cron"], w["end_cron"], w["replicas"]) for w in document["windows"]] == [
        (cron(w.start), cron(w.end), w.replicas) for w in found
    ]
    assert document["replicas_by_hour"] == [list(day) for day in schedule(plan).replicas_by_hour]
    assert document["reactive_shortfall"]["minutes_week"] == reactive_shortfall(schedule(plan)).minutes_week


@pytest.mark.parametrize(
    "args, message",
    [
        (("--format", "keda"), "--format keda: needs --schedule"),
        (("--schedule", "--format", "json", "--json"), "choose one"),
        (("--prometheus", "http://p:9090"), "--prometheus: only with --format keda"),
        (("--schedule", "--format", "keda", "--prometheus", "http://p", "--max-replicas", "0"), "--max-replicas 0"),
        (("--schedule", "--format", "keda", "--prometheus", "ftp://p"), "not an http(s) URL"),
        (("--schedule", "--format", "keda", "--prometheus", "http://u:secret@p:9090"), "the URL holds credentials"),
    ],
)
def test_bad_format_options_are_one_line_and_exit_2(capcon, args, message):
    code, out, err = capcon("plan", PLANS / "internal-assistant-18rps.yaml", *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err
    assert "secret" not in err  # a password in an argument is never shown back


def test_several_plans_give_one_document_each(capcon):
    paths = [PLANS / "internal-assistant-18rps.yaml", PLANS / "chat-8b-l40s.yaml"]
    code, out, err = capcon("plan", *paths, "--schedule", "--format", "keda", "--prometheus", "http://p:9090")
    assert code == 0, err
    assert [d["metadata"]["annotations"]["capcon.io/plan"] for d in yaml.safe_load_all(out)] == [
        load_plan(str(p)).name for p in paths
    ]
    code, out, err = capcon("plan", *paths, "--schedule", "--format", "json")
    assert code == 0, err
    assert [d["plan"] for d in json.loads(out)["schedules"]] == [load_plan(str(p)).name for p in paths]


HOURLY = st.lists(st.integers(0, 40), min_size=24, max_size=24)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    weekday=HOURLY,
    weekend=HOURLY,
    lead=st.integers(0, 180),
    zone=st.sampled_from(["Europe/Warsaw", "America/Santiago", "Australia/Lord_Howe", "America/New_York"]),
)
def test_any_week_replays_exactly_and_never_short_across_a_change(write_plan, weekday, weekend, lead, zone):
    """Any profile, lead time and zone: never fewer replicas than the schedule asks for, in a week with a change of
    clocks or without; more only for the times moved out of a skipped span (exact when nothing was moved)."""
    chat = {
        "name": "chat",
        "kind": "interactive",
        "arrivals": {"weekday": [float(n) for n in weekday], "weekend": [float(n) for n in weekend]},
        "tokens": {"input_mean": 1000, "input_p95": 3000, "output_mean": 300, "output_max": 1000},
        "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.05},
    }
    chat["arrivals"]["weekday"][12] += 1.0  # a plan has traffic in some hour
    plan = load_plan(str(write_plan({"timezone": zone, "lead_time_minutes": lead, "workloads": [chat]})))
    week = schedule(plan)
    scaled = scaled_object(plan, week, first_year=2026, prometheus_url="http://p:9090")
    info = ZoneInfo(zone)
    changes = [at for at, _ in offset_transitions(zone, 2026, 1)[1]]
    mondays = {datetime.fromtimestamp(at, info).date() for at in changes}
    mondays = {d - timedelta(days=d.weekday()) for d in mondays}
    quiet = next(
        d
        for d in (date(2026, 1, 5) + timedelta(weeks=k) for k in range(52))
        if all(abs(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp() - at) > 9 * 86400 for at in changes)
    )
    # Each time moved out of a skipped span adds at most that span (an hour, or Lord Howe's half hour) a week.
    moves = sum(note.count("moved") for note in scaled["metadata"]["annotations"].values())
    differ = replay(scaled, week.replicas_by_hour, lead, zone, quiet)
    assert all(got > want for _, got, want in differ) and len(differ) <= 60 * moves, (quiet, differ[:5])
    for monday in sorted(mondays):
        differ = replay(scaled, week.replicas_by_hour, lead, zone, monday)
        assert all(got > want for _, got, want in differ), (monday, differ[:5])


def test_a_start_inside_the_hour_the_clocks_repeat_moves_to_the_minute_before(capcon, write_plan):
    """Ready at 01:00 on Sunday with no lead time in New York: on the first Sunday of November 01:00 runs twice and
    KEDA would open the window at the second run, an hour late. Moved to 00:59: a minute early, never short."""
    weekend = [2.0] * 24
    weekend[1:3] = [14.0] * 2
    arrivals = {"weekday": [2.0] * 24, "weekend": weekend}
    chat = {
        "name": "chat",
        "kind": "interactive",
        "arrivals": arrivals,
        "tokens": {"input_mean": 1000, "input_p95": 3000, "output_mean": 300, "output_max": 1000},
        "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.05},
    }
    path = write_plan({"timezone": "America/New_York", "lead_time_minutes": 0, "workloads": [chat]})
    scaled, figures = exported(capcon, path)
    notes = [v for k, v in scaled["metadata"]["annotations"].items() if k != "capcon.io/plan"]
    assert "start moved to sun 00:59: the clocks run sun 01:00 twice" in notes
    for monday in (date(2026, 10, 26), date(2026, 6, 1), date(2026, 3, 2)):
        differ = replay(scaled, figures["replicas_by_hour"], 0, "America/New_York", monday)
        assert all(got > want for _, got, want in differ), (monday, differ[:3])
        assert len([when for when, *_ in differ if "T00:59:30" in when]) == len(differ) <= 2, differ


def test_without_a_prometheus_the_object_holds_the_schedule_alone_and_says_so(capcon):
    code, out, err = capcon("plan", PLANS / "internal-assistant-18rps.yaml", "--schedule", "--format", "keda")
    assert code == 0 and err.count("\n") == 1 and "without the load trigger" in err
    [scaled] = yaml.safe_load_all(out)
    triggers = scaled["spec"]["triggers"]
    assert triggers and {t["type"] for t in triggers} == {"cron"}
    assert "no Prometheus" in scaled["metadata"]["annotations"]["capcon.io/above-plan"]


def test_a_flat_week_without_a_prometheus_says_what_to_run_instead_of_an_empty_object(capcon):
    code, out, err = capcon("plan", PLANS / "assistant-70b.yaml", "--schedule", "--format", "keda")
    assert code == 0 and err == ""
    assert list(yaml.safe_load_all(out)) == []
    assert out.startswith("# assistant-70b: the schedule is flat (2 replicas every hour of the week)")
