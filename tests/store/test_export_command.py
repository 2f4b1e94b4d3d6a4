"""`capcon export` read back with the csv and json modules: the stored values, row for row."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from console.cli import main
from console.plan.schema import load_plan
from console.store.database import Store
from tests.fleet.test_hourly import FakeReplica
from tests.store.test_series import record, url

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
RANGE = ["--from", str(T0), "--to", str(T0 + 600)]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "h.sqlite"
    store = Store.open(path)
    a, b = FakeReplica(), FakeReplica()
    for i in range(40):  # 15-s polls from T0 - 60 to T0 + 525
        at = T0 - 60 + 15 * i
        a.serve(3, ttft=0.05 if i % 4 else 0.7)
        b.serve(1, ttft=0.3)
        record(
            store,
            at,
            {"a": a.sample(at, kv=0.25 + i / 100), "b": b.sample(at) if i != 7 else None},
            plan=load_plan("plans/chat-8b-l40s.yaml"),
            raised=("kv",) if i == 20 else (),
        )
    store.write_event(T0 + 100, "recording-started", None, "recorder", {"interval": 15})
    store.close()
    return str(path)


def export(capsys, history, *argv):
    code = main(["export", "--db", history, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_samples_as_csv_match_the_stored_samples(history, capsys):
    code, out, _ = export(capsys, history, *RANGE, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 36 * 2  # polls at T0 .. T0 + 525, two replicas each
    store = Store.open(history, read_only=True)
    polls = store.poll_times("chat", T0, T0 + 600)
    expected = [(at, r) for _, at in polls for r in store.poll(_).results]
    for row, (at, result) in zip(rows, expected):
        assert float(row["unix"]) == at and row["url"] == result.url and row["state"] == result.state
        if result.sample is None:
            assert row["requests"] == "" and row["ttft_count"] == ""  # unknown is empty, never 0
            continue
        assert float(row["requests"]) == result.sample.counters["requests"]
        assert float(row["kv_usage"]) == result.sample.kv_usage_by_engine["0"]
        assert float(row["ttft_count"]) == result.sample.histograms["ttft"].count
        assert float(row["ttft_sum"]) == result.sample.histograms["ttft"].sum
    assert rows[0]["time"].startswith("20") and rows[0]["resolution"] == "poll"


def test_samples_as_jsonl_carry_the_buckets(history, capsys):
    code, out, _ = export(capsys, history, *RANGE, "--format", "jsonl", "--fleet", "chat")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    first_a = next(r for r in rows if r["url"] == url("a"))
    # 5 polls (T0 - 60 .. T0) of 3 requests: 15, of which the 0.7-second ones came at polls 0 and 4.
    assert first_a["requests"] == 15
    assert first_a["ttft_buckets"]["+Inf"] == 15 and first_a["ttft_buckets"]["0.1"] == 15 - 6
    assert math.isclose(first_a["kv_usage"], 0.25 + 4 / 100)


def test_flags_and_events(history, capsys):
    _, out, _ = export(capsys, history, *RANGE, "--format", "csv", "--what", "flags")
    flags = list(csv.DictReader(io.StringIO(out)))
    assert [(f["kind"], f["change"], float(f["unix"])) for f in flags] == [("kv", "raised", T0 - 60 + 15 * 20)]
    _, out, _ = export(capsys, history, *RANGE, "--format", "jsonl", "--what", "events")
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["kind"], e["detail"]) for e in events] == [("recording-started", {"interval": 15})]


def test_figures_replay_the_polls(history, capsys, tmp_path):
    target = tmp_path / "figures.jsonl"
    code, out, _ = export(capsys, history, *RANGE, "--format", "jsonl", "--what", "figures", "--output", str(target))
    assert code == 0 and out == ""
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    fleet_rows = [r for r in rows if r["subject"] == "fleet"]
    assert len(fleet_rows) == 36
    # The window reaches back over the lead-in: at T0 + 300 both replicas are steady, 3 + 1 requests per 15 s.
    at_300 = next(r for r in fleet_rows if r["unix"] == T0 + 300)
    assert math.isclose(at_300["requests_per_second"], 4 / 15)


def test_an_empty_range_writes_only_the_header(history, capsys):
    code, out, err = export(capsys, history, "--from", str(T0 + 9000), "--to", str(T0 + 9600), "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("time,unix,fleet") and len(out.splitlines()) == 1
    assert "no samples" in err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--from", "tomorrowish", "--to", "now", "--format", "csv"], "--from 'tomorrowish' is not a time"),
        ([*RANGE, "--format", "xlsx"], "--format 'xlsx': expected csv or jsonl"),
        ([*RANGE, "--format", "csv", "--what", "everything"], "expected one of samples, flags, events, figures"),
        ([*RANGE, "--format", "csv", "--fleet", "other"], "--fleet 'other': not in"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(history, capsys, argv, words):
    code, _, err = export(capsys, history, *argv)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_a_missing_db_is_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = export(capsys, str(tmp_path / "missing.sqlite"), *RANGE, "--format", "csv")
    assert code == 2 and "no such history file" in err


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """A console stopped and started again 8 s later, then killed and restarted at once (no stop, no gap)."""
    from tests.replay.recording import T0 as R0
    from tests.replay.recording import Incident, record_synthetic

    path = tmp_path_factory.mktemp("runs") / "history.sqlite"
    queueing = Incident(down_replica=None, queue_from=60.0, queue_until=150.0)

    def event(at, kind, pid):
        store = Store.open(path)
        store.write_event(at, kind, detail={"pid": pid, "fleets": ["assistant"], "interval": 5.0})
        store.close()

    event(R0 - 1.0, "recording_started", 1)
    first = record_synthetic(path, 200.0, replicas=3, interval=5.0, incident=queueing, plan_path=None)
    event(R0 + 201.0, "recording_stopped", 1)
    event(R0 + 207.0, "recording_started", 2)
    second = record_synthetic(
        path, 200.0, interval=5.0, start=R0 + 208.0, incident=queueing, plan_path=None, carry_on=first
    )
    event(R0 + 409.0, "recording_started", 3)
    third = record_synthetic(
        path, 200.0, interval=5.0, start=R0 + 413.0, incident=queueing, plan_path=None, carry_on=first
    )
    return str(path), R0, first.views + second.views + third.views


def _replayed(path, start):
    """The fleet figures a replay opened at `start` shows at each poll from there on, by poll id."""
    from console.replay.fleet_replay import FleetReplay
    from console.replay.loader import open_replay

    replay = open_replay(path, start=start)
    try:
        (fleet,) = replay.fleets
        fleet_replay, shown = FleetReplay(fleet), {}
        for index in range(fleet.first, fleet.last + 1):
            fleet_replay.go_to(index)
            shown[fleet.ids[index]] = fleet_replay.view.figures
        return shown
    finally:
        replay.close()


def _as_exported(value):
    return json.loads(json.dumps(value, default=str))


@pytest.mark.parametrize("offset", [0.0, 300.0])
def test_figures_are_the_replays_poll_by_poll_across_console_restarts(three_runs, capsys, offset):
    path, start, live = three_runs
    code, out, _ = export(
        capsys,
        path,
        "--from",
        str(start + offset),
        "--to",
        str(start + 700.0),
        "--format",
        "jsonl",
        "--what",
        "figures",
    )
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    shown = _replayed(path, start + offset)
    assert sorted({r["poll"] for r in rows}) == sorted(shown)
    for row in rows:
        figures = shown[row["poll"]]
        subject = (
            figures.fleet
            if row["subject"] == "fleet"
            else next(r for r in figures.replicas if r.name == row["subject"])
        )
        for name in (
            "requests_per_second",
            "ttft_p95_seconds",
            "queue_p95_seconds",
            "waiting",
            "state",
            "kv_usage",
            "requests_per_second_by_reason",
        ):
            assert row[name] == _as_exported(getattr(subject, name)), f"poll {row['poll']} {row['subject']} {name}"
    if offset == 0.0:
        # From the start, the replay is the whole recording: the figures the live consoles showed.
        fleet_rows = [r for r in rows if r["subject"] == "fleet"]
        assert [r["requests_per_second"] for r in fleet_rows] == [v.figures.fleet.requests_per_second for v in live]
        restarts = [i for i, v in enumerate(live) if i and v.figures.fleet.requests_per_second is None]
        assert len(restarts) == 2, "each new console run starts without a window, as it did live"


@pytest.fixture(scope="module")
def two_fleets(tmp_path_factory):
    """Two recorders' sessions in one file: their start and stop events name their fleets only in the detail."""
    path = tmp_path_factory.mktemp("export-events") / "h.sqlite"
    store = Store.open(path)
    a = FakeReplica()
    for fleet in ("chat", "code"):
        record(store, T0 + 10, {"a": a.sample(T0 + 10)}, fleet=fleet)
    store.write_event(T0 + 1, "recording_started", None, None, {"pid": 11, "command": "record", "fleets": ["chat"]})
    store.write_event(T0 + 2, "recording_started", None, None, {"pid": 12, "command": "watch", "fleets": ["code"]})
    store.write_event(
        T0 + 3, "recording_started", None, None, {"pid": 13, "command": "record", "fleets": ["chat", "code"]}
    )
    store.write_event(T0 + 4, "overflow", "code", "a", {"switched": "on"})
    store.write_event(T0 + 5, "note", None, None, {"text": "no fleet at all"})
    store.close()
    return str(path)


