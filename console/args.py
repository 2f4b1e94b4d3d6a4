"""Bounds on command-line arguments, shared by every verb: the raw words, then the common options.

    check_words(argv, verb)      # before parsing: text that is not UTF-8, control characters, 5,000-character words
    check_option_limits(args)    # after parsing: --interval, --window, --timeout, --duration, --keep-* bounded
    bounded(float, 0, 3600, "seconds (an hour)")   # an argparse type= for a verb's own option
    span(3600, bare_max=60)      # an argparse type= for a duration: 500ms, 30s, 5m, 2h; bare 30 is 30 s

Every refusal is one line saying which argument, what it was and what was expected; the CLI
(console/cli.py) turns it into exit code 2 before the verb runs, so no verb ever sleeps for
1e9 seconds, sizes a window of 1e308 seconds or records a fleet whose name cannot be stored.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeAlias, overload

from console.errors import UserError
from console.plan.limits import number as shown_number
from console.text import bounded_line
from console.when import bare_span_problem, parse_span

# Longer than any path (PATH_MAX is 4,096 bytes), address or name a verb takes.
MAX_WORD_CHARACTERS = 4096
_SURROGATE = re.compile("[\ud800-\udfff]")  # what Python makes of bytes that are not UTF-8 (surrogateescape)
_SHOWN_BYTES = 60

DAY = 86400.0


class OneLineParser(argparse.ArgumentParser):
    """Argument errors in one line, pointing at --help, instead of the whole usage block first."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {bounded_line(message)} (see {self.prog} --help)\n")


# What `capcon` hands each verb's `add_parser`: its sub-parsers, every one a OneLineParser.
SubParsers: TypeAlias = "argparse._SubParsersAction[OneLineParser]"


@dataclass(frozen=True)
class OptionLimit:
    option: str
    high: float  # in the parsed value's unit (seconds)
    words: str  # the bound in words: "3600 seconds (an hour)"
    suffix: str = ""  # after the value shown: "s" for a duration given as 90d, read as seconds


# Options several verbs share (watch, record, demo), checked on whichever verb has them: finite,
# positive and at most this. Higher floors (watch's 0.2 s, the console's 1 s) stay with each verb.
OPTION_LIMITS: dict[str, OptionLimit] = {
    "interval": OptionLimit("--interval", 3600.0, "3600 seconds (an hour)"),
    "window": OptionLimit("--window", DAY, "86400 seconds (a day)"),
    "timeout": OptionLimit("--timeout", 300.0, "300 seconds (five minutes)"),
    "duration": OptionLimit("--duration", 366 * DAY, "31622400 seconds (366 days)"),
    "keep_raw": OptionLimit("--keep-raw", 3660 * DAY, "3660d (ten years)", "s"),
    "keep_minutes": OptionLimit("--keep-minutes", 3660 * DAY, "3660d (ten years)", "s"),
}


def check_option_limits(args: argparse.Namespace) -> None:
    """UserError for the first common option that is not a positive finite number within its bound."""
    for dest, limit in OPTION_LIMITS.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        shown = f"{limit.option} {shown_number(value)}{limit.suffix}"
        if value > limit.high:
            raise UserError(f"{shown}: expected at most {limit.words}")
        if math.isnan(value) or value <= 0:
            raise UserError(f"{shown}: expected a positive number of seconds, at most {limit.words}")


# A bare number is read as seconds only up to where it is plainly seconds: --interval 2000 was meant as
# milliseconds far more often than as 33 minutes between polls. Past these it needs its unit.
BARE_INTERVAL = 60.0
BARE_WINDOW = 3600.0


def span(high: float, bare_max: float | None) -> Callable[[str], float]:
    """An argparse `type=` for a duration option (console.when.parse_span): 500ms, 30s, 5m, 2h.

    A bare number reads as seconds up to `bare_max` (None: a bare number is refused); past it the
    error shows both readings and the unit to write. A bare number float() reads but outside
    (0, high] (1e9, nan, -inf) is handed on as it is: check_option_limits words the common
    options' bounds, in one place.
    """

    def parse(text: str) -> float:
        try:
            bare: float | None = float(text)
        except (ValueError, OverflowError):
            bare = None
        if bare is not None:
            if not math.isfinite(bare) or not 0 < bare <= high:
                return bare
            if bare_max is not None and bare <= bare_max:
                return bare
            raise argparse.ArgumentTypeError(f"{text.strip()!r}: {bare_span_problem(bare, bare_max, high)}")
        try:
            return parse_span(text, high, bare_max)
        except ValueError as problem:
            raise argparse.ArgumentTypeError(str(problem)) from None

    parse.__name__ = "duration"
    return parse


