"""`capcon history import --prometheus URL --selector S --from WHEN --to WHEN`: a history file filled from Prometheus.

Each step of the range (--step, default a minute) becomes one poll of the fleet, its replicas the
selector's instances, written to the same tables a recording writes, with source `import` and an
`import` event saying from where. With --plan the polls carry that plan (and its clock), so
`history`, `history --backtest` and replay read them against it as they read a recording.

Failures are one line and exit 1: a bad URL, Prometheus unreachable or answering an error, an answer
that is not Prometheus', a selector matching no vLLM series in the range, a range the fleet already
holds polls in (imported twice, the figures would double).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from console.errors import UserError
from console.plan.model import Plan
from console.targets import checked_url, masked_target
from console.when import format_when

if TYPE_CHECKING:
    from console.store.database import Store

CHUNK_SECONDS = 3600.0  # one range query covers this much: memory is bounded by one chunk's answer
DEFAULT_STEP_SECONDS = 60.0
STEPS = (5.0, 3600.0)  # the shortest and longest step accepted
DEFAULT_FLEET = "imported"


class ImportFailed(UserError):
    """The import could not be done (Prometheus, the selector, the range): one line, exit 1."""

    exit_code = 1


def add_import_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus", metavar="URL", help="import: the Prometheus (or compatible) API to read the range from"
    )
    parser.add_argument(
        "--selector", metavar="S", help='import: the label matchers of the fleet\'s series, e.g. job="vllm"'
    )
    parser.add_argument(
        "--step",
        metavar="SECONDS",
        type=float,
        default=None,
        help=f"import: seconds between the imported polls (default {DEFAULT_STEP_SECONDS:g})",
    )


def check_not_import(args: argparse.Namespace) -> None:
    """The import's options given without `import`: named, rather than quietly ignored."""
    for option, value in (("--prometheus", args.prometheus), ("--selector", args.selector), ("--step", args.step)):
        if value is not None:
            raise UserError(
                f"{option} is an option of `capcon history import`; expected `capcon history import {option} ...`"
            )


def _plan_clock(plan: Plan | None, at: float) -> float | None:
    if plan is None:
        return None
    offset = datetime.fromtimestamp(at, UTC).astimezone(ZoneInfo(plan.timezone)).utcoffset()
    return at + (offset.total_seconds() if offset is not None else 0.0)


def run_import(
    args: argparse.Namespace,
    file_plan: Plan | None,
    when_option: Callable[[str, str | None, str, float], float],
    default_db_path: Callable[[], Path],
) -> int:
    from console.sources.prometheus_history import (
        SOURCE,
        RangeFailed,
        RangeReader,
        rows_from_matrix,
        series_query,
    )
    from console.store.database import Store
    from console.store.records import PollRecord  # it reads the fleet's flags: not for `history --help`

    if not args.prometheus:
        raise ImportFailed(
            "import needs --prometheus URL; expected the Prometheus API's address, e.g. http://prometheus:9090"
        )
    try:
        url = checked_url(args.prometheus)
    except ValueError as problem:
        raise ImportFailed(
            f"--prometheus {masked_target(args.prometheus)!r}: {problem}; expected an address such as http://prometheus:9090"
        ) from None
    selector = (args.selector or "").strip()
    if not selector or selector in ("{}",):
        raise ImportFailed('import needs --selector S; expected the fleet\'s label matchers, e.g. job="vllm"')
    if args.start is None or args.end is None:
        raise ImportFailed(
            "import needs --from WHEN and --to WHEN; expected the range to read, e.g. --from -7d --to now"
        )
    now = time.time()
    start = when_option("--from", args.start, "now", now)
    end = when_option("--to", args.end, "now", now)
    if not end > start:
        raise ImportFailed(
            f"--from {format_when(start)} is not before --to {format_when(end)}; expected an earlier --from"
        )
    step = args.step if args.step is not None else DEFAULT_STEP_SECONDS
    if not STEPS[0] <= step <= STEPS[1]:
        raise ImportFailed(f"--step {step:g}: outside {STEPS[0]:g}-{STEPS[1]:g} seconds")
    fleet = args.fleet or (file_plan.name if file_plan is not None else DEFAULT_FLEET)
    path = args.db if args.db else default_db_path()
    reader = RangeReader(url)
    query = series_query(selector)
    store = None
    polls = 0
    replicas: set[str] = set()
    first = last = None
    try:
        for answer in reader.chunks(query, start, end, step, CHUNK_SECONDS):
            for poll in rows_from_matrix(answer):
                if store is None:  # the file is opened with the first poll: a failed import writes nothing
                    store = Store.open(path)
                    _refuse_overlap(store, fleet, start, end)
                store.write_poll(
                    PollRecord(
                        fleet=fleet,
                        at=poll.at,
                        watched_at=poll.at,
                        source=SOURCE,
                        window_seconds=max(2 * step, 60.0),
                        interval_seconds=step,
                        results=poll.results,
                        plan=file_plan,
                        plan_clock=_plan_clock(file_plan, poll.at),
                    )
                )
                polls += 1
                replicas.update(r.url for r in poll.results)
                first = poll.at if first is None else first
                last = poll.at
            del answer  # the chunk is written: its answer goes before the next is read
        if store is None:
            raise ImportFailed(
                f"{reader.shown}: selector {selector} matched no vLLM series from {format_when(start)[:16]} "
                f"to {format_when(end)[:16]}; expected the labels of the fleet's vLLM targets (try up{{{selector.strip('{}')}}})"
            )
        store.write_event(
            now,
            "import",
            fleet=fleet,
            subject=reader.shown,
            detail={"selector": selector, "from": start, "to": end, "step_seconds": step, "polls": polls},
        )
    except RangeFailed as error:
        raise ImportFailed(str(error)) from None
    finally:
        if store is not None:
            store.close()
    print(
        f"imported {polls:,} polls of {len(replicas)} replica{'s' if len(replicas) != 1 else ''} "
        f"({format_when(first)[:16]} to {format_when(last)[:16]}, every {step:g} s) from {reader.shown} "
        f"into {path} as fleet {fleet}"
    )
    return 0


def _refuse_overlap(store: Store, fleet: str, start: float, end: float) -> None:
    fleet_id = store.fleet_id(fleet)
    if fleet_id is None:
        return
    held = store.connection.execute(
        "SELECT count(*), min(at), max(at) FROM polls WHERE fleet_id = ? AND at >= ? AND at < ?", (fleet_id, start, end)
    ).fetchone()
    if held[0]:
        raise ImportFailed(
            f"{store.path}: fleet {fleet} already holds {held[0]:,} polls from {format_when(held[1])[:16]} to "
            f"{format_when(held[2])[:16]}; expected another --fleet or a range it does not hold (imported twice, "
            "its figures would double)"
        )
