"""`python -m console.gateway ARGS`: the same as `capcon gateway ARGS` (the verb's own parser and run)."""

from __future__ import annotations

import sys

from console.cli import OneLineParser
from console.commands import gateway
from console.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="capcon")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=OneLineParser)
    gateway.add_parser(sub)
    args = parser.parse_args(["gateway", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.run(args) or 0)
    except UserError as error:
        print(f"capcon gateway: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
