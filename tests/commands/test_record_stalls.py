"""`capcon record` never goes quietly blind: hundreds of targets with faults keep every poll coming and written,
and a fleet whose polls stop coming is said on stderr at once and in the exit status."""

from __future__ import annotations

import re
import socket
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.sources.faulty_fleet import behaviour, faulty_fleet, target_urls
from tests.store.recorder_polls import capcon

PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"


def polls_in(db: Path) -> list[tuple[int, float]]:
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT id, at FROM polls ORDER BY at").fetchall()


@pytest.mark.slow  # 256 targets polled for a while: a long run
@pytest.mark.timeout(120)
def test_256_targets_with_a_share_faulty_write_every_poll(tmp_path):
    db = tmp_path / "history.sqlite"
    with faulty_fleet(PAGE) as base:
        urls = target_urls(base, 256)
        targets = [word for url in urls for word in ("--target", url)]
        done = capcon(
            "record", *targets, "--interval", "2", "--timeout", "0.3", "--duration", "12", "--db", str(db),
            data_home=tmp_path / "data", timeout=90,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (written,) = re.findall(r"stopped: (\d+) polls? written", done.stdout)
    polls = polls_in(db)
    assert len(polls) == int(written)
    # Six intervals: a poll that failed as a whole would stop the recording at one or two (as it did).
    assert len(polls) >= 4, (len(polls), done.stderr[-2000:])
    assert "poll failed" not in done.stderr and "no fresh poll" not in done.stderr, done.stderr[-2000:]
    with sqlite3.connect(db) as connection:
        states = dict(
            connection.execute(
                "SELECT r.url, s.state FROM samples s JOIN replicas r ON r.id = s.replica_id WHERE s.poll_id = ?",
                (polls[-1][0],),
            ).fetchall()
        )
    assert sorted(states) == sorted(urls)  # every target has its row, and its own state, in the last poll
    for i, url in enumerate(urls):
        if behaviour(i) in ("hang", "slow"):
            assert states[url] == "timeout", (i, states[url])
        elif behaviour(i) != "ok":
            assert states[url] != "up", (i, states[url])
    # The healthy targets answer: each within --timeout in some poll (on a loaded machine a 0.3 s deadline can
    # pass a healthy target by in one poll or another, so no single poll is asked to have them all).
    with sqlite3.connect(db) as connection:
        answered = {
            url
            for (url,) in connection.execute(
                "SELECT DISTINCT r.url FROM samples s JOIN replicas r ON r.id = s.replica_id WHERE s.state = 'up'"
            )
        }
    healthy = [url for i, url in enumerate(urls) if behaviour(i) == "ok"]
    assert sum(url in answered for url in healthy) >= 0.9 * len(healthy), (len(answered), len(healthy))


@contextmanager
def server_that_never_answers():
    """Accepts connections, reads nothing, answers nothing: a poll of it ends only at its timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        listener.close()


def test_a_fleet_whose_polls_never_end_is_said_at_once_and_exits_1(tmp_path):
    """A target that takes the request and never answers, with a timeout longer than two intervals: the recorder
    has nothing fresh to write, says so while it runs, and exits 1."""
    db = tmp_path / "history.sqlite"
    with server_that_never_answers() as url:
        done = capcon(
            "record", "--target", url + "/metrics", "--interval", "1", "--timeout", "5", "--duration", "3.5",
            "--db", str(db), data_home=tmp_path / "data",
        )  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "no poll yet for" in done.stderr and "(a poll still running)" in done.stderr, done.stderr
    assert "nothing written for its last 2 intervals" in done.stderr, done.stderr
    assert polls_in(db) == []
