"""Option values that start with '-' (`--from -15m`, `--keep-raw -48h`): read as values in every verb,
so a good one works as `--from=-15m` does and a bad one gets the option's own one-line message."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.cli import DASH_VALUE_OPTIONS, joined_values, main
from console.plan.schema import load_plan
from console.store.database import Store
from tests.fleet.test_hourly import FakeReplica
from tests.store.test_series import record

PLAN = "plans/internal-assistant-18rps.yaml"


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exited:
        code = exited.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def recent(tmp_path_factory):
    """Ten minutes of one replica ending a minute ago (the real clock), so `-15m` reaches into it."""
    import time

    path = tmp_path_factory.mktemp("dash") / "h.sqlite"
    store = Store.open(path)
    replica = FakeReplica()
    begin = time.time() - 11 * 60
    for i in range(21):
        replica.serve(2)
        record(store, begin + 30 * i, {"a": replica.sample(begin + 30 * i)}, plan=load_plan(PLAN))
    store.close()
    return str(path)


@pytest.mark.parametrize("verb", ["history", "export"])
def test_from_minus_fifteen_minutes_reads_as_it_does_with_an_equals_sign(recent, capsys, verb):
    extra = ["--to", "now", "--format", "csv"] if verb == "export" else ["--json"]
    spaced = run(capsys, verb, "--db", recent, "--from", "-15m", *extra)
    joined = run(capsys, verb, "--db", recent, "--from=-15m", *extra)
    assert spaced[0] == 0, spaced[2]
    assert "expected one argument" not in spaced[2]
    assert spaced[1].count("\n") > 1
    if verb == "history":  # the two runs start a moment apart: the figures agree, the first row's start does not
        import json

        def figures(out):
            return [(r["requests"], r["busiest_rps"]) for f in json.loads(out)["fleets"] for r in f["rows"]]

        # Some hour holds the recording (which one depends on the clock: -15m may start in the hour before).
        assert figures(spaced[1]) == figures(joined[1]) and any((n or 0) > 0 for n, _ in figures(spaced[1]))
    else:
        assert spaced[1] == joined[1]


@pytest.mark.parametrize(
    "argv, line",
    [
        (["history", "--from", "-2x"], "capcon history: --from '-2x' is not a time capcon reads; expected "),
        (["history", "--to", "-2x"], "capcon history: --to '-2x' is not a time capcon reads; expected "),
        (
            ["export", "--from", "-2x", "--to", "now", "--format", "csv"],
            "capcon export: --from '-2x' is not a time capcon reads; expected ",
        ),
        (
            ["export", "--from", "-1h", "--to", "-2x", "--format", "csv"],
            "capcon export: --to '-2x' is not a time capcon reads; expected ",
        ),
        (["replay", "--from", "-2x"], "capcon replay: --from '-2x': '-2x' is not a time capcon reads; expected "),
        (["replay", "--to", "-2x"], "capcon replay: --to '-2x': '-2x' is not a time capcon reads; expected "),
        (
            ["record", "--keep-raw", "-48h", "--target", "127.0.0.1:9"],
            "capcon record: argument --keep-raw: '-48h': a negative duration; expected a duration longer than zero, like 48h",
        ),
        (
            ["watch", "--keep-minutes", "-90d", "--target", "127.0.0.1:9", "--once"],
            "capcon watch: argument --keep-minutes: '-90d': a negative duration; expected a duration longer than zero",
        ),
        (["demo", "--keep-raw", "-1h"], "capcon demo: argument --keep-raw: '-1h': a negative duration"),
    ],
)
def test_a_bad_value_starting_with_a_dash_gets_its_own_message(recent, capsys, argv, line):
    code, out, err = run(capsys, *argv[:1], "--db", recent, *argv[1:])
    assert code == 2 and out == ""
    assert err.startswith(line) and err.count("\n") == 1, err


def test_a_bad_time_is_named_before_a_missing_file(tmp_path, capsys):
    code, _, err = run(capsys, "history", "--db", str(tmp_path / "none.sqlite"), "--from", "-2x")
    assert code == 2 and err.startswith("capcon history: --from '-2x' is not a time")


def test_a_missing_value_is_still_argparse_s_one_line(capsys):
    code, _, err = run(capsys, "history", "--from", "--to", "now")
    assert code == 2 and err == "capcon history: argument --from: expected one argument (see capcon history --help)\n"


@settings(max_examples=200)
@given(
    st.lists(
        st.one_of(st.sampled_from([*DASH_VALUE_OPTIONS, "--", "--db", "-x", "--json"]), st.text(max_size=6)), max_size=8
    )
)
def test_joined_values_joins_only_a_dash_value_after_its_option(argv):
    out = joined_values(argv)
    i = j = 0
    while i < len(argv):
        if argv[i] == "--":
            assert out[j:] == argv[i:]
            return
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if argv[i] in DASH_VALUE_OPTIONS and nxt is not None and nxt.startswith("-") and not nxt.startswith("--"):
            assert out[j] == f"{argv[i]}={nxt}"
            i += 2
        else:
            assert out[j] == argv[i]
            i += 1
        j += 1
    assert j == len(out)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=12).map(lambda text: "-" + text))
def test_any_dash_time_is_read_or_refused_in_one_line(recent, capsys, when):
    code, out, err = run(capsys, "history", "--db", recent, "--from", when, "--json")
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert out == "" and err.count("\n") == 1
        assert "expected one argument" not in err or when.startswith("--")