def test_events_of_one_fleet_leave_out_the_other_fleets_sessions(two_fleets, capsys):
    code, out, _ = export(capsys, two_fleets, *RANGE, "--format", "jsonl", "--what", "events", "--fleet", "chat")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    # pid 12 recorded only "code", and the overflow is code's: neither is chat's.
    assert [(e["kind"], e["detail"].get("pid")) for e in events] == [
        ("recording_started", 11),
        ("recording_started", 13),
        ("note", None),
    ]


def test_the_events_fleet_column_names_the_detail_fleets(two_fleets, capsys):
    code, out, _ = export(capsys, two_fleets, *RANGE, "--format", "csv", "--what", "events")
    assert code == 0
    fleets = [row["fleet"] for row in csv.DictReader(io.StringIO(out))]
    assert fleets == ["chat", "code", "chat,code", "code", ""]


def test_flags_carry_an_iso_since_beside_the_unix_one(history, capsys):
    _, out, _ = export(capsys, history, *RANGE, "--format", "csv", "--what", "flags")
    header, *rows = list(csv.reader(io.StringIO(out)))
    assert header.index("since_time") == header.index("since") - 1
    assert all(len(row) == len(header) for row in rows)
    flag = dict(zip(header, rows[0]))
    raised_at = T0 - 60 + 15 * 20
    assert float(flag["since"]) == raised_at
    assert flag["since_time"] == flag["time"]  # raised at that poll: since then
