"""`python -m console.gateway ARGS`: the same as `capcon gateway ARGS`, through the CLI's own checks."""

from __future__ import annotations

import sys

from console.cli import main as cli_main


def main(argv: list[str] | None = None) -> int:
    return cli_main(["gateway", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
