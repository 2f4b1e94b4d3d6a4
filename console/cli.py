"""`capcon <verb>`: one module per verb in console/commands, each with `add_parser` and `run`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from console.errors import UserError

# Order is the order `capcon --help` lists them.
VERBS = ("plan", "watch", "record", "replay", "history", "export", "demo", "sim")


class OneLineParser(argparse.ArgumentParser):
    """Argument errors in one line, pointing at --help, instead of the whole usage block first."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="capcon",
        description=(
            "capcon: a terminal console for self-hosted vLLM fleets. It sizes a fleet from a "
            "capacity plan, watches live vLLM metrics next to that plan and flags saturation and drift."
        ),
        epilog="Run `capcon VERB --help` for the options of one verb.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=OneLineParser)
    parser.verb_parsers = {}
    for verb in VERBS:
        module = importlib.import_module(f"console.commands.{verb}")
        parser.verb_parsers[verb] = module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # Named by the verb's parser, so the line points at `capcon VERB --help`, where the options are.
        parser.verb_parsers[args.verb].error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "db", None) == "":
        # `--db "$HISTORY"` with the variable unset must not quietly use the user's own history file.
        parser.verb_parsers[args.verb].error("--db: empty path; expected a history file path (leave --db out for the default file)")
    try:
        return int(args.run(args) or 0)
    except UserError as error:
        print(f"capcon {args.verb}: {error}", file=sys.stderr)
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
