"""Real polls for the recorder's tests: scraped from the simulated fleet, in process or as `capcon sim`."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from console.live.feed import PollFeed
from console.live.handle import FleetHandle
from console.live.watcher import Watcher
from console.plan.schema import load_plan
from console.sim.fleet import SimFleet
from console.sources.scrape import ScrapeSource
from console.store.records import PollRecord
from console.targets import Target

REPO = Path(__file__).resolve().parents[2]
# Poll times for tests: a day ago, well inside the raw retention the recorder applies as it starts.
RECENT = float(int(time.time()) - 86400)
PLAN = REPO / "plans" / "chat-8b-l40s.yaml"


class Collector:
    """Stands in for the recorder when gathering polls: keeps what it is handed."""

    def __init__(self) -> None:
        self.records: list[PollRecord] = []

    def submit(self, record: PollRecord) -> None:
        self.records.append(record)


def sim_polls(count: int, replicas: int = 3, interval: float = 0.25, seed: int = 1) -> list[PollRecord]:
    """`count` polls of a simulated fleet with traffic, as the console would record them."""

    async def collect() -> list[PollRecord]:
        plan = load_plan(PLAN)
        async with SimFleet(plan, replicas=replicas, speed=288.0, seed=seed) as sim:
            targets = [Target(f"replica-{i}", url) for i, url in enumerate(sim.metrics_urls)]
            watcher = Watcher(ScrapeSource(targets, timeout=2.0), 20.0, interval_seconds=interval)
            collector = Collector()
            feed = PollFeed(FleetHandle(plan.name, plan, watcher), collector)
            try:
                for _ in range(count):
                    feed.add(await watcher.poll(), time.time())
                    await asyncio.sleep(interval)
            finally:
                await watcher.aclose()
            return collector.records

    records = asyncio.run(collect())
    assert all(r.results and any(t.sample is not None for t in r.results) for r in records), (
        "the simulated fleet did not answer"
    )
    return records


def renumbered(records: list[PollRecord], start: float, step: float = 1.0) -> list[PollRecord]:
    """The same polls stamped `step` seconds apart from `start`: many distinct polls from a few real ones."""
    out = []
    for i, record in enumerate(records):
        at = start + i * step
        out.append(replace(record, at=at, watched_at=at))
    return out


def as_stored(results) -> tuple:
    """Results as the file gives them back: everything scraped except which exposition names carried
    each figure (a parsing detail, not data)."""
    return tuple(replace(r, sample=replace(r.sample, wire_names={}) if r.sample is not None else None) for r in results)


def stored_times(path: Path) -> list[float]:
    """Every poll time in the file, oldest first (a plain reader, as a viewer would open it)."""
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return [row[0] for row in connection.execute("SELECT at FROM polls ORDER BY at")]
    finally:
        connection.close()


def polls_so_far(path: Path) -> int:
    """How many polls a file being written holds now: 0 before the writer has made it or its tables."""
    try:
        return len(stored_times(path)) if path.exists() else 0
    except sqlite3.OperationalError:  # made, but its schema not yet committed
        return 0


def integrity(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return connection.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        connection.close()


def wait_for(condition, what: str, seconds: float = 20.0, every: float = 0.02) -> None:
    """Wait (bounded) until `condition()` holds; fail naming `what` when it never does."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(every)


def polls_in(db: Path) -> int:
    """Polls in the file so far; 0 while the recorder is still creating it."""
    try:
        return len(stored_times(db)) if db.exists() else 0
    except sqlite3.OperationalError:  # no tables yet
        return 0


def capcon(*args: str, data_home: Path, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """`capcon ARGS` as a subprocess with its data directory under `data_home`."""
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=cli_env(data_home),
        check=False,
    )


def cli_env(data_home: Path) -> dict[str, str]:
    """The environment for a `capcon` subprocess: its data directory under the test's tmp dir."""
    env = dict(os.environ)
    env["XDG_DATA_HOME"] = str(data_home)
    env["PYTHONPATH"] = str(REPO)
    return env


@contextmanager
def capcon_sim(replicas: int = 3, seed: int = 2):
    """`capcon sim` in a subprocess; yields its replicas' base URLs and stops it (SIGTERM, then SIGKILL) after."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "console",
            "sim",
            str(PLAN),
            "--replicas",
            str(replicas),
            "--seed",
            str(seed),
            "--status-every",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    try:
        urls: list[str] = []
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while len(urls) < replicas and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.match(r"\s+(http://127\.0\.0\.1:\d+)\s*$", line)
            if found:
                urls.append(found.group(1))
        assert len(urls) == replicas, f"capcon sim did not list {replicas} targets; it said:\n{''.join(seen)}"
        yield urls
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def unnamed_fleet(arguments: list[str]) -> str:
    """The name `capcon watch`/`record` give a fleet of these `--target URL` arguments without a plan or --name."""
    import argparse

    from console.live.setup import fleet_name
    from console.sources.scrape import ScrapeSource
    from console.targets import targets_from

    return fleet_name(argparse.Namespace(name=None), None, ScrapeSource(targets_from(arguments[1::2])))
