"""A recorder killed with SIGKILL, again and again on one file: the file stays whole and loses at most the last interval.

Two ways in: `capcon record` scraping `capcon sim` (the real program, killed at random
moments, many of them aimed at the next write), and a writer that does nothing but write
polls back to back (so nearly every kill lands inside a transaction).
"""

from __future__ import annotations

import pickle
import random
import sqlite3
import subprocess
import sys
import time

import pytest

from console.store.database import Store
from tests.store.recorder_polls import (
    RECENT,
    REPO,
    capcon_sim,
    cli_env,
    integrity,
    sim_polls,
    stored_times,
    wait_for,
)

KILLS = 30
INTERVAL = 1.0
SCRAPE_TIMEOUT = 0.5
# From the start of the next poll to its commit: the scrape (at most SCRAPE_TIMEOUT) and the
# write, on a machine busy with other work.
SLACK = 0.75


def polls_in(path) -> int:
    """Polls stored so far; 0 while the first recorder is still creating the file."""
    try:
        return len(stored_times(path)) if path.exists() else 0
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return 0
        raise


@pytest.mark.slow
def test_capcon_record_killed_at_random_moments_loses_at_most_the_last_interval(tmp_path):
    db = tmp_path / "history.sqlite"
    rng = random.Random(6)
    lost = []  # seconds between each kill and the newest stored poll
    with capcon_sim(replicas=4) as urls:
        targets = [arg for url in urls for arg in ("--target", url)]
        for kill in range(KILLS):
            before = polls_in(db)
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "console",
                    "record",
                    *targets,
                    "--interval",
                    str(INTERVAL),
                    "--timeout",
                    str(SCRAPE_TIMEOUT),
                    "--db",
                    str(db),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env=cli_env(tmp_path / "data"),
            )
            try:
                # The file reopens after every kill and recording goes on.
                wait_for(
                    lambda n=before, p=process: polls_in(db) > n or p.poll() is not None,
                    f"recorder {kill} to write",
                    seconds=30.0,
                    every=0.05,
                )
                assert process.poll() is None, f"recorder {kill} exited: {process.stderr.read()}"
                # Half at any moment of two intervals, half around the next write.
                time.sleep(rng.uniform(0.0, 2 * INTERVAL) if kill % 2 else rng.uniform(0.9 * INTERVAL, 1.3 * INTERVAL))
                killed_at = time.time()
                process.kill()
                process.wait(timeout=10)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
                process.stderr.close()
            assert integrity(db) == "ok", f"after kill {kill}"
            lost.append(killed_at - stored_times(db)[-1])
            assert lost[-1] <= INTERVAL + SCRAPE_TIMEOUT + SLACK, f"kill {kill} lost more than the last interval"
    print(
        f"{KILLS} kills: newest stored poll {min(lost):.2f} to {max(lost):.2f} s before the kill (interval {INTERVAL:g} s)"
    )
    store = Store.open(db, read_only=True)
    (fleet,) = store.fleets()
    assert fleet.polls >= KILLS  # each recorder wrote at least once before its kill
    for poll_id, _ in store.poll_times(fleet.name):
        assert len(store.poll(poll_id).results) == 4  # every stored poll whole: all four replicas


WRITER = """
import pickle, sys, time
from dataclasses import replace
from console.store.recorder import Recorder

records = pickle.load(open(sys.argv[2], "rb"))
start = float(sys.argv[3])
recorder = Recorder(sys.argv[1])
recorder.start()
print("ready", flush=True)
i = 0
while True:
    record = records[i % len(records)]
    recorder.submit(replace(record, at=start + i, watched_at=start + i))
    i += 1
    while recorder.status.waiting > 2:  # keep the writer busy without piling up memory
        time.sleep(0.001)
"""


@pytest.mark.slow  # kills at many points: a long run
def test_a_writer_killed_inside_its_transactions_leaves_only_whole_polls(tmp_path):
    db = tmp_path / "history.sqlite"
    records = tmp_path / "records.pickle"
    records.write_bytes(pickle.dumps(sim_polls(3, replicas=20)))
    rng = random.Random(7)
    start = RECENT
    for kill in range(15):
        before = polls_in(db)
        process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(records), str(start + before)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=cli_env(tmp_path / "data"),
        )
        try:
            assert process.stdout.readline().strip() == "ready", process.stderr.read()
            wait_for(lambda n=before: polls_in(db) > n, f"writer {kill} to write", seconds=30.0, every=0.05)
            time.sleep(rng.uniform(0.05, 0.6))
            process.kill()
            process.wait(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
            process.stderr.close()
        assert integrity(db) == "ok", f"after kill {kill}"
        # Each poll is one transaction: what is stored is an unbroken run of whole polls.
        assert stored_times(db) == [start + i for i in range(polls_in(db))]
        with sqlite3.connect(db) as reader:
            counts = {n for (n,) in reader.execute("SELECT count(*) FROM samples GROUP BY poll_id")}
        assert counts == {20}, f"after kill {kill}: a poll with {counts - {20}} samples instead of 20"
