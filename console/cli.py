"""`capcon <verb>`: one module per verb in console/commands, each with `add_parser` and `run`."""

from __future__ import annotations

import argparse
import importlib
import sys

from console.errors import UserError

# Order is the order `capcon --help` lists them.
VERBS = ("plan", "watch", "demo", "sim")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="capcon",
        description=(
            "capcon: a terminal console for self-hosted vLLM fleets. It sizes a fleet from a "
            "capacity plan, watches live vLLM metrics next to that plan and flags saturation and drift."
        ),
        epilog="Run `capcon VERB --help` for the options of one verb.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in VERBS:
        module = importlib.import_module(f"console.commands.{verb}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except UserError as error:
        print(f"capcon {args.verb}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
