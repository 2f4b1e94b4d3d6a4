"""`capcon record`, and the recording options of `capcon watch` and `capcon demo`, as a user runs them.

Against `capcon sim` on loopback; every `capcon` subprocess gets its own XDG_DATA_HOME, so the
default history path is checked without touching the user's own.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.cli import build_parser
from console.commands.recording import (
    MINUTES_DEFAULT,
    RAW_DEFAULT,
    history_path,
)
from console.commands.recording import polls as poll_words
from console.store import retention
from console.store.database import Store
from console.store.paths import default_history_path
from console.when import parse_duration, show_duration
from tests.store.recorder_polls import (
    REPO,
    capcon,
    capcon_sim,
    cli_env,
    integrity,
    polls_so_far,
    stored_times,
    unnamed_fleet,
)


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_watch_once_with_db_records_both_polls(tmp_path, targets):
    db = tmp_path / "incident.sqlite"
    done = capcon("watch", *targets, "--once", "--interval", "0.5", "--db", str(db), data_home=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    store = Store.open(db, read_only=True)
    (fleet,) = store.fleets()
    assert fleet.polls == 2
    last = store.poll(store.poll_times(fleet.name)[-1][0])
    assert [r.state for r in last.results] == ["up", "up"] and all(r.sample is not None for r in last.results)
    assert [e.kind for e in store.events()] == ["recording_started", "recording_stopped"]
    assert files_under(tmp_path / "data") == []


@pytest.mark.parametrize("extra", [["--no-record"], []], ids=["no-record", "once-without-db"])
def test_watch_once_writes_nothing_without_db(tmp_path, targets, extra):
    done = capcon("watch", *targets, "--once", "--interval", "0.5", *extra, data_home=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert files_under(tmp_path / "data") == []


def test_record_writes_to_the_default_path_under_the_data_home_and_stops_at_its_duration(tmp_path, targets):
    done = capcon("record", *targets, "--interval", "1", "--duration", "3.5", data_home=tmp_path / "data")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "data" / "capcon" / "history.sqlite"
    assert (
        f"recording to {path}: '{unnamed_fleet(targets)}' (2 targets, scrape), every 1 s, window 60 s,"
        f" keeping raw {RAW_DEFAULT}, rollups {MINUTES_DEFAULT}"
    ) in done.stdout
    polls = stored_times(path)
    assert len(polls) >= 2
    assert f"stopped: {poll_words(len(polls))} written to {path}" in done.stdout
    assert integrity(path) == "ok"


def test_default_history_path_follows_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_history_path() == tmp_path / "capcon" / "history.sqlite"


def test_record_stops_cleanly_on_sigterm_and_writes_what_it_polled(tmp_path, targets):
    db = tmp_path / "history.sqlite"
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "record", *targets, "--interval", "1", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cli_env(tmp_path / "data"),
    )
    try:
        deadline = time.monotonic() + 30
        while polls_so_far(db) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    store = Store.open(db, read_only=True)
    events = store.events()
    assert [e.kind for e in events] == ["recording_started", "recording_stopped"]
    assert events[1].detail["written"] == len(store.poll_times(unnamed_fleet(targets))) >= 2
    assert f"stopped: {poll_words(events[1].detail['written'])} written" in out


def test_record_says_on_stderr_when_the_file_is_locked_and_when_it_records_again(tmp_path, targets):
    db = tmp_path / "history.sqlite"
    Store.open(db).close()
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "record", *targets, "--interval", "1", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cli_env(tmp_path / "data"),
    )
    try:
        deadline = time.monotonic() + 30
        while len(stored_times(db)) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        locked_at = time.time()
        time.sleep(4.5)  # the recorder's busy wait (2 s) runs out, more polls come meanwhile
        holder.execute("ROLLBACK")
        released_at = time.time()
        holder.close()
        deadline = time.monotonic() + 30
        while not [at for at in stored_times(db) if at > released_at] and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "capcon record: history locked: another writer holds it" in err
    assert "capcon record: recording again" in err
    # The polls made while the file was locked were kept and written after the release.
    assert [at for at in stored_times(db) if locked_at < at < released_at]


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_text("not a database\n" * 100), "not an SQLite file"),
        (lambda p: sqlite3.connect(p).execute("CREATE TABLE notes (x)").connection.commit(), "other tables"),
    ],
    ids=["directory", "text-file", "other-sqlite"],
)
@pytest.mark.parametrize(
    "verb", [["watch", "--once"], ["watch"], ["record", "--duration", "5"]], ids=["watch-once", "console", "record"]
)
def test_a_db_that_is_no_history_is_one_line_and_exit_2(tmp_path, targets, make, words, verb):
    db = tmp_path / "history.sqlite"
    make(db)
    done = capcon(*verb, *targets, "--db", str(db), data_home=tmp_path / "data")
    assert done.returncode == 2
    assert words in done.stderr and str(db) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stdout == ""  # nothing started: no table, no console, no "recording to" line


@pytest.mark.parametrize(
    "args, words",
    [
        (["--keep-raw", "48"], "expected a duration with a unit"),
        (["--keep-raw", "2 days"], "expected a duration with a unit"),
        (["--keep-minutes", "0d"], "longer than zero"),
        (["--keep-raw", "7d", "--keep-minutes", "5d"], "--keep-minutes 5d: shorter than --keep-raw 7d"),
        (["--no-record", "--db", "x.sqlite"], "--db with --no-record"),
    ],
)
def test_bad_recording_options_are_one_line_and_exit_2(tmp_path, targets, args, words):
    done = capcon("watch", *targets, "--once", *args, data_home=tmp_path / "data")
    assert done.returncode == 2
    assert words in done.stderr and "Traceback" not in done.stderr
    assert files_under(tmp_path / "data") == []


def test_record_refuses_a_fast_interval_and_a_bad_duration(tmp_path, targets):
    assert "at least 1 seconds" in capcon("record", *targets, "--interval", "0.2", data_home=tmp_path).stderr
    assert (
        "--duration -1: expected a positive number"
        in capcon("record", *targets, "--duration", "-1", data_home=tmp_path).stderr
    )


@pytest.mark.parametrize(
    "text, seconds",
    [("30m", 1800.0), ("48h", 172800.0), ("90d", 7776000.0), ("2w", 1209600.0), ("1.5h", 5400.0), ("45s", 45.0)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_help_shows_the_retention_defaults_the_store_uses():
    assert parse_duration(RAW_DEFAULT) == retention.RAW_SECONDS
    assert parse_duration(MINUTES_DEFAULT) == retention.MINUTES_SECONDS


def test_watch_help_says_once_records_only_with_db():
    text = build_parser()._subparsers._group_actions[0].choices["watch"].format_help()
    assert "--once records only when --db is given" in " ".join(text.split())


def test_demo_records_only_with_db():
    parser = build_parser()
    assert history_path(parser.parse_args(["demo"]), default_on=False) is None
    assert history_path(parser.parse_args(["demo", "--db", "demo.sqlite"]), default_on=False) == Path("demo.sqlite")
    assert history_path(parser.parse_args(["watch", "--target", "x:1"])) == default_history_path()


def test_record_with_several_plans_records_each_fleet_with_its_plan(tmp_path):
    original = (REPO / "plans" / "assistant-70b.yaml").read_text()
    assert "\nname: assistant-70b " in original, "the test renames the plan by its name line"
    db = tmp_path / "history.sqlite"
    with capcon_sim(replicas=2, seed=5) as urls:
        plans = []
        for name, url in zip(("east", "west"), urls):
            plan = tmp_path / f"{name}.yaml"
            plan.write_text(
                original.replace("\nname: assistant-70b ", f"\nname: {name} ", 1) + f"\nfleet:\n  targets: [{url}]\n"
            )
            plans.append(str(plan))
        done = capcon(
            "record", *plans, "--interval", "1", "--duration", "3", "--db", str(db), data_home=tmp_path / "data"
        )
    assert done.returncode == 0, done.stderr
    assert "'east', 'west' (2 targets, scrape)" in done.stdout
    store = Store.open(db, read_only=True)
    assert [f.name for f in store.fleets()] == ["east", "west"]
    for fleet, url in zip(("east", "west"), urls):
        poll = store.poll(store.poll_times(fleet)[-1][0])
        assert [r.url for r in poll.results] == [f"{url}/metrics"]
        assert store.plan_version(poll.plan_id).name == fleet
        assert poll.plan_clock is not None


def test_record_runs_without_loading_the_console_ui(tmp_path, targets):
    script = (
        "import sys\n"
        "from console.cli import main\n"
        f"code = main(['record', *{targets!r}, '--interval', '1', '--duration', '1.5', '--db', {str(tmp_path / 'h.sqlite')!r}])\n"
        "print('textual loaded' if any(m.split('.')[0] == 'textual' for m in sys.modules) else 'no textual', code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=cli_env(tmp_path),
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "no textual 0", done.stderr


@pytest.mark.parametrize(
    "seconds, text",
    [
        (172800.0, "48h"),
        (86400.0, "24h"),
        (604800.0, "7d"),
        (1209600.0, "14d"),
        (7776000.0, "90d"),
        (1800.0, "30m"),
        (5400.0, "90m"),
        (45.0, "45s"),
    ],
)
def test_durations_are_shown_as_people_write_them(seconds, text):
    assert show_duration(seconds) == text
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("count, words", [(0, "0 polls"), (1, "1 poll"), (2, "2 polls")])
def test_poll_counts_agree_in_number(count, words):
    assert poll_words(count) == words


@pytest.mark.parametrize(
    "verb", [["watch", "--once"], ["watch"], ["record", "--duration", "5"]], ids=["watch-once", "console", "record"]
)
def test_an_explicit_db_in_a_missing_folder_is_one_line_and_exit_2(tmp_path, targets, verb):
    db = tmp_path / "typo" / "dir" / "h.sqlite"
    done = capcon(*verb, *targets, "--db", str(db), data_home=tmp_path / "data")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"--db {db}: folder {db.parent} does not exist; expected an existing folder" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "typo").exists()  # nothing created
    assert files_under(tmp_path / "data") == []


def test_demo_refuses_a_db_in_a_missing_folder_and_the_default_folder_is_still_made(tmp_path, monkeypatch):
    from console.errors import UserError

    parser = build_parser()
    with pytest.raises(UserError, match=r"folder .*missing does not exist; expected an existing folder"):
        history_path(parser.parse_args(["demo", "--db", str(tmp_path / "missing" / "h.sqlite")]), default_on=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    path = history_path(parser.parse_args(["watch", "--target", "x:1"]))
    # The default folder need not exist yet: the recorder makes it (the default-path record test).
    assert path == tmp_path / "data" / "capcon" / "history.sqlite" and not path.parent.exists()
