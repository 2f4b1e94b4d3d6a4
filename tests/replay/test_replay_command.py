"""`capcon replay` on the command line: what it opens, and one line (exit 2) for everything it cannot."""

from __future__ import annotations

import pytest

from console.cli import build_parser, main
from console.commands.replay import open_app
from tests.replay.recording import T0, record_synthetic


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    path = tmp_path_factory.mktemp("command") / "history.sqlite"
    record_synthetic(path, 120.0, replicas=2, interval=5.0, keep_views=False)
    return path


def run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exited:
        code = exited.code
    out, err = capsys.readouterr()
    assert out == ""
    return code, err


def test_the_default_history_is_the_one_watch_writes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    code, err = run(["replay"], capsys)
    assert code == 2
    assert (
        err
        == f"capcon replay: {tmp_path / 'capcon' / 'history.sqlite'}: no such history file; expected a file written by `capcon watch` or `capcon record`\n"
    )


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--fleet", "nope"], "capcon replay: --fleet 'nope': not recorded in "),
        (
            ["--from", "yesterday-ish"],
            "capcon replay: --from 'yesterday-ish': 'yesterday-ish' is not a time capcon reads; expected",
        ),
        (["--from", str(T0 + 3600)], "capcon replay: "),
        (["--speed", "100"], "capcon replay: --speed 100: expected 0.25 to 64 (1 is the recorded pace)"),
        (["--speed", "0"], "capcon replay: --speed 0: expected 0.25 to 64"),
        (["--theme", "neon"], "capcon replay: --theme 'neon': unknown theme; expected one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(history, capsys, extra, expected):
    code, err = run(["replay", "--db", str(history), *extra], capsys)
    assert code == 2
    assert err.startswith(expected) and err.count("\n") == 1


def test_an_empty_range_names_what_the_file_holds(history, capsys):
    code, err = run(["replay", "--db", str(history), "--from", str(T0 + 3600)], capsys)
    assert code == 2 and "no polls between" in err and "recorded: assistant" in err


def test_the_arguments_reach_the_console(history):
    args = build_parser().parse_args(
        ["replay", "--db", str(history), "--from", str(T0 + 60), "--speed", "8", "--paused"]
    )
    app = open_app(args)
    try:
        assert (
            app.driver.controller.at == T0 + 60
            and app.driver.controller.speed == 8
            and not app.driver.controller.playing
        )
        assert [h.name for h in app.fleets] == ["assistant"] and app.fleets[0].plan.name == "internal-assistant-18rps"
        assert app.interval == 5.0  # the recorded interval, shown in the header
    finally:
        app.driver.controller.replay.close()


def test_help_lists_the_keys(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("space play/pause", "] and [ double or halve the speed", "g go to a time", "15 minutes"):
        assert words in text
