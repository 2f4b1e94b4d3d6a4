"""`capcon sim` (placeholder until its issue lands)."""


def add_parser(sub):
    parser = sub.add_parser("sim", help="(not built yet)")
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    raise NotImplementedError
