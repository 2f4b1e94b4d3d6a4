"""Hostile arguments: bytes that are not UTF-8, control characters, 5,000-character words and numbers
past any sane bound are refused in one line with exit 2 before a verb runs, in any verb, in well
under a second; whatever a verb does get to run with is within the bounds."""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from console.args import MAX_WORD_CHARACTERS, OPTION_LIMITS
from console.cli import VERBS, main
from tests.cpu_time import HANG_CPU_SECONDS, cpu_seconds

REPO = Path(__file__).resolve().parents[2]
PLAN = "plans/internal-assistant-18rps.yaml"
TARGET = "127.0.0.1:9"  # nothing listens: every case here is refused before polling


def _run(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    started = cpu_seconds()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exited:
            code = exited.code
    return code, out.getvalue(), err.getvalue(), cpu_seconds() - started


def _one_line(code: int, out: str, err: str, seconds: float) -> str:
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err[:-1].isprintable(), err
    assert seconds < HANG_CPU_SECONDS
    return err[:-1]


@pytest.mark.parametrize(
    "argv, position, shown",
    [
        (["watch", "--target", "h\udcff:8000", "--once"], "argument 3 (the value of --target)", r"b'h\xff:8000'"),
        (
            ["watch", "--name", "fleet-\udcff\udcfe", "--target", TARGET, "--once"],
            "argument 3 (the value of --name)",
            r"b'fleet-\xff\xfe'",
        ),
        (["record", "--name=caf\udce9", "--target", TARGET], "argument 2 (--name=...)", r"b'--name=caf\xe9'"),
        (["plan", "plan-\udcff.yaml"], "argument 2", r"b'plan-\xff.yaml'"),
        (["history", "--tz", "Europe/\udcff"], "argument 3 (the value of --tz)", r"b'Europe/\xff'"),
        (["\udcff"], "argument 1", r"b'\xff'"),
    ],
)
def test_bytes_that_are_not_utf8_are_refused_naming_the_argument_and_its_bytes(argv, position, shown):
    line = _one_line(*_run(argv))
    assert f"{position} is not UTF-8 text: {shown}; expected UTF-8" in line
    verb = argv[0] if argv[0] in VERBS else None
    assert line.startswith(f"capcon {verb}: " if verb else "capcon: ")


def test_the_real_command_with_real_bytes():
    """As a shell passes them: the bytes go in, the line comes out, nothing is recorded."""
    result = subprocess.run(
        [sys.executable, "-m", "console", "watch", "--name", b"fleet\xff", "--target", TARGET, "--once"],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr == (
        b"capcon watch: argument 3 (the value of --name) is not UTF-8 text: b'fleet\\xff'; "
        b"expected UTF-8 (as the terminal and file names here are written) (see capcon watch --help)\n"
    )


@pytest.mark.parametrize("word", ["a\x1b[2Jb", "line\nbreak", "nul-less\x07bell", "c1\x9bx", "tab\there"])
def test_control_characters_in_an_argument_are_refused(word):
    line = _one_line(*_run(["watch", "--name", word, "--target", TARGET, "--once"]))
    assert "argument 3 (the value of --name) holds the control character" in line
    assert "expected printable text" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "--interval=--", "--once"],
        ["watch", "--target", TARGET, "--name=--", "--once"],
        ["sim", PLAN, "--seed=--"],
        ["history", "--tz=--"],
    ],
)
def test_a_double_dash_after_an_equals_sign_is_refused_not_handed_on_as_an_empty_list(argv):
    """argparse reads `--interval=--` as an empty list: a traceback in the verb, or a fleet named []."""
    option = next(word for word in argv if word.endswith("=--")).split("=")[0]
    assert f"gives '--' as the value of {option}; expected a value after '='" in _one_line(*_run(argv))


def test_a_word_longer_than_any_path_is_refused_before_argparse_echoes_it():
    line = _one_line(*_run(["plan", "p" * 5000]))
    assert line.startswith("capcon plan: argument 2 is 5,000 characters long ('pppp")
    assert f"expected at most {MAX_WORD_CHARACTERS}" in line
    assert len(line) < 300


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["watch", "--target", TARGET, "--once", "--interval", "1e9"],
            "capcon watch: --interval 1e9: expected at most 3600 seconds (an hour)",
        ),
        (
            ["watch", "--target", TARGET, "--once", "--window", "1e308"],
            "capcon watch: --window 1e308: expected at most 86400 seconds (a day)",
        ),
        (
            ["watch", "--target", TARGET, "--once", "--window", "inf"],
            "capcon watch: --window inf: expected at most 86400 seconds (a day)",
        ),
        (
            ["watch", "--target", TARGET, "--once", "--timeout", "1e9"],
            "capcon watch: --timeout 1e9: expected at most 300 seconds (five minutes)",
        ),
        (
            ["watch", "--target", TARGET, "--once", "--interval", "nan"],
            "capcon watch: --interval nan: expected a positive number of seconds, at most 3600 seconds (an hour)",
        ),
        (
            ["record", "--target", TARGET, "--timeout=-inf"],
            "capcon record: --timeout -inf: expected a positive number of seconds, at most 300 seconds (five minutes)",
        ),
        (
            ["record", "--target", TARGET, "--interval", "1e9"],
            "capcon record: --interval 1e9: expected at most 3600 seconds (an hour)",
        ),
        (
            ["record", "--target", TARGET, "--duration", "1e308"],
            "capcon record: --duration 1e308: expected at most 31622400 seconds (366 days)",
        ),
        (
            ["record", "--target", TARGET, "--keep-raw", "9" * 300 + "d"],
            "capcon record: --keep-raw 8.64e304s: expected at most 3660d (ten years)",
        ),
        (
            ["watch", "--target", TARGET, "--once", "--keep-minutes", "99999999w"],
            "capcon watch: --keep-minutes 6.048e13s: expected at most 3660d (ten years)",
        ),
    ],
)
def test_common_options_past_their_bound_are_refused_before_the_verb_runs(argv, line):
    assert _one_line(*_run(argv)) == line


