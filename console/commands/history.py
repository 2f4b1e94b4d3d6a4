"""`capcon history` (being built)."""

from __future__ import annotations

from console.errors import UserError


def add_parser(sub):
    parser = sub.add_parser("history", help="(being built)")
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    raise UserError("history: not built yet")
