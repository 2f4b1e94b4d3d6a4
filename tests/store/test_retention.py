"""Retention on a real file: three days of 5-second samples of three replicas, rolled up and trimmed.

The samples are synthetic but deterministic, with the awkward cases in them: a
replica down for stretches (some minutes wholly), a restart, a plan in force,
flag events and events. Expectations are computed from the generated samples,
never from the store.
"""

from __future__ import annotations

import math
import random
import shutil
import sqlite3
from dataclasses import dataclass

import pytest

from console.fleet.flags import Flag
from console.metrics.vllm import Histogram, ReplicaSample, restarted
from console.metrics.window import replica_figures
from console.plan.schema import load_plan
from console.store.database import SAMPLE_READ_COLUMNS, HistoryError, Store, sample_from_columns
from console.store.records import FlagChange, PollRecord
from console.store.retention import Retention, apply_retention, minute_of, retention_in_force
from console.targets import TargetResult
from tests.metrics.pages import REPO

HOUR = 3600.0
DAY = 86400.0
T0 = 1_800_000_000.0  # a whole hour (and day) in unix seconds
STEP = 5.0
DAYS = 3
REPLICAS = ("r0", "r1", "r2")
RESTART_AT = 5000  # r1's process restarts at this poll (day 1, about 7 h in)
NOW = T0 + DAYS * DAY
LATENCY_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, math.inf)
LENGTH_BOUNDS = (16.0, 64.0, 256.0, 1024.0, 4096.0, math.inf)

pytestmark = pytest.mark.timeout(180)


def poll_time(k: int) -> float:
    return T0 + STEP * k + (k % 3) * 0.125  # not on whole seconds, as a real poll never is


def answers(replica: int, k: int) -> bool:
    """r2 misses stretches: 50 s every 20 minutes, and the first two minutes of every hour."""
    return replica != 2 or not (100 <= k % 240 < 110 or k % 720 < 24)