def shown_bytes(word: str) -> str:
    """The bytes a word came from, escaped: b'fleet-\\xff' (surrogate escapes back to their bytes)."""
    try:
        raw = word.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that no byte made (only from Python callers)
        raw = word.encode("utf-8", "backslashreplace")
    if len(raw) > _SHOWN_BYTES:
        return f"{raw[:_SHOWN_BYTES]!r}… ({len(raw):,} bytes)"
    return repr(raw)


def _which(argv: list[str], index: int) -> str:
    """'argument 3 (the value of --name)': 1-based, as the shell counts the words after `capcon`."""
    word = argv[index]
    context = ""
    if word.startswith("--") and "=" in word:
        context = f" ({word.split('=', 1)[0]}=...)"
    elif index > 0 and argv[index - 1].startswith("-") and "=" not in argv[index - 1] and len(argv[index - 1]) > 1:
        context = f" (the value of {argv[index - 1]})"
    return f"argument {index + 1}{context}"


def check_words(argv: list[str]) -> None:
    """UserError for the first word that is not UTF-8, holds a control character or is absurdly long.

    Python hands bytes that are not UTF-8 to the program as surrogate escapes ('\\udcff'):
    left alone they become a traceback where the word is printed, or a fleet name the
    history cannot store (every poll lost). Control characters would reach the terminal and
    the history as they are.
    """
    for index, word in enumerate(argv):
        if _SURROGATE.search(word):
            raise UserError(
                f"{_which(argv, index)} is not UTF-8 text: {shown_bytes(word)}; "
                f"expected UTF-8 (as the terminal and file names here are written)"
            )
        if len(word) > MAX_WORD_CHARACTERS:
            raise UserError(
                f"{_which(argv, index)} is {len(word):,} characters long ({word[:40]!r}…); "
                f"expected at most {MAX_WORD_CHARACTERS} (a path, an address or a name)"
            )
        if re.fullmatch(r"-[^=]+=--", word):
            # argparse takes '--' there for the end of the options and hands the verb an empty list.
            raise UserError(
                f"{_which(argv, index)} gives '--' as the value of {word.split('=', 1)[0]}; expected a value after '='"
            )
        odd = next((c for c in word if not c.isprintable() and c != " "), None)
        if odd is not None:
            shown = word if len(word) <= 60 else word[:60] + "…"
            raise UserError(
                f"{_which(argv, index)} holds the control character {odd!r} ({shown!r}); expected printable text"
            )


@overload
def bounded(
    kind: type[int], low: float, high: float, words: str, *, low_open: bool = True, low_words: str | None = None
) -> Callable[[str], int]: ...


@overload
def bounded(
    kind: type[float], low: float, high: float, words: str, *, low_open: bool = True, low_words: str | None = None
) -> Callable[[str], float]: ...


def bounded(
    kind: type[int] | type[float],
    low: float,
    high: float,
    words: str,
    *,
    low_open: bool = True,
    low_words: str | None = None,
) -> Callable[[str], float]:
    """An argparse `type=` reading `kind` (int or float) within low..high (`low_open`: low itself refused).

    A word that is no number keeps argparse's own "invalid float value: 'x'"; one out of bounds reads
    "'1e9': expected at most 3600 seconds (an hour)"; nan and inf are out of bounds.
    """

    def parse(text: str) -> float:
        shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}… ({len(text):,} characters)"
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            if len(text) > 40:  # argparse would echo all of it
                raise argparse.ArgumentTypeError(
                    f"{shown}: expected {'a whole number' if kind is int else 'a number'}, at most {words}"
                ) from None
            raise ValueError(text) from None  # argparse: "invalid int value: 'x'"
        if isinstance(value, float) and math.isnan(value):
            raise argparse.ArgumentTypeError(f"{shown}: expected a number, at most {words}")
        if value > high:
            raise argparse.ArgumentTypeError(f"{shown}: expected at most {words}")
        if value < low or (low_open and value == low):
            bound = low_words or (f"greater than {shown_number(low)}" if low_open else f"at least {shown_number(low)}")
            raise argparse.ArgumentTypeError(f"{shown}: expected a number {bound}, at most {words}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value"
    return parse