# Properties ------------------------------------------------------------------------------------------

# Every number-valued option of every verb, with the bound the verb must never see exceeded.
BOUNDED = [
    ("watch", "--interval", 3600),
    ("watch", "--window", 86400),
    ("watch", "--timeout", 300),
    ("record", "--interval", 3600),
    ("record", "--window", 86400),
    ("record", "--timeout", 300),
    ("record", "--duration", 366 * 86400),
    ("demo", "--interval", 3600),
    ("demo", "--window", 86400),
    ("demo", "--time-scale", 1e6),
    ("demo", "--replicas", 256),
    ("demo", "--seed", 2**63 - 1),
    ("sim", "--replicas", 256),
    ("sim", "--rps-scale", 10_000),
    ("sim", "--time-scale", 1e6),
    ("sim", "--seed", 2**63 - 1),
    ("sim", "--port", 65535),
    ("sim", "--status-every", 86400),
]
_NEEDS = {"watch": ["--target", TARGET, "--once"], "record": ["--target", TARGET], "sim": [PLAN], "plan": [PLAN]}

_HOSTILE_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.builds(lambda m, k: f"{m:g}e{k}", st.floats(0, 9.99), st.integers(-400, 400)),
    st.builds(lambda sign, n: sign + "9" * n, st.sampled_from(["", "-", "+"]), st.integers(1, 4500)),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(
        ["0", "-0", "1e-300", "0x10", "1_000", "١٢", "½", "  5  ", "5s", "", "--", "-inf", "infinity", "NaN"]
    ),
)


class _Ran(Exception):
    """Raised by the stub a verb's run is replaced with: the arguments got through."""

    def __init__(self, args):
        self.args_seen = args


def _stub(args):
    raise _Ran(args)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(BOUNDED), value=_HOSTILE_NUMBERS)
def test_any_number_for_any_bounded_option_is_refused_in_one_line_or_within_bounds(case, value):
    verb, option, high = case
    module = importlib.import_module(f"console.commands.{verb}")
    with mock.patch.object(module, "run", _stub):
        try:
            result = _run([verb, *_NEEDS.get(verb, []), f"{option}={value}"])
        except _Ran as ran:
            event("ran")
            seen = getattr(ran.args_seen, option.lstrip("-").replace("-", "_"))
            assert isinstance(seen, (int, float)) and math.isfinite(seen) and seen <= high, (option, value, seen)
            assert seen >= 0
            return
    event("refused")
    _one_line(*result)


_WORDS = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), min_size=1, max_size=4),
    st.text(st.characters(categories=["Cc"]), min_size=1, max_size=3),
    st.sampled_from(
        [
            "--interval",
            "--window",
            "--timeout",
            "--name",
            "--target",
            "--tz",
            "--from",
            "--to",
            "--db",
            "--once",
            "--json",
            "--replicas",
            "--seed",
            "--",
            "-",
            "=",
            "1e309",
            "nan",
            TARGET,
            PLAN,
        ]
    ),
    _HOSTILE_NUMBERS,
    st.integers(4000, 6000).map(lambda n: "x" * n),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verb=st.sampled_from(VERBS), words=st.lists(_WORDS, max_size=6))
def test_any_words_after_any_verb_never_raise(verb, words):
    """Refused in one line (2), or handed to the verb (stubbed); never a traceback, never a hang."""
    module = importlib.import_module(f"console.commands.{verb}")
    with mock.patch.object(module, "run", _stub):
        try:
            code, _out, err, seconds = _run([verb, *words])
        except _Ran as ran:
            event("ran")
            for dest, limit in OPTION_LIMITS.items():
                seen = getattr(ran.args_seen, dest, None)
                assert seen is None or (math.isfinite(seen) and seen <= limit.high), (dest, seen)
            return
    event(f"exit {code}")
    assert seconds < HANG_CPU_SECONDS
    assert "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err[:-1].isprintable(), err
    else:
        assert code == 0 and ("--help" in words or "-h" in words), (code, err)
