"""Per-minute series read back from a real history file: raw samples, rollups, flags and the plan in force."""

from __future__ import annotations

from console.fleet.flags import Flag
from console.plan.schema import load_plan
from console.store.database import Store, sample_columns
from console.store.records import FlagChange, PollRecord
from console.store.series import minute_series, plan_id_in_force, raised_flags, recorded_span
from console.targets import TargetResult
from tests.fleet.test_hourly import FakeReplica

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def url(name: str) -> str:
    return f"http://{name}.test:8000/metrics"


def record(store: Store, at: float, samples: dict, fleet: str = "chat", plan=None, raised: tuple[str, ...] = ()) -> int:
    results = tuple(
        TargetResult(name, url(name), "up" if sample is not None else "down", sample, "" if sample else "refused", at)
        for name, sample in samples.items()
    )
    changes = tuple(
        FlagChange("raised", Flag(f"{kind}:fleet", kind, "fleet", "warning", at, "why", "todo"), None)
        for kind in raised
    )
    return store.write_poll(PollRecord(fleet, at, at, "scrape", 60.0, 10.0, results, plan=plan, flag_changes=changes))


def test_raw_samples_give_the_last_sample_of_each_minute_with_the_minutes_peaks(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    replica = FakeReplica()
    for step in range(18):  # three minutes at a 10-second interval
        at = T0 + 10 * step
        replica.serve(1)
        kv = 0.9 if step == 7 else 0.3
        record(store, at, {"r1": replica.sample(at, kv=kv, running=float(step)), "r2": None})
    series = minute_series(Store.open(tmp_path / "h.sqlite", read_only=True), "chat", T0, T0 + 180)
    assert list(series) == [url("r1")]  # r2 never answered: no points
    points = series[url("r1")]
    assert [p.at for p in points] == [T0 + 50, T0 + 110, T0 + 170]
    assert [p.sample.counters["requests"] for p in points] == [6, 12, 18]
    assert [p.kv_usage_max for p in points] == [0.3, 0.9, 0.3]
    assert [p.running_max for p in points] == [5.0, 11.0, 17.0]
    assert points[1].sample.histograms["ttft"].count == 12


def test_rollups_fill_older_minutes_and_raw_samples_win_where_both_exist(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    replica = FakeReplica()
    replica.serve(5)
    record(store, T0 + 170, {"r1": replica.sample(T0 + 170)})  # creates the fleet and replica; minute 2 is raw
    fleet_id, replica_id = store.fleet_id("chat"), 1
    rollups = []
    for minute in (0, 1, 2):
        replica.serve(1)
        rollups.append(replica.sample(T0 + 60 * minute + 55))
    with store._transaction():
        for minute, sample in zip((0, 1, 2), rollups):
            row = sample_columns(sample, store._layout_id)
            row.update(
                replica_id=replica_id,
                minute=T0 + 60 * minute,
                fleet_id=fleet_id,
                samples=6,
                running_max=9.0,
                waiting_max=1.0,
                kv_usage_max=0.8,
                state="up",
                error=None,
                fetched_at=sample.at,
            )
            store.db["minutes"].insert(row)
    points = minute_series(store, "chat", T0, T0 + 180)[url("r1")]
    assert [p.at for p in points] == [T0 + 55, T0 + 115, T0 + 170]
    assert [p.running_max for p in points] == [9.0, 9.0, 3.0]
    assert points[2].sample.counters["requests"] == 5  # minute 2 from the raw sample, not its rollup
    assert recorded_span(store, "chat") == (T0, T0 + 170)


def test_raised_flags_and_the_plan_in_force(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    plan = load_plan("plans/chat-8b-l40s.yaml")
    replica = FakeReplica()
    record(store, T0, {"r1": replica.sample(T0)})
    record(store, T0 + 60, {"r1": replica.sample(T0 + 60)}, plan=plan, raised=("kv", "queue"))
    record(store, T0 + 4000, {"r1": replica.sample(T0 + 4000)}, raised=("kv",))
    assert raised_flags(store, "chat", T0, T0 + 3600) == [(T0 + 60, "kv"), (T0 + 60, "queue")]
    assert raised_flags(store, "other", T0, T0 + 9000) == []
    plan_id = plan_id_in_force(store, "chat", T0, T0 + 3600)
    assert store.plan_version(plan_id).text == plan.source_text
    assert plan_id_in_force(store, "chat", T0 + 3600, T0 + 7200) is None
    assert minute_series(store, "nobody", T0, T0 + 60) == {}


def test_the_recorded_end_keeps_the_last_poll_and_a_rolled_up_minute_whole(tmp_path):
    import math

    from console.store.series import plan_clocks, recorded_end

    store = Store.open(tmp_path / "h.sqlite")
    replica = FakeReplica()
    assert recorded_end(store, "chat") is None
    record(store, T0 + 300, {"r1": replica.sample(T0 + 300)})
    end = recorded_end(store, "chat")
    assert end > T0 + 300 and end == math.nextafter(T0 + 300, math.inf)  # [start, end) holds the last poll
    assert plan_clocks(store, "chat", T0, end) == []  # a poll without a plan clock
    fleet_id = store.fleet_id("chat")
    replica_id = store.connection.execute("SELECT id FROM replicas").fetchone()[0]
    with store._transaction():
        row = sample_columns(replica.sample(T0 + 655), store._layout_id)
        row.update(
            replica_id=replica_id,
            minute=T0 + 600,
            fleet_id=fleet_id,
            samples=6,
            running_max=1.0,
            waiting_max=0.0,
            kv_usage_max=0.5,
            state="up",
            error=None,
            fetched_at=T0 + 655,
        )
        store.db["minutes"].insert(row)
    assert recorded_end(store, "chat") == T0 + 660  # the whole last rolled-up minute
    assert recorded_span(store, "chat") == (T0 + 300, T0 + 600)