@dataclass
class _Process:
    """One replica's cumulative state, advanced one poll at a time."""

    rng: random.Random
    start: float
    counters: dict
    buckets: dict
    sums: dict

    @classmethod
    def fresh(cls, seed: int, start: float) -> _Process:
        return cls(
            random.Random(seed),
            start,
            dict.fromkeys(("requests", "prompt_tokens", "generation_tokens", "preemptions"), 0.0),
            {},
            {},
        )

    def observe(self, name: str, bounds, values) -> None:
        counts = self.buckets.setdefault(name, [0.0] * len(bounds))
        for value in values:
            for i, bound in enumerate(bounds):
                if value <= bound:
                    counts[i] += 1
        self.sums[name] = self.sums.get(name, 0.0) + sum(values)

    def step(self) -> None:
        finished = self.rng.randint(0, 6)
        prompts = [float(self.rng.choice((12, 40, 200, 900, 3000, 5000))) for _ in range(finished)]
        outputs = [float(self.rng.randint(1, 700)) for _ in range(finished)]
        self.counters["requests"] += finished
        self.counters["prompt_tokens"] += sum(prompts)
        self.counters["generation_tokens"] += sum(outputs)
        self.counters["preemptions"] += self.rng.random() < 0.02
        self.observe("ttft", LATENCY_BOUNDS, [self.rng.expovariate(4.0) for _ in range(finished)])
        self.observe("e2e", LATENCY_BOUNDS, [self.rng.expovariate(0.8) for _ in range(finished)])
        self.observe("itl", LATENCY_BOUNDS, [self.rng.expovariate(30.0) for _ in range(int(sum(outputs) // 50))])
        self.observe("prompt_length", LENGTH_BOUNDS, prompts)
        self.observe("output_length", LENGTH_BOUNDS, outputs)

    def sample(self, at: float) -> ReplicaSample:
        histograms = {
            name: Histogram(
                LATENCY_BOUNDS if name in ("ttft", "e2e", "itl") else LENGTH_BOUNDS,
                tuple(counts),
                self.sums[name],
                counts[-1],
            )
            for name, counts in self.buckets.items()
        }
        return ReplicaSample(
            at=at,
            counters=dict(self.counters),
            requests_by_reason={
                "stop": self.counters["requests"] - self.counters["preemptions"],
                "length": self.counters["preemptions"],
            },
            running=float(self.rng.randint(0, 40)),
            waiting=float(self.rng.randint(0, 9) if self.rng.random() < 0.1 else 0),
            kv_usage_by_engine={"0": round(self.rng.random(), 4)},
            kv_capacity_tokens=120_000.0,
            kv_capacity_tokens_by_engine={"0": 120_000.0},
            histograms=histograms,
            start_time=self.start,
        )


def generate():
    """Every poll's results, in order: (k, at, results)."""
    processes = [_Process.fresh(seed, T0 - 100.0) for seed in range(len(REPLICAS))]
    for k in range(int(DAYS * DAY / STEP)):
        at = poll_time(k)
        if k == RESTART_AT:
            processes[1] = _Process.fresh(99, at - 2.0)
        results = []
        for i, name in enumerate(REPLICAS):
            process = processes[i]
            process.step()
            sample = process.sample(at)  # drawn even when not answering, so the data does not depend on outages
            url = f"http://10.0.0.{i + 1}:8000/metrics"
            if answers(i, k):
                results.append(TargetResult(name, url, "up", sample, "", at))
            else:
                results.append(TargetResult(name, url, "down", None, "connection refused", at))
        yield k, at, tuple(results)


@dataclass(frozen=True)
class Expected:
    samples: int
    last: TargetResult  # the last answered result of the minute, or the last result when none answered
    running_max: float | None
    waiting_max: float | None
    kv_usage_max: float | None


def _peak(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def expected_minutes(before: float) -> dict[tuple[str, float], Expected]:
    """What the rollups of polls before `before` must hold, from the generated data."""
    rows: dict[tuple[str, float], list[TargetResult]] = {}
    for _, at, results in generate():
        if at >= before:
            break
        for result in results:
            rows.setdefault((result.name, minute_of(at)), []).append(result)
    expected = {}
    for key, results in rows.items():
        answered = [r.sample for r in results if r.sample is not None]
        expected[key] = Expected(
            len(results),
            next((r for r in reversed(results) if r.sample is not None), results[-1]),
            _peak([s.running for s in answered]),
            _peak([s.waiting for s in answered]),
            _peak([max(s.kv_usage_by_engine.values()) for s in answered]),
        )
    return expected


@pytest.fixture(scope="module")
def three_days(tmp_path_factory):
    """A history file with the generated polls, a plan, flag events and events; built once, copied per test."""
    path = tmp_path_factory.mktemp("retention") / "three-days.sqlite"
    store = Store.open(path)
    plan = load_plan(REPO / "plans" / "chat-8b-l40s.yaml")
    flag = Flag("saturation:r2", "saturation", "r2", "warning", T0, "waiting 4 for 30 s", "add a replica")
    for k, at, results in generate():
        changes = (FlagChange("raised", flag, None),) if k in (10, int(2.9 * DAY / STEP)) else ()
        store.write_poll(PollRecord("f", at, at, "scrape", 60.0, STEP, results, plan=plan, flag_changes=changes))
    store.write_event(T0 + 30.0, "recording_started", fleet="f")
    store.write_event(NOW - HOUR, "recording_started", fleet="f")
    store.close()
    return path


@pytest.fixture
def history(three_days, tmp_path):
    path = tmp_path / "history.sqlite"
    shutil.copy(three_days, path)
    store = Store.open(path)
    yield store
    store.close()


def minute_rows(store: Store) -> dict[tuple[str, float], dict]:
    columns = ("minute", "samples", "running_max", "waiting_max", "kv_usage_max", "plan_id", *SAMPLE_READ_COLUMNS)
    cursor = store.connection.execute(
        f"SELECT r.name, {', '.join('m.' + c for c in columns)} FROM minutes m JOIN replicas r ON r.id = m.replica_id"
    )
    return {(name, values[0]): dict(zip(columns, values)) for name, *values in cursor}


def count(store: Store, table: str) -> int:
    return store.connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def raw_sample_before(store: Store, name: str, at: float) -> ReplicaSample:
    """The last answered raw sample of `name` from polls before `at`, read back through the store."""
    for poll_id, _ in reversed(store.poll_times("f", at - 300.0, at - 1e-6)):
        result = next(r for r in store.poll(poll_id).results if r.name == name)
        if result.sample is not None:
            return result.sample
    raise AssertionError(f"no answered sample of {name} in the five minutes before {at}")


@pytest.mark.slow  # three days of samples to build first: a long run
def test_old_raw_samples_become_minutes_with_the_last_sample_and_the_peaks(history):
    cutoff = NOW - 48 * HOUR
    raw_before = count(history, "samples")
    done = apply_retention(history, NOW, Retention())
    expected = expected_minutes(cutoff)

    assert done.finished
    assert done.deleted_raw == raw_before - count(history, "samples") == sum(e.samples for e in expected.values())
    assert done.rolled == len(expected) == count(history, "minutes") == DAY / 60 * len(REPLICAS)
    oldest = history.connection.execute("SELECT min(at) FROM polls").fetchone()[0]
    assert oldest >= cutoff and oldest - cutoff < STEP, "raw polls from the last 48 h stay, older ones go"
    assert (
        history.connection.execute(
            "SELECT count(*) FROM samples s JOIN polls p ON p.id = s.poll_id WHERE p.at < ?", (cutoff,)
        ).fetchone()[0]
        == 0
    )

    rows = minute_rows(history)
    plan_id = history.connection.execute("SELECT id FROM plans").fetchone()[0]
    fully_down = 0
    for key, want in expected.items():
        row = rows[key]
        assert (row["samples"], row["running_max"], row["waiting_max"], row["kv_usage_max"]) == (
            want.samples,
            want.running_max,
            want.waiting_max,
            want.kv_usage_max,
        ), key
        assert (row["state"], row["fetched_at"], row["plan_id"]) == (want.last.state, want.last.fetched_at, plan_id), (
            key
        )
        if want.last.sample is None:
            fully_down += 1
            assert row["sampled_at"] is None
        else:
            assert sample_from_columns(row, history.bounds) == want.last.sample, key
    assert fully_down == 24 * 2, "r2's wholly-down minutes stay visible as down"


@pytest.mark.slow  # three days of samples to build first: a long run
def test_rates_and_percentiles_over_an_hour_are_the_same_from_minutes_as_from_raw_samples(history):
    # Hours of the first day, including the one with r1's restart; each compared replica by replica.
    hours = [T0 + h * HOUR for h in (1, 6, 7, 15, 22)]
    before = {
        (name, start): replica_figures(
            raw_sample_before(history, name, start), raw_sample_before(history, name, start + HOUR), name, "u"
        )
        for start in hours
        for name in REPLICAS
    }
    apply_retention(history, NOW, Retention())
    assert count(history, "samples") == len(REPLICAS) * 48 * HOUR / STEP, "only the last 48 h of raw samples stay"
    rows = minute_rows(history)
    restarts = 0
    for (name, start), raw in before.items():
        older = sample_from_columns(rows[(name, start - 60.0)], history.bounds)
        newer = sample_from_columns(rows[(name, start + HOUR - 60.0)], history.bounds)
        assert replica_figures(older, newer, name, "u") == raw, (name, start)
        restarts += restarted(older, newer)
        if raw.state == "up":
            assert raw.requests_per_second > 0 and raw.ttft_p95_seconds is not None
    assert restarts == 1, "r1's restart shows between the rollups around it, as between the raw samples"


@pytest.mark.slow  # three days of samples to build first: a long run
def test_a_restart_inside_a_minute_leaves_the_new_process_as_the_minutes_last_sample(history):
    apply_retention(history, NOW, Retention())
    rows = minute_rows(history)
    minute = minute_of(poll_time(RESTART_AT))
    during = sample_from_columns(rows[("r1", minute)], history.bounds)
    previous = sample_from_columns(rows[("r1", minute - 60.0)], history.bounds)
    assert restarted(previous, during)
    assert during.counters["requests"] < previous.counters["requests"] or during.start_time != previous.start_time


@pytest.mark.slow  # three days of samples to build first: a long run
def test_old_rollups_flag_events_and_events_go_and_the_retention_is_remembered(history):
    apply_retention(history, NOW, Retention())
    assert (
        count(history, "minutes") == 3 * 1440 and count(history, "flag_events") == 2 and count(history, "events") == 2
    )
    assert retention_in_force(history) == Retention()

    shorter = Retention(raw_seconds=48 * HOUR, minutes_seconds=60 * HOUR)
    done = apply_retention(history, NOW, shorter)
    assert (done.rolled, done.deleted_raw, done.deleted_rollups, done.deleted_events) == (0, 0, 3 * 12 * 60, 2)
    oldest = history.connection.execute("SELECT min(minute) FROM minutes").fetchone()[0]
    assert oldest == NOW - 60 * HOUR
    assert [e.at for e in history.flag_events("f")] == [poll_time(int(2.9 * DAY / STEP))]
    assert [e.at for e in history.events()] == [NOW - HOUR]
    assert retention_in_force(Store.open(history.path, read_only=True)) == shorter


@pytest.mark.slow  # three days of samples to build first: a long run
def test_running_it_twice_changes_nothing(history):
    apply_retention(history, NOW, Retention(minutes_seconds=60 * HOUR))
    snapshot = {
        t: history.connection.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
        for t in ("minutes", "polls", "flag_events", "events", "settings")
    }
    again = apply_retention(history, NOW, Retention(minutes_seconds=60 * HOUR))
    assert (again.rolled, again.deleted_raw, again.deleted_polls, again.deleted_rollups, again.deleted_events) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert snapshot == {t: history.connection.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in snapshot}
    assert history.connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow  # three days of samples to build first: a long run
def test_work_is_done_an_hour_at_a_time_and_a_bounded_call_resumes(history, tmp_path):
    first = apply_retention(history, NOW, Retention(), max_chunks=1)
    assert not first.finished
    assert first.deleted_polls == HOUR / STEP, "one transaction holds one hour of one fleet"
    calls = 1
    while not apply_retention(history, NOW, Retention(), max_chunks=5).finished:
        calls += 1
        assert calls < 10, "a bounded call must make progress"
    assert count(history, "minutes") == 3 * 1440
    assert history.connection.execute("SELECT min(at) FROM polls").fetchone()[0] >= NOW - 48 * HOUR


@pytest.mark.slow  # three days of samples to build first: a long run
def test_a_reader_sees_consistent_data_while_retention_runs(history):
    reader = Store.open(history.path, read_only=True)
    seen = []
    for _ in range(30):
        done = apply_retention(history, NOW, Retention(), max_chunks=1)
        # Every raw sample the reader cannot find any more is in a rollup already: never both gone.
        raw = reader.connection.execute("SELECT count(*) FROM samples").fetchone()[0]
        rolled = reader.connection.execute("SELECT coalesce(sum(samples), 0) FROM minutes").fetchone()[0]
        seen.append(raw + rolled)
        if done.finished:
            break
    assert len(set(seen)) == 1 and seen[0] == 3 * DAYS * DAY / STEP


# --- small files: merging a minute rolled in two runs, figure sources, refusals ---------------


def _small_sample(at: float, requests: float, running: float) -> ReplicaSample:
    return ReplicaSample(
        at=at, counters={"requests": requests}, running=running, waiting=0.0, kv_usage_by_engine={"0": running / 100}
    )


def _write(
    store: Store, at: float, requests: float, running: float, fetched_at: float | None = None, up: bool = True
) -> None:
    fetched = at if fetched_at is None else fetched_at
    sample = _small_sample(fetched, requests, running) if up else None
    result = TargetResult("r", "http://r/metrics", "up" if up else "down", sample, "" if up else "refused", fetched)
    store.write_poll(PollRecord("f", at, at, "scrape", 60.0, 1.0, (result,)))


def test_a_minute_rolled_in_two_runs_merges_counts_peaks_and_the_later_sample(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    minute = T0
    for second, requests, running in [(1, 10, 5), (20, 11, 9), (40, 12, 3)]:
        _write(store, minute + second, requests, running)
    assert apply_retention(store, minute + 60 + HOUR, Retention(raw_seconds=HOUR, minutes_seconds=DAY)).rolled == 1
    # Late polls of that minute (a recorder that caught up, or a shorter retention): one fetched later, one earlier.
    _write(store, minute + 50, 13, 7)
    _write(store, minute + 30, 99, 20, fetched_at=minute + 30)
    done = apply_retention(store, minute + 60 + HOUR, Retention(raw_seconds=HOUR, minutes_seconds=DAY))
    assert done.rolled == 1 and done.deleted_raw == 2
    row = minute_rows(store)[("r", minute)]
    assert (row["samples"], row["running_max"], row["kv_usage_max"]) == (5, 20.0, 0.2)
    assert (row["requests"], row["fetched_at"], row["running"]) == (13.0, minute + 50, 7.0)
    # A later run whose rows are older than what is there keeps what is there.
    _write(store, minute + 10, 50, 1)
    apply_retention(store, minute + 60 + HOUR, Retention(raw_seconds=HOUR, minutes_seconds=DAY))
    row = minute_rows(store)[("r", minute)]
    assert (row["samples"], row["running_max"], row["requests"]) == (6, 20.0, 13.0)


def test_an_answered_sample_beats_a_later_failure_when_merging(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    keep = Retention(raw_seconds=HOUR, minutes_seconds=DAY)
    _write(store, T0 + 5, 10, 4)
    apply_retention(store, T0 + 60 + HOUR, keep)
    _write(store, T0 + 55, 0, 0, up=False)
    apply_retention(store, T0 + 60 + HOUR, keep)
    row = minute_rows(store)[("r", T0)]
    assert (row["samples"], row["state"], row["requests"]) == (2, "up", 10.0)


def test_figure_source_polls_go_with_the_raw_samples(tmp_path):
    from console.fleet.view import advance
    from console.live.feed import poll_record
    from tests.fleet.builders import fleet, replica
    from tests.live.polls import figure_poll

    store = Store.open(tmp_path / "h.sqlite")
    for at in (T0, T0 + 30, T0 + 2 * HOUR):
        view = advance(None, "p", fleet(replica("r1", requests_per_second=1.0), at=at), None, at)
        store.write_poll(poll_record("p", figure_poll(view, 15.0), None, view, None))
    done = apply_retention(store, T0 + 2 * HOUR + 1, Retention(raw_seconds=HOUR, minutes_seconds=DAY))
    assert (done.deleted_polls, done.rolled) == (2, 0)
    assert [at for _, at in store.poll_times("p")] == [T0 + 2 * HOUR]


def test_a_read_only_store_is_refused_with_one_line(tmp_path):
    Store.open(tmp_path / "h.sqlite").close()
    reader = Store.open(tmp_path / "h.sqlite", read_only=True)
    with pytest.raises(HistoryError) as error:
        apply_retention(reader, NOW, Retention())
    assert "read-only" in str(error.value) and "\n" not in str(error.value)


def test_a_locked_file_reports_sqlite_locked_and_loses_nothing(tmp_path):
    store = Store.open(tmp_path / "h.sqlite")
    _write(store, T0 + 5, 10, 4)
    blocker = sqlite3.connect(tmp_path / "h.sqlite", isolation_level=None)
    blocker.execute("PRAGMA busy_timeout = 0")
    blocker.execute("BEGIN IMMEDIATE")
    store.connection.execute("PRAGMA busy_timeout = 50")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            apply_retention(store, T0 + 60 + DAY, Retention(raw_seconds=HOUR, minutes_seconds=DAY))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert count(store, "samples") == 1 and count(store, "minutes") == 0
    assert apply_retention(store, T0 + 60 + DAY, Retention(raw_seconds=HOUR, minutes_seconds=DAY)).rolled == 1


@pytest.mark.parametrize(
    "raw, minutes, words",
    [
        (0, DAY, "raw samples: 0 is not a duration"),
        (HOUR, -1, "rollups: -1 is not a duration"),
        (math.nan, DAY, "positive number of seconds"),
        (DAY, HOUR, "less than raw samples"),
    ],
)
def test_a_retention_that_makes_no_sense_is_refused(raw, minutes, words):
    with pytest.raises(ValueError, match=words):
        Retention(raw, minutes)
