"""Text that is not valid UTF-8, and polls that can never be stored: stored safely, or counted and said.

A lone surrogate ('\\udcff': a byte that was not UTF-8 in a command line argument, or in a label on a
replica's page) used to fail the poll's INSERT with UnicodeEncodeError; the recorder then counted it as
"dropped while the file refused writes" and said "recording again" at the next event, while not one
poll of that fleet was stored. Now such text is stored with the byte written `\\xff`, and a poll that
truly cannot be stored is counted apart, said in the status until the recorder stops, and makes
`capcon record` exit 1.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import replace

import pytest

from console.cli import main
from console.commands.recording import close_recorder
from console.store.database import Store
from console.store.recorder import Recorder
from tests.store.hostile import capcon, poll_count
from tests.store.recorder_polls import RECENT, renumbered, sim_polls, stored_times, wait_for


@pytest.fixture(scope="module")
def polls():
    return sim_polls(3, replicas=2)


def with_odd_text(record):
    """The same poll with lone surrogates wherever a replica's page or a server's words reach the file."""
    results = []
    for result in record.results:
        sample = result.sample
        if sample is not None:
            usage = {f"{engine}\udcfe": value for engine, value in sample.kv_usage_by_engine.items()} | {"\udcff": 0.5}
            sample = replace(
                sample, kv_usage_by_engine=usage, requests_by_reason={**sample.requests_by_reason, "stop\udc80": 1.0}
            )
        results.append(replace(result, name=result.name + "\udcff", error="refused\ud800", sample=sample))
    return replace(record, fleet="chat\udcff", results=tuple(results), source_error="proxy said \udce9")


def test_text_that_is_not_utf8_is_stored_with_its_bytes_escaped_and_reads_back_everywhere(tmp_path, polls, capsys):
    path = tmp_path / "history.sqlite"
    store = Store.open(path)
    for record in renumbered(polls, start=RECENT):
        store.write_poll(with_odd_text(record))
    store.close()
    reader = Store.open(path, read_only=True)
    try:
        (fleet,) = reader.fleets()
        assert (fleet.name, fleet.polls) == ("chat\\xff", len(polls))
        poll = reader.poll(reader.poll_times(fleet.name)[-1][0])
        assert poll.source_error == "proxy said \\xe9"
        assert [r.name for r in poll.results] == ["replica-0\\xff", "replica-1\\xff"]
        assert poll.results[0].sample.kv_usage_by_engine["\\xff"] == 0.5
        assert "stop\\x80" in poll.results[0].sample.requests_by_reason
    finally:
        reader.close()
    for argv in (["history", "--json"], ["export", "--format", "jsonl"], ["export", "--format", "csv"]):
        code = main([argv[0], "--db", str(path), "--from", "0", "--to", "now", *argv[1:]])
        out, err = capsys.readouterr()
        assert code == 0, err
        out.encode("utf-8")  # strict: a lone surrogate cannot reach the output
        assert "chat\\xff" in out or "chat\\\\xff" in out


def test_a_poll_that_can_never_be_stored_is_counted_apart_and_said_until_the_recorder_stops(tmp_path, polls, capsys):
    path = tmp_path / "history.sqlite"
    recorder = Recorder(path)
    recorder.start()
    records = renumbered(polls, start=RECENT)
    recorder.submit(records[0])
    recorder.submit(replace(records[1], at=math.nan, watched_at=math.nan))  # no time any reader could place
    recorder.submit(records[2])
    wait_for(lambda: recorder.status.written == 2, "the storable polls")
    status = recorder.status
    assert (status.state, status.unstored, status.dropped) == ("error", 1, 0)
    assert status.detail.startswith("1 poll not stored: a poll could not be stored (UnstorableRecord: poll time nan")
    assert status.detail.endswith("the other polls are recorded")
    close_recorder(recorder, "record")
    err = capsys.readouterr().err
    assert "history " + str(path) + ": 1 poll could not be stored" in err
    assert "dropped while the file refused writes" not in err
    assert stored_times(path) == [records[0].at, records[2].at]
    store = Store.open(path, read_only=True)
    try:
        stopped = [e for e in store.events() if e.kind == "recording_stopped"][-1]
    finally:
        store.close()
    assert stopped.detail["unstored"] == 1 and stopped.detail["written"] == 2


def test_record_with_a_fleet_name_that_is_not_utf8_never_loses_its_polls_silently(tmp_path, targets):
    """`--name $'\\xff'`: refused at the command line (exit 2, nothing recorded), or every poll stored; never
    "0 polls written" with the polls gone."""
    path = tmp_path / "history.sqlite"
    done = capcon(
        "record",
        *targets,
        "--name",
        b"chat\xff",
        "--interval",
        "1",
        "--duration",
        "3.5",
        "--db",
        str(path),
        data_home=tmp_path / "data",
    )
    out, err = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err
    if done.returncode == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("capcon record: ")
        assert not path.exists() or poll_count(path) == 0
        return
    assert done.returncode == 0, err
    written = int(re.search(r"stopped: (\d+) polls? written", out).group(1))
    assert written == poll_count(path) >= 3
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("SELECT name FROM fleets").fetchall() == [("chat\\xff",)]
        (detail,) = connection.execute("SELECT detail FROM events WHERE kind = 'recording_stopped'").fetchone()
    finally:
        connection.close()
    assert json.loads(detail)["written"] == written
