"""`capcon history` on a real history file whose traffic the test wrote, so every figure is known beforehand."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from console.cli import main
from console.plan.schedule import replicas_needed
from console.plan.schema import load_plan, parse_plan
from console.store.database import Store, sample_columns
from tests.fleet.test_hourly import FakeReplica
from tests.store.test_series import record

PLAN = "plans/internal-assistant-18rps.yaml"  # Europe/Warsaw
WARSAW = ZoneInfo("Europe/Warsaw")
NINE = datetime(2026, 11, 23, 9, tzinfo=WARSAW).timestamp()  # a Monday
BURST_PER_POLL = 50  # extra requests at each poll from 09:20:00 to 09:24:30


def poll_times():
    """Every 30 s from 09:00 to 12:00, but nothing recorded from 10:00 to 11:00."""
    for i in range(3 * 120):
        at = NINE + 30 * i
        if not NINE + 3600 <= at < NINE + 7200:
            yield at


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("history") / "h.sqlite"
    store = Store.open(path)
    plan = load_plan(PLAN)
    a, b = FakeReplica(), FakeReplica()
    for at in poll_times():
        burst = BURST_PER_POLL if NINE + 20 * 60 <= at < NINE + 25 * 60 else 0
        a.serve(2 + burst, ttft=0.05, prompt=1000.0, output=300.0)
        b.serve(1, ttft=0.3, prompt=3000.0, output=100.0, preempted=1 if at == NINE + 1800 else 0)
        raised = ("kv",) if at == NINE + 40 * 60 else ("queue",) if at == NINE + 130 * 60 else ()
        record(
            store,
            at,
            {"a": a.sample(at, kv=0.95 if at == NINE + 600 else 0.4), "b": b.sample(at)},
            plan=plan,
            raised=raised,
        )
    store.close()
    return str(path)


def run(capsys, *argv):
    code = main(["history", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_hours_show_the_known_burst_p95_flags_load_and_an_unknown_hour(history, capsys):
    code, out, err = run(
        capsys, "--db", history, "--from", "2026-11-23T09:00+01:00", "--to", "2026-11-23T12:00+01:00", "--json"
    )
    assert code == 0, err
    fleet = json.loads(out)["fleets"][0]
    assert fleet["timezone"] == "Europe/Warsaw" and fleet["plan"] == "internal-assistant-18rps"
    nine, ten, eleven = fleet["rows"]
    # a: 2 a poll plus 50 at each of the 10 polls of the burst, b: 1 a poll; ten polls in the busiest five minutes.
    assert math.isclose(nine["busiest_rps"], (10 * 2 + 10 * BURST_PER_POLL + 10 * 1) / 300)
    assert nine["start"] == "2026-11-23T09:00:00+01:00"
    # b's slow third of requests outside the burst: the fleet p95 sits in b's bucket (0.25, 0.5].
    assert 0.25 < nine["ttft_p95_seconds"] <= 0.5
    assert nine["kv_usage_max"] == 0.95
    assert nine["preemptions"] == 1
    assert nine["flags_raised"] == 1 and nine["flags_by_kind"] == {"kv": 1}
    capacity = (
        replicas_needed(load_plan(PLAN), 18.0) * load_plan(PLAN).capacity.rps_per_replica
    )  # Monday 09:00 plans 18 rps
    assert nine["planned_capacity_rps"] == capacity
    assert math.isclose(nine["load"], nine["busiest_rps"] / capacity)
    for key in ("busiest_rps", "ttft_p95_seconds", "kv_usage_max", "preemptions", "flags_raised", "load"):
        assert ten[key] is None, key
    assert eleven["flags_by_kind"] == {"queue": 1}
    assert math.isclose(eleven["busiest_rps"], 3 / 30)


def test_a_day_line_fits_80_columns_and_unknown_shows_as_a_dash(history, capsys):
    code, out, _ = run(
        capsys, "--db", history, "--from", "2026-11-22T00:00+01:00", "--to", "2026-11-24T00:00+01:00", "--by", "day"
    )
    assert code == 0
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    sunday = next(line for line in lines if line.startswith("Sun 11-22"))
    monday = next(line for line in lines if line.startswith("Mon 11-23"))
    assert set(sunday.split()[2:]) == {"–"}
    assert "1.77" in monday.split()  # the busiest five minutes of the day: 530 requests / 300 s


def test_the_hour_table_names_flag_kinds(history, capsys):
    code, out, _ = run(
        capsys, "--db", history, "--from", "2026-11-23T09:00+01:00", "--to", "2026-11-23T12:00+01:00", "--tz", "UTC"
    )
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("Mon 11-23")]
    assert [row.split()[2] for row in rows] == ["08:00", "09:00", "10:00"]  # cut on UTC's clock as asked
    assert rows[0].endswith("kv") and rows[2].endswith("queue")


def test_the_week_against_the_plan_suggests_a_profile_that_pastes_back(history, capsys):
    code, out, _ = run(
        capsys,
        "--db",
        history,
        "--from",
        "2026-11-23T00:00+01:00",
        "--to",
        "2026-11-30T00:00+01:00",
        "--plan",
        PLAN,
        "--json",
    )
    assert code == 0
    fleet = json.loads(out)["fleets"][0]
    monday_nine = fleet["hours"][9]
    assert (monday_nine["weekday"], monday_nine["hour"]) == ("mon", 9)
    assert math.isclose(monday_nine["observed_rps"], 530 / 300)
    assert monday_nine["planned_rps"] == 18
    assert fleet["hours"][10]["observed_rps"] is None
    # Prompts: a sends 1,000-token prompts, b 3,000; weighted by the requests each served. Each recorded stretch
    # counts from its first poll (what was served before it is not in the recording): 2 x 119 polls.
    counted_polls = 2 * (120 - 1)
    a_requests, b_requests = 2 * counted_polls + 10 * BURST_PER_POLL, counted_polls
    expected_input = (a_requests * 1000 + b_requests * 3000) / (a_requests + b_requests)
    assert math.isclose(fleet["observed_input_mean"], expected_input, rel_tol=1e-9)
    plan = load_plan(PLAN)
    pasted = re.sub(r"(?ms)^workloads:.*?(?=^\S)", lambda _: fleet["suggested_yaml"], plan.source_text, count=1)
    edited = parse_plan(pasted, PLAN).workloads[0]
    assert edited.rps_by_hour[0][9] == round(530 / 300, 3)
    assert edited.rps_by_hour[0][10] == plan.workloads[0].rps_by_hour[0][10]
    assert edited.tokens.input_mean == round(expected_input)

    code, text, _ = run(
        capsys, "--db", history, "--from", "2026-11-23T00:00+01:00", "--to", "2026-11-30T00:00+01:00", "--plan", PLAN
    )
    assert "mon 09:00" in text and "workloads:" in text and "mean input tokens: observed" in text


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--from", "yesterday"], "--from 'yesterday' is not a time"),
        (["--from", "now", "--to", "-1h"], "is not before --to"),
        (["--fleet", "nope"], "--fleet 'nope': not in"),
        (["--tz", "Mars/Olympus"], "unknown time zone"),
        (["--plan", "no-such-plan.yaml"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(history, capsys, argv, words):
    code, _out, err = run(capsys, "--db", history, *argv)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_missing_file_is_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "--db", str(tmp_path / "none.sqlite"))
    assert code == 2 and "no such history file" in err and len(err.strip().splitlines()) == 1


def test_an_empty_range_says_so_and_exits_0(history, capsys):
    code, out, _ = run(capsys, "--db", history, "--from", "2026-11-01T00:00+01:00", "--to", "2026-11-02T00:00+01:00")
    assert code == 0
    assert out.strip() == (
        "fleet chat: no samples from 2026-11-01 00:00 to 2026-11-02 00:00 (Europe/Warsaw); "
        "recorded from 2026-11-23 09:00:00 to 2026-11-23 11:59:30"
    )


def test_without_a_range_the_last_recorded_day_shows_from_its_first_recorded_hour(history, capsys):
    # The recording ended days ago: the default span ends at its last poll, and starts with its first hour.
    code, out, err = run(capsys, "--db", history, "--json")
    assert code == 0, err
    rows = json.loads(out)["fleets"][0]["rows"]
    assert rows[0]["start"] == "2026-11-23T09:00:00+01:00"
    assert rows[-1]["start"] == "2026-11-23T11:00:00+01:00"
    assert rows[1]["busiest_rps"] is None  # the gap from 10:00 to 11:00 stays in, as unknown


def test_a_recording_shorter_than_five_minutes_is_marked_and_not_fitted_to_the_plan(tmp_path, capsys):
    path = tmp_path / "short.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    for i in range(7):  # three minutes at 30 s
        replica.serve(3)
        record(store, NINE + 30 * i, {"a": replica.sample(NINE + 30 * i)}, plan=load_plan(PLAN))
    store.close()
    code, out, err = run(
        capsys, "--db", str(path), "--from", "2026-11-23T09:00+01:00", "--to", "2026-11-23T10:00+01:00"
    )
    assert code == 0, err
    assert re.search(r"Mon 11-23 09:00 partial\s+0\.10\*", out), out
    assert "under five minutes recorded" in out
    code, out, err = run(
        capsys, "--db", str(path), "--plan", PLAN, "--from", "2026-11-23T00:00+01:00", "--to", "2026-11-24T00:00+01:00"
    )
    assert code == 0, err
    assert "no hour holds five recorded minutes" in out


@pytest.mark.parametrize("offset", [0, 10, 35])
def test_a_90_second_recording_shows_its_rate_marked_short_with_a_legend(tmp_path, capsys, offset):
    """A console run of 90 s at 2 s: per-minute points (each minute's last poll) can lie under a minute apart.

    Its requests were counted in the JSON while the text showed `busy rps –`: the rate over what
    was recorded is the requests between the points over the seconds between them, marked `*`.
    """
    path = tmp_path / "ninety.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    for i in range(46):  # 0 to 90 s, one request a poll: 0.5 rps
        at = NINE + offset + 2 * i
        replica.serve(1)
        record(store, at, {"a": replica.sample(at)}, plan=load_plan(PLAN))
    store.close()
    code, out, err = run(capsys, "--db", str(path), "--json")
    assert code == 0, err
    (row,) = rows_of(out)
    assert row["requests"] > 0 and math.isclose(row["busiest_rps"], 0.5)
    assert 0 < row["busiest_seconds"] < 300 and math.isclose(
        row["requests"], row["busiest_rps"] * row["busiest_seconds"]
    )
    code, text, err = run(capsys, "--db", str(path))
    assert code == 0, err
    assert re.search(r"^Mon 11-23 09:00 partial\s+0\.50\*\s", text, re.M), text
    seconds = f"{row['busiest_seconds']:.0f} s"
    assert (
        f"* under five minutes recorded in that span: the rate over what was recorded\n  ({seconds}), not a busiest five minutes."
        in text
    )
    code, day, _ = run(capsys, "--db", str(path), "--by", "day")
    assert re.search(r"^Mon 11-23 partial\s+0\.50\*\s", day, re.M) and all(len(line) <= 80 for line in day.splitlines())


# --- the end of the default range, typed times out of range, the recorded plan clock -------------


def rows_of(out: str) -> list[dict]:
    return json.loads(out)["fleets"][0]["rows"]


def test_without_to_the_last_recorded_poll_is_counted(history, capsys):
    code, out, err = run(capsys, "--db", history, "--from", "2026-11-23T09:00+01:00", "--json")
    assert code == 0, err
    default = rows_of(out)
    code, out, err = run(
        capsys, "--db", history, "--from", "2026-11-23T09:00+01:00", "--to", "2026-11-23T12:00+01:00", "--json"
    )
    assert code == 0, err
    explicit = rows_of(out)
    # From the stretch's first poll at 11:00:00 to 11:59:30: 119 polls of 3 requests, the last included.
    assert default[-1]["requests"] == explicit[-1]["requests"] == 119 * 3
    assert sum(r["requests"] or 0 for r in default) == sum(r["requests"] or 0 for r in explicit)


def test_without_to_a_rolled_up_last_minute_is_counted(tmp_path, capsys):
    path = tmp_path / "rolled.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    record(store, NINE, {"a": replica.sample(NINE)}, plan=load_plan(PLAN))  # names the fleet, its replica and its plan
    fleet_id = store.fleet_id("chat")
    replica_id = store.connection.execute("SELECT id FROM replicas WHERE fleet_id = ?", (fleet_id,)).fetchone()[0]
    with store._transaction():
        store.connection.execute("DELETE FROM samples")
        store.connection.execute("DELETE FROM polls")
        for minute in range(10):  # ten rolled-up minutes, each's last sample at :55
            replica.serve(4)
            row = sample_columns(replica.sample(NINE + 60 * minute + 55), store._layout_id)
            row.update(
                replica_id=replica_id,
                minute=NINE + 60 * minute,
                fleet_id=fleet_id,
                samples=6,
                running_max=1.0,
                waiting_max=0.0,
                kv_usage_max=0.5,
                state="up",
                error=None,
                fetched_at=NINE + 60 * minute + 55,
            )
            store.db["minutes"].insert(row)
    store.close()
    code, out, err = run(capsys, "--db", str(path), "--json")
    assert code == 0, err
    (row,) = rows_of(out)
    assert row["requests"] == 9 * 4  # nine steps between ten minutes: the last minute's included


@pytest.fixture
def recent(tmp_path):
    """Polls every 30 s from three hours ago to two hours ago (the real clock): a recorder stopped two hours ago."""
    import time

    path = tmp_path / "recent.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    begin = (time.time() - 3 * 3600) // 60 * 60  # on a minute boundary: each minute's last poll is its :30 one
    for i in range(121):
        replica.serve(2)
        record(store, begin + 30 * i, {"a": replica.sample(begin + 30 * i)})
    store.close()
    return str(path)


def test_a_relative_from_counts_back_from_now_not_from_the_last_poll(recent, capsys):
    code, out, err = run(capsys, "--db", recent, "--from", "-30m")
    assert code == 0, err
    assert out.startswith("fleet chat: no samples from ") and " on (" in out and "; recorded from " in out
    code, out, err = run(capsys, "--db", recent, "--from", "-4h", "--json")
    assert code == 0, err
    # From the first poll to the last: 120 polls of 2 requests (the first poll's own were served before it).
    assert sum(r["requests"] or 0 for r in rows_of(out)) == 120 * 2


def test_a_from_after_the_last_poll_without_to_is_an_empty_range_not_an_error(recent, capsys):
    code, out, err = run(capsys, "--db", recent, "--from", "now")
    assert code == 0, err
    assert out.startswith("fleet chat: no samples from ") and err == ""
    code, out, err = run(capsys, "--db", recent, "--from", "now", "--plan", PLAN)
    assert code == 0, err
    assert "no samples from " in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--from", "99999999999999999999"],
        ["--from", "-99999999999999999999d"],
        ["--to", "99999999999999999999"],
        ["--from", "0001-01-01T00:00+01:00", "--to", "now"],
    ],
)
def test_times_beyond_what_a_clock_holds_are_one_line_errors(history, capsys, argv):
    code, out, err = run(capsys, "--db", history, *argv)
    assert code == 2 and out == ""
    assert "1970 to 9999" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.timeout(60)
def test_a_range_of_centuries_shows_the_recorded_part_and_says_so(history, capsys):
    code, out, err = run(capsys, "--db", history, "--from", "2026-11-20", "--to", "2200-01-01", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert [r["start"] for r in shown["fleets"][0]["rows"]] == [
        "2026-11-23T09:00:00+01:00",
        "2026-11-23T10:00:00+01:00",
        "2026-11-23T11:00:00+01:00",
    ]
    assert any("longer than a year" in note for note in shown["notes"])
    code, out, err = run(capsys, "--db", history, "--from", "2026-11-20", "--to", "2200-01-01", "--by", "day")
    assert code == 0, err
    assert out.startswith("note: the range ") and "Mon 11-23" in out


def test_load_and_capacity_are_read_at_the_recorded_plan_clock(tmp_path, capsys):
    from console.fleet.plan_now import week_time
    from console.plan.schedule import capacity_at
    from console.store.records import PollRecord
    from console.targets import TargetResult
    from tests.store.test_series import url

    plan = load_plan("plans/chat-8b-l40s.yaml")
    path = tmp_path / "demo.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    three = datetime(2026, 11, 23, 3, tzinfo=ZoneInfo(plan.timezone)).timestamp()  # Monday 03:00 on the wall clock
    wednesday_two_pm = week_time(2 * 86400 + 14 * 3600)  # the simulated week the demo showed
    for i in range(21):
        at = three + 30 * i
        replica.serve(60)
        result = TargetResult("a", url("a"), "up", replica.sample(at), "", at)
        store.write_poll(
            PollRecord("chat", at, at, "scrape", 60.0, 30.0, (result,), plan=plan, plan_clock=wednesday_two_pm + 30 * i)
        )
    store.close()
    code, out, err = run(capsys, "--db", str(path), "--json")
    assert code == 0, err
    (row,) = rows_of(out)
    replicas, capacity = capacity_at(plan, 2, 14)
    assert capacity != capacity_at(plan, 0, 3)[1]  # the wall clock's hour would plan otherwise
    assert row["planned_capacity_rps"] == capacity and row["planned_replicas"] == replicas
    assert math.isclose(row["load"], row["busiest_rps"] / capacity)


# --- a recording's first, partial minute -------------------------------------------------------


def test_a_recording_started_mid_minute_counts_its_first_partial_minute_and_is_marked_partial(tmp_path, capsys):
    """A 150 s recording started during an incident: the slow requests of its first 45 s are real.

    Each minute's last poll alone counted from 09:05:59: the row showed the calm minutes' TTFT
    beside a raised slo_breach_ttft flag, three quarters of the requests left out.
    """
    path = tmp_path / "incident.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    begin = NINE + 5 * 60 + 15  # 09:05:15
    for i in range(76):  # 150 s at 2 s
        at = begin + 2 * i
        slow = at < NINE + 6 * 60
        replica.serve(9 if slow else 1, ttft=2.0 if slow else 0.3)
        record(
            store, at, {"a": replica.sample(at)}, plan=load_plan(PLAN), raised=("slo_breach_ttft",) if i == 3 else ()
        )
    store.close()
    code, out, err = run(capsys, "--db", str(path), "--json")
    assert code == 0, err
    (row,) = rows_of(out)
    # 23 polls before 09:06 (9 slow requests each), 53 after (1 each); the first poll's were served before it.
    assert row["requests"] == 22 * 9 + 53
    assert row["ttft_p95_seconds"] > load_plan(PLAN).workloads[0].targets.ttft_p95_seconds  # beside its flag
    assert row["flags_by_kind"] == {"slo_breach_ttft": 1}
    assert row["partial"] is True and row["recorded_seconds"] == 150
    code, text, err = run(capsys, "--db", str(path))
    assert code == 0, err
    assert re.search(r"^Mon 11-23 09:00 partial\s", text, re.M), text
    assert "partial: only part of that hour is recorded" in text
    code, day, err = run(capsys, "--db", str(path), "--by", "day", "--json")
    assert code == 0, err
    (row,) = rows_of(day)
    assert row["partial"] is True and row["requests"] == 22 * 9 + 53


def test_wholly_recorded_hours_are_not_partial_and_a_cut_or_part_day_is(history, capsys):
    span = ("--from", "2026-11-23T09:00+01:00", "--to", "2026-11-23T12:00+01:00")
    code, out, err = run(capsys, "--db", history, *span, "--json")
    assert code == 0, err
    nine, ten, eleven = rows_of(out)
    # Polls every 30 s from 09:00:00: the last falls at 09:59:30, within the hour's last minute.
    assert nine["partial"] is False and math.isclose(nine["recorded_seconds"], 3570)
    assert ten["partial"] is False and ten["recorded_seconds"] is None  # nothing recorded: unknown, not partial
    assert eleven["partial"] is False
    code, out, err = run(
        capsys, "--db", history, "--from", "2026-11-23T09:30+01:00", "--to", "2026-11-23T10:00+01:00", "--json"
    )
    assert code == 0, err
    (cut,) = rows_of(out)
    assert cut["partial"] is True and math.isclose(cut["recorded_seconds"], 1770)
    code, out, err = run(capsys, "--db", history, *span, "--by", "day")
    assert code == 0, err
    assert re.search(r"^Mon 11-23 partial\s", out, re.M) and "partial: only part of that day is recorded" in out
    assert all(len(line) <= 80 for line in out.splitlines())
