"""`capcon record`: the console's poll loop without the console, writing every poll to the history file.

For a recorder that runs for weeks on a bastion: the same sources, window and flags as
`capcon watch`, one poll at a time per fleet (the next starts `--interval` after the last one
finished), each poll handed to the recorder's writer thread. SIGTERM or Ctrl+C stops it
cleanly: what is queued is written (within a few seconds), then exit 0. A second signal
meanwhile ends that wait at once: the polls not written are counted on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from console.args import BARE_INTERVAL, BARE_WINDOW, OPTION_LIMITS, SubParsers, span
from console.commands.recording import (
    add_recording_options,
    history_path,
    open_recorder,
    retention_of,
)
from console.errors import UserError
from console.live.defaults import DEFAULT_INTERVAL_SECONDS, MIN_CONSOLE_INTERVAL_SECONDS
from console.live.freshness import STALE_AFTER_INTERVALS, Freshness
from console.live.setup import add_source_options, fleet_handles, load_plans
from console.text import PIECE_CHARACTERS, bounded_line, printable

if TYPE_CHECKING:
    from console.fleet.view import FleetView
    from console.live.handle import FleetHandle
    from console.store.recorder import Recorder, RecorderStatus

# The poll stack (sources, the event loop) is imported by the steps that poll, so that
# `capcon record --help` starts without it.

DESCRIPTION = """\
Record one or more vLLM fleets to the history file without opening the console:
the same scrape or Prometheus source, window and flags as `capcon watch`, so
`capcon replay`, `capcon history` and `capcon export` read what it wrote. Several
plans record several fleets into one file. A file that another writer locks, that
is read-only or full is reported on stderr and recording goes on: polls wait in
memory (up to ten minutes of them) and land when the file takes writes again.
One writer per fleet and file: a fleet that another running capcon already records
into the file is refused (exit 2). Without --keep-raw/--keep-minutes the file keeps
what it kept before (48h raw, 90d rollups for a new file).
"""

EPILOG = """\
stopping: SIGTERM or Ctrl+C writes what is queued (up to 5 s); a second SIGTERM or Ctrl+C
during that wait stops at once and says how many polls were not written.
exit status: 0 stopped by SIGTERM, Ctrl+C or --duration with every poll written; 1 stopped with
polls not written (a second Ctrl+C, a file still locked, read-only, full or damaged at exit, polls
dropped while it refused writes, a poll that could not be stored) or with a fleet whose last two
intervals gave no fresh poll (it says so on stderr as soon as it happens); 2 bad input (a plan, an argument,
a --db that is not a capcon history or is damaged, a fleet another capcon already records into the file).
examples:
  capcon record plans/chat-8b-l40s.yaml                       # the plan's fleet, to the default file
  capcon record --target 10.0.0.5:8000 --target 10.0.0.6:8000 --db /var/lib/capcon/history.sqlite
  capcon record plans/assistant-70b.yaml plans/chat-8b-l40s.yaml --interval 5 --keep-raw 7d"""

MIN_INTERVAL = MIN_CONSOLE_INTERVAL_SECONDS  # as the console: a faster poll only burns the bastion's CPU and the disk


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "record",
        help="record fleets to the history file without the console (a recorder for a bastion)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "plan",
        nargs="*",
        metavar="PLAN",
        help="plan file(s); each plan's fleet section names its targets; several plans record several fleets",
    )
    add_source_options(parser, "the history")
    parser.add_argument(
        "--interval",
        type=span(OPTION_LIMITS["interval"].high, BARE_INTERVAL),
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="DURATION",
        help=f"time between polls: 2s, 500ms, 1m; a bare number is seconds, up to {BARE_INTERVAL:g} "
        f"(default {DEFAULT_INTERVAL_SECONDS:g}s, at least {MIN_INTERVAL:g}s, at most 1h)",
    )
    parser.add_argument(
        "--window",
        type=span(OPTION_LIMITS["window"].high, BARE_WINDOW),
        default=None,
        metavar="DURATION",
        help="time the recorded flags' rates and percentiles cover: 60s, 5m (default 60s; a bare number is seconds, "
        "up to 3600)",
    )
    parser.add_argument(
        "--duration",
        type=span(OPTION_LIMITS["duration"].high, OPTION_LIMITS["duration"].high),
        default=None,
        metavar="DURATION",
        help="stop after this long: 90s, 30m, 12h, 7d; a bare number is seconds (default: until SIGTERM or Ctrl+C)",
    )
    add_recording_options(parser, default_on=True, offer_no_record=False)
    # build_source (shared with watch) reads these; a recorder never runs the --once path.
    parser.set_defaults(run=run, once=False, no_record=False)
    return parser


def _check(args: argparse.Namespace) -> None:
    if not math.isfinite(args.interval) or args.interval < MIN_INTERVAL:
        raise UserError(f"--interval {args.interval:g}: expected at least {MIN_INTERVAL:g} seconds")
    if args.window is not None and (not math.isfinite(args.window) or args.window < args.interval):
        raise UserError(
            f"--window {args.window:g}: expected a number of seconds of at least --interval ({args.interval:g})"
        )
    if args.timeout is not None and (not math.isfinite(args.timeout) or args.timeout <= 0):
        raise UserError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    if args.duration is not None and (not math.isfinite(args.duration) or args.duration <= 0):
        raise UserError(f"--duration {args.duration:g}: expected a positive number of seconds")
    retention_of(args)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from console.bench.estimate import estimate_capacity

    _check(args)
    handles = fleet_handles(args, load_plans(args.plan, estimate_capacity))
    path = history_path(args)
    assert path is not None, "record always records: it offers neither --no-record nor --once"
    recorder = open_recorder(path, args, on_change=_say_state)
    fleet_names = [h.name for h in handles]
    taken = recorder.other_writers(fleet_names)
    if taken:
        recorder.close(0)
        writer = taken[fleet_names[[name in taken for name in fleet_names].index(True)]]
        raise UserError(f"{writer.words(str(path))}; expected another --db or a different fleet")
    from console.commands.recording import polls, retention_words

    source = handles[0].watcher.source_name
    targets = sum(len(getattr(h.watcher.source, "targets", None) or ()) for h in handles)
    counted = f"{targets} target{'' if targets == 1 else 's'}, " if targets else ""
    fleets = ", ".join(repr(h.name) for h in handles)
    print(
        f"recording to {path}: {fleets} ({counted}{source}), every {args.interval:g} s, window {handles[0].watcher.window_seconds:g} s,"
        f" keeping {retention_words(recorder)}",
        flush=True,
    )
    if recorder.checking:
        print(
            f"capcon record: checking {path} for damage before the first write (a big file); polls wait meanwhile",
            file=sys.stderr,
            flush=True,
        )
    recorder.start(detail={"command": "record", "fleets": fleet_names, "interval": args.interval})
    hurried: list[int] = []
    logs = [_FleetLog(handle.name, args.interval) for handle in handles]
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def hurry(signum: int, frame: FrameType | None) -> None:
        """A second SIGINT/SIGTERM while the queue is written: stop now, the count is still said."""
        hurried.append(signum)
        recorder.give_up()

    try:
        try:
            asyncio.run(_record(handles, logs, recorder, args.interval, args.duration, on_stop=hurry))
        finally:
            from console.commands.recording import close_recorder

            # Ours from the moment the poll loops stop (set in _record): a signal never cuts the close short silently.
            for signum in previous:
                signal.signal(signum, hurry)
            close_recorder(recorder, "record", give_up="a second Ctrl+C or SIGTERM gives up")
        status = recorder.status
        if hurried:
            print(
                f"capcon record: a second {signal.Signals(hurried[0]).name} ended the wait for the file",
                file=sys.stderr,
                flush=True,
            )
        print(f"stopped: {polls(status.written)} written to {path}", flush=True)
        stalled = [words for words in (log.stale_at_exit() for log in logs) if words]
        for words in stalled:
            print(f"capcon record: {words}", file=sys.stderr, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 1 if status.waiting or status.dropped or status.unstored or stalled else 0


def _say_state(status: RecorderStatus) -> None:
    """One stderr line each time the file starts or stops taking writes."""
    from console.commands.recording import polls

    if status.state == "recording":
        print(f"capcon record: recording again ({polls(status.written)} written so far)", file=sys.stderr, flush=True)
    elif status.state in ("locked", "read-only", "full"):
        # A log that cannot be folded into the file still takes the polls: nothing waits then.
        waits = "; polls wait in memory" if status.waiting else ""
        print(
            f"capcon record: history {status.state}: {status.detail}{waits} ({status.path})",
            file=sys.stderr,
            flush=True,
        )
    elif status.state == "error":
        print(f"capcon record: history error: {status.detail} ({status.path})", file=sys.stderr, flush=True)


async def _record(
    handles: list[FleetHandle],
    logs: list[_FleetLog],
    recorder: Recorder,
    interval: float,
    duration: float | None,
    on_stop: Callable[[int, FrameType | None], None] | None = None,
) -> None:
    """Poll every fleet until SIGTERM, SIGINT or `duration`; each fleet on its own chain of polls.

    `on_stop` (a signal handler) takes SIGINT and SIGTERM once polling has stopped."""
    import asyncio

    from console.live.collector import COLLECTOR
    from console.live.feed import PollFeed, gateway_watch
    from console.live.loop import Cadence, poll_loop

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def signalled(signum: int) -> None:
        if stop.is_set() and on_stop is not None:
            on_stop(signum, None)  # a second signal while the poll loops wind down
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, signalled, signum)
    if duration is not None:
        loop.call_later(duration, stop.set)
    cadence = Cadence(interval)
    COLLECTOR.tune()  # the cyclic collector's passes between polls, as in the console
    # The gateways in front of a fleet are read in the same step as its replicas, as the console reads them: the
    # flags recorded judge the plan's latency targets on what the clients saw.
    feeds = [PollFeed(handle, recorder, gateways=gateway_watch(handle)) for handle in handles]
    loops = [
        asyncio.create_task(poll_loop(feed, cadence, log.on_view, log.on_failure), name=f"record-{feed.handle.name}")
        for feed, log in zip(feeds, logs)
    ]
    loops.append(asyncio.create_task(_watch_for_stalls(logs, interval), name="record-stalls"))
    try:
        await stop.wait()
    finally:
        cadence.stop()
        for task in loops:
            task.cancel()  # a poll in flight is not recorded: it never finished
        await asyncio.gather(*loops, return_exceptions=True)
        for feed in feeds:
            try:
                await feed.aclose()
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
            if on_stop is not None:
                signal.signal(signum, on_stop)


class _FleetLog:
    """What a fleet's poll loop says on stderr: a failure once, until a poll succeeds again; a stall once, when
    no fresh poll came for two intervals; and whether its last intervals wrote nothing, for the exit status."""

    def __init__(self, fleet: str, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.fleet = printable(fleet)  # a name taken from a target's address: anyone's text
        self.clock = clock
        self.freshness = Freshness(interval, clock())  # its reason: the failure said last, until a poll succeeds
        self.said_stale = False

    def on_view(self, view: FleetView) -> None:
        if self.said_stale:
            print(f"capcon record: {self.fleet}: polls fresh again", file=sys.stderr, flush=True)
        self.freshness.polled(self.clock())
        self.said_stale = False

    def on_failure(self, error: Exception) -> None:
        from console.live.loop import failure_words

        words = bounded_line(failure_words(error), PIECE_CHARACTERS)
        if words != self.freshness.reason:
            print(f"capcon record: {self.fleet}: poll failed: {words}", file=sys.stderr, flush=True)
        self.freshness.failed(words)
        self.check()

    def check(self) -> None:
        """Say once that the fleet's figures have gone stale (a failing poll, or one that never ends)."""
        now = self.clock()
        if self.freshness.stale(now) and not self.said_stale:
            self.said_stale = True
            print(f"capcon record: {self.fleet}: {self.freshness.words(now)}", file=sys.stderr, flush=True)

    def stale_at_exit(self) -> str | None:
        """Why the fleet's last intervals wrote nothing (the exit status is then 1), or None."""
        now = self.clock()
        if not self.freshness.stale(now):
            return None
        return (
            f"{self.fleet}: {self.freshness.words(now)}; nothing written for its last {STALE_AFTER_INTERVALS} intervals"
        )


async def _watch_for_stalls(logs: list[_FleetLog], interval: float) -> None:
    """A poll that never ends calls no callback: look at each fleet's age every interval all the same."""
    import asyncio

    while True:
        await asyncio.sleep(interval)
        for log in logs:
            log.check()
