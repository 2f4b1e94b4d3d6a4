"""`capcon watch`: live fleet figures, by direct scrape or through Prometheus.

`--once` takes two samples `--interval` apart, prints the fleet table (or JSON)
and exits; without it the interactive console opens on the same Watcher.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from dataclasses import replace
from pathlib import Path

from console.commands.recording import (
    add_recording_options,
    history_path,
    recording,
    retention_of,
)
from console.errors import UserError
from console.commands.watch_output import _dumps, _terminal_width, any_answered, once_json, once_lines
from console.fleet_handle import FleetHandle
from console.fleet.flags import SEVERITY_RANK
from console.metrics.figures import FleetFigures
from console.tui.literal import printable  # the console's rule: control characters shown as escapes
from console.watcher import Watcher

# --once --fail-on: exit codes beside 0 done, 1 no target answered, 2 bad input.
EXIT_FLAG_ACTIVE = 3  # a flag at or above the chosen severity is raised
EXIT_FLAG_PENDING = 4  # none is raised, but such a condition holds (inside its minimum duration)
SEVERITIES = ("info", "warning", "critical")
MIN_INTERVAL = 0.2  # --once: two samples this far apart still give rates
MIN_CONSOLE_INTERVAL = 1.0  # the console: a faster refresh only burns the bastion's CPU
DEFAULT_MAX_ANSWER_MB = 128  # console.sources.prometheus.DEFAULT_MAX_ANSWER_BYTES, without importing it for --help


def add_parser(sub):
    parser = sub.add_parser(
        "watch",
        help="live fleet figures from vLLM /metrics or Prometheus",
        description=(
            "Watch a vLLM fleet: requests, tokens, queue, KV cache and latency percentiles over a window, "
            "per replica and for the fleet. Targets come from --target or the plan's fleet section. "
            "Without --once the console opens: the fleet table next to the plan, trends and flags."
        ),
        epilog=(
            "exit status: 0 done; 1 (--once) no target answered; 2 bad input (a plan file, an argument,\n"
            "a target address, a --db that is not a capcon history); with --once --fail-on LEVEL: 3 a flag\n"
            "of LEVEL or worse is raised, 4 none is raised but such a condition holds, still inside its\n"
            "minimum duration (pending). 1 wins over 3 and 4.\n"
            "examples:\n"
            "  capcon watch --target 10.0.0.5:8000 --target 10.0.0.6:8000 plans/chat-8b-l40s.yaml\n"
            "  capcon watch --target 10.0.0.5:8000 --once --json --interval 5\n"
            "  capcon watch plans/chat-8b-l40s.yaml --once --fail-on warning || page-someone   # cron, CI\n"
            "  capcon watch --source prometheus --prometheus http://prom:9090 --selector 'job=\"vllm\"' --window 300\n"
            "  capcon watch plans/assistant-70b.yaml plans/chat-8b-l40s.yaml   # one fleet per plan, with an overview\n"
            "recording: the console records every poll to the history file (--db, default in the user's data\n"
            "directory) unless --no-record; --once records only when --db is given."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("plan", nargs="*", metavar="PLAN", help="plan file(s); each plan's fleet section names its targets; several plans open an overview of the fleets")
    add_source_options(parser, "the console and the history")
    parser.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between refreshes (default 2; at least 0.2 with --once, 1 in the console)")
    parser.add_argument("--window", type=float, default=None, metavar="S", help="seconds the rates and percentiles cover (default 60; with --once and scrape, the span of the two samples)")
    parser.add_argument("--once", action="store_true", help="take two samples --interval apart, print the table and exit; with several plans one table per plan's fleet")
    parser.add_argument("--json", action="store_true", help='with --once: print one JSON object instead of the table; with several plans {"fleets": [one object per plan]}')
    parser.add_argument("--fail-on", choices=SEVERITIES, default=None, metavar="LEVEL",
                        help="with --once: exit 3 if a flag of LEVEL (info, warning or critical) or worse is raised, "
                        "4 if none is but such a condition is pending (a --once run lasts seconds; most flags need "
                        "10-120 s to raise), for cron and CI checks")
    parser.add_argument("--read-only", action="store_true", help="console: dim every key that changes the fleet")
    parser.add_argument("--theme", default=None, metavar="NAME", help="console: Textual theme (default ansi-dark, the terminal's own 16 colours); with --once it is still checked")
    add_recording_options(parser, default_on=True)
    parser.set_defaults(run=run)
    return parser


def add_source_options(parser, named_in: str) -> None:
    """The options `build_source` and `fleet_name` read (watch and record): which replicas, through what, the fleet's name."""
    parser.add_argument("--target", action="append", default=[], metavar="URL", help="a replica's URL (host:port, or a full /metrics URL); repeat for each")
    parser.add_argument("--source", choices=("scrape", "prometheus"), default=None, help="scrape replicas directly (default) or query Prometheus")
    parser.add_argument("--prometheus", metavar="URL", help="Prometheus (or Thanos, Mimir) base URL, for --source prometheus")
    parser.add_argument("--selector", default=None, metavar="SEL", help='PromQL label matchers choosing the fleet, e.g. \'job="vllm"\'')
    parser.add_argument("--name", default=None, metavar="NAME", help=f"the fleet's name in {named_in} (default: the plan's name, else taken from the targets or the selector)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="per-target (or per-query) timeout in seconds (default: the interval, at most 5)")
    parser.add_argument("--token-env", metavar="VAR", help="send a bearer token read from this environment variable "
                        "(a URL's own user:password@ is sent as HTTP Basic auth instead)")
    parser.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    parser.add_argument("--max-answer-mb", type=float, default=None, metavar="MB",
                        help="Prometheus: read at most this many MB of answers per refresh, decompressed, over its six "
                        f"queries (default {DEFAULT_MAX_ANSWER_MB:g}; a 10,000-replica fleet takes about 40)")


def check_theme(name: str | None) -> None:
    """A theme Textual does not know is a bad argument, found before any fleet or server starts."""
    if name is None:
        return
    from textual.theme import BUILTIN_THEMES  # noqa: PLC0415 - keeps `capcon --help` light

    if name not in BUILTIN_THEMES:
        raise UserError(f"--theme {name!r}: unknown theme; expected one of {', '.join(sorted(BUILTIN_THEMES))}")


def check_console_interval(interval: float) -> None:
    if interval < MIN_CONSOLE_INTERVAL:
        raise UserError(
            f"--interval {interval:g}: the console refreshes at most once a second; "
            f"expected at least {MIN_CONSOLE_INTERVAL:g} (0.2 is allowed only with --once)"
        )


def _check(args) -> None:
    if not math.isfinite(args.interval) or args.interval < MIN_INTERVAL:
        raise UserError(f"--interval {args.interval:g}: expected at least {MIN_INTERVAL:g} seconds")
    if not args.once:
        check_console_interval(args.interval)
    check_theme(args.theme)
    if args.window is not None and (not math.isfinite(args.window) or args.window <= 0):
        raise UserError(f"--window {args.window:g}: expected a positive number of seconds")
    if args.window is not None and args.window < args.interval:
        # A window shorter than the refresh never holds two samples: every rate would be unknown.
        raise UserError(f"--window {args.window:g}: shorter than --interval {args.interval:g}; expected a window of at least the interval")
    if args.timeout is not None and (not math.isfinite(args.timeout) or args.timeout <= 0):
        raise UserError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    if args.json and not args.once:
        raise UserError("--json: only with --once (the interactive console has no JSON output)")
    if args.fail_on and not args.once:
        raise UserError("--fail-on: only with --once (the console shows its flags; it has no exit status for them)")
    if args.keep_raw is not None or args.keep_minutes is not None:
        retention_of(args)  # checked before any fleet is watched


def _load_plans(paths: list[str]):
    if not paths:
        return None, []
    try:
        from console.plan.schema import load_plan
    except ImportError:
        raise UserError("plan files cannot be read yet in this build; give the replicas with --target URL") from None
    plans = [load_plan(path) for path in paths]
    return plans[0], plans


def _window_seconds(args, kind: str = "scrape") -> float:
    if args.window is not None:
        return args.window
    if args.once and kind == "scrape":
        return args.interval + _timeout(args)  # the two samples, however long the first scrape took
    return 60.0


def _timeout(args) -> float:
    return args.timeout if args.timeout is not None else min(max(args.interval, 1.0), 5.0)


def fleet_name(args, plan, source) -> str:
    """The fleet's name: --name, else the plan's, else one the targets (or the Prometheus selector) give.

    The history keys fleets by name, so two different sets of targets must never share one
    ("fleet" for every unnamed fleet would merge their histories and block each other's recorders).
    """
    if getattr(args, "name", None):
        return args.name
    if plan is not None:
        return plan.name
    targets = sorted(t.name for t in getattr(source, "targets", ()) or ())
    if targets:
        return targets[0] if len(targets) == 1 else f"{targets[0]} +{len(targets) - 1}"
    selector = getattr(source, "selector", "") or ""
    return f"prometheus {selector}".strip() if selector or getattr(source, "name", "") == "prometheus" else "fleet"


def source_kind(args, plans) -> str:
    if args.source:
        return args.source
    has_prometheus = args.prometheus or any(getattr(p.fleet, "prometheus_url", None) for p in plans if p.fleet)
    return "prometheus" if has_prometheus and not args.target else "scrape"


def build_source(args, plans):
    """The source the arguments and plan ask for; a UserError when they do not name a fleet."""
    fleets = [p.fleet for p in plans if getattr(p, "fleet", None) is not None]
    prometheus_url = args.prometheus or next((f.prometheus_url for f in fleets if f.prometheus_url), None)
    kind = source_kind(args, plans)
    from console.sources.scrape import ScrapeSource, bearer_token_from_env

    if kind == "prometheus":
        if not prometheus_url:
            raise UserError("--source prometheus: no Prometheus URL; expected --prometheus URL or a plan fleet section with prometheus_url")
        prometheus_url = _prometheus_url(prometheus_url, "--prometheus" if args.prometheus else "fleet.prometheus_url")
        max_mb = getattr(args, "max_answer_mb", None)
        if max_mb is not None and (not math.isfinite(max_mb) or max_mb <= 0):
            raise UserError(f"--max-answer-mb {max_mb:g}: expected a positive number of MB")
        selector = args.selector if args.selector is not None else next((f.selector for f in fleets if f.selector), "")
        try:
            from console.sources.prometheus import PrometheusSource
        except ImportError:
            raise UserError("--source prometheus is not available in this build; use --source scrape with --target URL") from None
        token = bearer_token_from_env(args.token_env)
        return PrometheusSource(
            prometheus_url,
            selector,
            _window_seconds(args, kind),
            _timeout(args),
            headers={"Authorization": f"Bearer {token}"} if token else None,
            verify=not args.insecure,
            max_answer_bytes=int((max_mb if max_mb is not None else DEFAULT_MAX_ANSWER_MB) * 1024 * 1024),
        )

    from console.sources.base import targets_from

    urls = list(args.target) or [url for f in fleets for url in f.targets]
    if not urls:
        raise UserError("no targets: expected --target URL (repeatable) or a plan file whose fleet section lists targets")
    return ScrapeSource(
        targets_from(urls),
        timeout=_timeout(args),
        token=bearer_token_from_env(args.token_env),
        verify=not args.insecure,
    )


def _prometheus_url(text: str, named: str) -> str:
    """Prometheus' base URL by the one address rule (`user:password@` allowed, sent as Basic auth)."""
    from console.plan.schema import checked_url, masked_target

    try:
        return checked_url(text)
    except ValueError as problem:
        raise UserError(f"{named} {masked_target(text)!r}: {problem}; expected an http(s) URL such as http://prometheus:9090") from None


def run(args) -> int:
    _check(args)
    plan, plans = _load_plans(args.plan)
    path = history_path(args)
    if len(plans) > 1:
        _check_fleets(args, plans)
        return _once_for_fleets(args, plans, path) if args.once else _console_for_fleets(args, plans, path)
    source = build_source(args, plans)
    watcher = Watcher(source, _window_seconds(args, source_kind(args, plans)), plan=plan, interval_seconds=args.interval)
    handle = FleetHandle(fleet_name(args, plan, source), plan, watcher)
    if args.once:
        with recording(path, args, [handle], "watch") as recorder:
            feed = _feed(handle, recorder, args)
            figures = asyncio.run(_twice(watcher, args.interval, args.window is not None, feed))
        view, plan_file = feed.previous, (args.plan[0] if args.plan else None)
        if args.json:
            print(_dumps(once_json(figures, view, plan_file)))
        else:
            print("\n".join(once_lines(figures, view, plan is not None, _terminal_width())))
        return _once_exit(args, [figures], [view])
    return _console(args, [handle], path)


def _once_exit(args, results: list[FleetFigures], views: list) -> int:
    """1 when no target of any fleet answered; else, with --fail-on, 3 or 4 for flags; else 0."""
    if not any(any_answered(figures) for figures in results):
        return 1
    if args.fail_on is None:
        return 0
    floor = SEVERITY_RANK[args.fail_on]
    if any(SEVERITY_RANK[f.severity] >= floor for view in views for f in view.flags):
        return EXIT_FLAG_ACTIVE
    if any(SEVERITY_RANK[p.severity] >= floor for view in views for p in view.pending):
        return EXIT_FLAG_PENDING
    return 0


def _console(args, handles: list[FleetHandle], path: Path | None) -> int:
    """The console on `handles`, recording to `path` (None: not recording); the recorder closes after it."""
    from console.tui.app import open_console

    with recording(path, args, handles, "watch") as recorder:
        return int(open_console(handles, args, recorder=recorder) or 0)


def _feed(handle: FleetHandle, recorder, args):
    """Each --once poll made into a view, as the console makes it (plan beside actual, flags);
    with --db (a recorder) each also goes to the history like a console poll."""
    from console.store.poll_feed import PollFeed

    return PollFeed(handle, recorder, args.interval)


def _check_fleets(args, plans) -> None:
    """Several plans: each names its own fleet, so each needs a fleet section, and each comes once."""
    if args.target:
        raise UserError("--target with several plans: each plan's fleet section names its replicas; expected one plan, or no --target")
    if getattr(args, "name", None):
        raise UserError("--name with several plans: each fleet is named after its plan; expected one plan, or no --name")
    seen: dict[Path, str] = {}
    for path in args.plan:
        resolved = Path(path).resolve()
        if resolved in seen:
            # Refused rather than merged: two blocks of one fleet would read as two fleets.
            raise UserError(f"{path}: given twice (also as {seen[resolved]}); expected each plan once")
        seen[resolved] = path
    for path, plan in zip(args.plan, plans):
        if getattr(plan, "fleet", None) is None:
            raise UserError(f"{path} has no fleet section; expected fleet.targets or fleet.prometheus_url")


def _fleet_watchers(args, plans) -> list[Watcher]:
    """One watcher per plan, each on its own fleet section."""
    return [
        Watcher(build_source(args, [plan]), _window_seconds(args, source_kind(args, [plan])), plan=plan, interval_seconds=args.interval)
        for plan in plans
    ]


def _once_for_fleets(args, plans, path: Path | None = None) -> int:
    """Several plans with --once: one block (or JSON entry) per fleet, never one merged fleet."""
    watchers = _fleet_watchers(args, plans)
    handles = [FleetHandle(plan.name, plan, watcher) for plan, watcher in zip(plans, watchers)]

    async def poll_all(feeds) -> list[FleetFigures]:
        return list(await asyncio.gather(*(
            _twice(h.watcher, args.interval, args.window is not None, feed) for h, feed in zip(handles, feeds)
        )))

    with recording(path, args, handles, "watch") as recorder:
        feeds = [_feed(h, recorder, args) for h in handles]
        results = asyncio.run(poll_all(feeds))
    views = [feed.previous for feed in feeds]
    if args.json:
        fleets = [once_json(figures, view, path) for path, figures, view in zip(args.plan, results, views)]
        print(_dumps({"fleets": fleets}))
    else:
        blocks = [
            "\n".join([printable(f"plan {plan.name} ({path})"), *once_lines(figures, view, True, _terminal_width())])
            for path, plan, figures, view in zip(args.plan, plans, results, views)
        ]
        print("\n\n".join(blocks))
    return _once_exit(args, results, views)


def _console_for_fleets(args, plans, path: Path | None = None) -> int:
    """Several plans: one fleet each, from its own fleet section, with an overview screen."""
    handles = [FleetHandle(plan.name, plan, watcher) for plan, watcher in zip(plans, _fleet_watchers(args, plans))]
    return _console(args, handles, path)


async def _twice(watcher: Watcher, interval: float, explicit_window: bool, feed=None) -> FleetFigures:
    """Scrape: two samples an interval apart. Prometheus computes its own window: one answer.

    `feed` (a PollFeed) makes each poll a view, and with --once --db records it, as the console would.
    """
    try:
        first = await watcher.poll()
        if feed is not None:
            feed.add(first, time.time())
        if watcher.source_name != "scrape":
            return first
        await asyncio.sleep(interval)
        second = await watcher.poll()
        if feed is not None:
            feed.add(second, time.time())
    finally:
        await watcher.aclose()
    if explicit_window:
        return second
    # The figures cover exactly the span between the two samples.
    return replace(second, window_seconds=round(second.at - first.at, 3))
