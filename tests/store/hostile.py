"""Real history files for the hostile-input tests: built with the store, damaged on disk, read by `capcon`."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from console.plan.schema import load_plan
from console.store.database import Store
from tests.fleet.test_hourly import FakeReplica
from tests.store.recorder_polls import REPO, cli_env
from tests.store.test_series import record

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
EVERYTHING = ["--from", "0", "--to", "now"]


def build_history(path: Path, polls: int = 600, replicas: int = 2, step: float = 5.0) -> Path:
    """A history of `polls` polls of fleet "chat" (`replicas` replicas with traffic), a flag raised
    every fourth poll, and an event: enough rows that each table spans several pages."""
    store = Store.open(path)
    fakes = [FakeReplica() for _ in range(replicas)]
    plan = load_plan(REPO / "plans" / "chat-8b-l40s.yaml")
    for i in range(polls):
        at = T0 + step * i
        for n, fake in enumerate(fakes):
            fake.serve(2 + n, ttft=0.05 if i % 7 else 0.6)
        record(
            store,
            at,
            {f"r{n}": fake.sample(at, kv=0.2 + (i % 50) / 100) for n, fake in enumerate(fakes)},
            plan=plan,
            raised=("kv",) if i % 4 == 1 else (),
        )
    store.write_event(T0 + 1.0, "recording_started", None, None, {"pid": 1, "host": "h", "fleets": ["chat"]})
    store.close()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pages_of(path: Path, table: str) -> list[int]:
    """The leaf pages of a table or index, in file order (SQLite's dbstat)."""
    connection = sqlite3.connect(path)
    try:
        return [
            row[0]
            for row in connection.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (table,)
            )
        ]
    finally:
        connection.close()


def damage_page(path: Path, page: int) -> None:
    """Overwrite one page of the file in place with what no b-tree page holds (as a bad sector or a stray write would)."""
    connection = sqlite3.connect(path)
    try:
        size = connection.execute("PRAGMA page_size").fetchone()[0]
    finally:
        connection.close()
    with open(path, "r+b") as file:
        file.seek((page - 1) * size)
        file.write(b"\xde\xad\xbe\xef" * (size // 4))


def damaged_copy(pristine: Path, folder: Path, table: str) -> Path:
    """A copy of `pristine` with the middle leaf page of `table` overwritten."""
    path = folder / f"damaged-{table}.sqlite"
    shutil.copyfile(pristine, path)
    pages = pages_of(path, table)
    assert len(pages) >= 3, f"{table} spans {len(pages)} leaf pages: the fixture is too small to damage its middle"
    damage_page(path, pages[len(pages) // 2])
    return path


def capcon(
    *args, data_home: Path, timeout: float = 120.0, stdout=subprocess.PIPE, **options
) -> subprocess.CompletedProcess:
    """`capcon ARGS` as a real subprocess (arguments may be bytes, as a shell passes them)."""
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=timeout,
        cwd=REPO,
        env=cli_env(data_home),
        stdin=subprocess.DEVNULL,
        check=False,
        **options,
    )


def one_line(stderr: bytes | str, verb: str) -> str:
    """The single line a failing `capcon VERB` prints: never a traceback."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"capcon {verb}: "), text
    return lines[0]


def poll_count(path: Path) -> int:
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return connection.execute("SELECT count(*) FROM polls").fetchone()[0]
    finally:
        connection.close()
