"""`capcon <verb>`: one module per verb in console/commands, each with `add_parser` and `run`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from console.args import OneLineParser, check_option_limits, check_words
from console.errors import UserError
from console.text import bounded_line

# Order is the order `capcon --help` lists them.
VERBS = (
    "plan",
    "rules",
    "watch",
    "record",
    "replay",
    "history",
    "export",
    "demo",
    "sim",
    "bench",
    "gateway",
    "overflow",
    "whatif",
)
# Options whose value may begin with '-': a relative time (`--from -15m`), or a mistyped one
# (`--from -2x`) that deserves the option's own message. argparse takes any such word for an
# option and says "expected one argument", so `joined_values` writes them as `--from=-15m`.
DASH_VALUE_OPTIONS = ("--from", "--to", "--keep-raw", "--keep-minutes")


class CommandLineParser(OneLineParser):
    """`capcon`'s own parser, which keeps each verb's parser to name it in a refusal."""

    def __init__(self, prog: str, description: str, epilog: str) -> None:
        super().__init__(prog=prog, description=description, epilog=epilog)
        self.verb_parsers: dict[str, argparse.ArgumentParser] = {}


class _Version(argparse.Action):
    """argparse's version action, reading the package metadata only when asked (not on every run)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:  # noqa: A002 - argparse's name
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"capcon {installed_version()}")  # stdout, as `--version` of other tools: `capcon --version | cut ...`
        parser.exit(0)


def build_parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="capcon",
        description=(
            "capcon: a terminal console for self-hosted vLLM fleets. It sizes a fleet from a "
            "capacity plan, watches live vLLM metrics next to that plan and flags saturation and drift."
        ),
        epilog="Run `capcon VERB --help` for the options of one verb.",
    )
    parser.add_argument("--version", action=_Version, help="print capcon's version (capcon X.Y.Z) and exit")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=OneLineParser)
    for verb in VERBS:
        module = importlib.import_module(f"console.commands.{verb}")
        parser.verb_parsers[verb] = module.add_parser(sub)
    return parser


def installed_version() -> str:
    """The version pip installed (the package metadata), not a copy kept in the code that can drift from it."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - only for --version

    try:
        return version("capcon")
    except PackageNotFoundError:
        return "(not installed: run `pip install -e .` for a version)"


def joined_values(argv: list[str]) -> list[str]:
    """`--from -15m` -> `--from=-15m` for DASH_VALUE_OPTIONS; everything else as given.

    A following word starting with `--` is left alone: `--from --to now` stays a missing value,
    not a time named "--to". Nothing after a bare `--` is touched.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out + argv[i:]
        following = argv[i + 1] if i + 1 < len(argv) else None
        if (
            word in DASH_VALUE_OPTIONS
            and following is not None
            and following.startswith("-")
            and not following.startswith("--")
        ):
            out.append(f"{word}={following}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    verb = words[0] if words and words[0] in VERBS else None
    try:
        # Before parsing: argparse echoes words in its messages, and a verb would store them.
        check_words(words)
    except UserError as error:
        named = f"capcon {verb}" if verb else "capcon"
        print(f"{named}: {bounded_line(error)} (see {named} --help)", file=sys.stderr)
        return error.exit_code
    parser = build_parser()
    args, unknown = parser.parse_known_args(joined_values(words))
    if unknown:
        # Named by the verb's parser, so the line points at `capcon VERB --help`, where the options are.
        parser.verb_parsers[args.verb].error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "db", None) == "":
        # `--db "$HISTORY"` with the variable unset must not quietly use the user's own history file.
        parser.verb_parsers[args.verb].error(
            "--db: empty path; expected a history file path (leave --db out for the default file)"
        )
    try:
        check_option_limits(args)  # --interval 1e9, --window 1e308: refused before any verb sleeps on them
        return int(args.run(args) or 0)
    except UserError as error:
        print(f"capcon {args.verb}: {bounded_line(error)}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `capcon history | head`: the reader has what it wanted. Point stdout at /dev/null so
        # the interpreter's last flush does not fail again with a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
