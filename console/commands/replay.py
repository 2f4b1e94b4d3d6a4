"""`capcon replay` (being built)."""

from __future__ import annotations

from console.errors import UserError


def add_parser(sub):
    parser = sub.add_parser("replay", help="(being built)")
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    raise UserError("replay: not built yet")
