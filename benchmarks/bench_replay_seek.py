"""CPU seconds of a replay jump into the middle of a one-hour recording, with and without checkpoints.

    python benchmarks/bench_replay_seek.py [--replicas 20] [--minutes 60] [--seeks 5] [--quick]

The recording is made the way the console makes one: replicas' samples grown from a real vLLM
0.32 /metrics capture (benchmarks/bench_history.py's load), each poll through `Watcher.replay`
and `advance` against the project's plan, written with `Store.write_poll(poll_record(...))`, and
the poll feed's state attached every CHECKPOINT_POLLS polls (stored as replay checkpoints).

Measured, in CPU seconds (time.process_time), on the same file in the same process:
  - the first view (`first_view`: open, index, first frame at the start of the recording);
  - jumps (`ReplayController.seek`) to `--seeks` moments spread over the middle of the hour, each
    from a freshly opened replay, carrying on from the checkpoint before the target;
  - the baseline: the same jumps with the checkpoints set aside, warming up on the 15 minutes
    before each target (what a file written before checkpoints costs).
Each jump's views are checked equal to the baseline's figures and trends, and its flags to
playing up to that moment. `--quick` is a smoke run (4 replicas, 20 minutes, 2 jumps).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_history import DEFAULT_PAGE, START, Replica

from console.fleet.view import advance
from console.live.feed import poll_record
from console.live.handle import FleetHandle
from console.live.watcher import Poll, RecordedSource, Watcher
from console.metrics.exposition import parse
from console.metrics.vllm import FAMILIES, sample_from_page
from console.plan.schema import load_plan
from console.replay.controller import ReplayController, first_view
from console.replay.loader import open_replay
from console.store.checkpoints import CHECKPOINT_POLLS
from console.store.database import Store
from console.store.records import PollState
from console.targets import TargetResult

PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"
FLEET = "bench"


def record(path: Path, replicas: int, seconds: int) -> dict[int, object]:
    """A recording as the console writes one; returns the live view of a few polls (by index) to check against."""
    base = sample_from_page(parse(DEFAULT_PAGE.read_text(), FAMILIES), START)
    plan = load_plan(PLAN)
    watcher = Watcher(RecordedSource("scrape"), 60.0, interval_seconds=1.0)
    handle = FleetHandle(FLEET, plan, watcher)
    fleet = [Replica(i, base) for i in range(replicas)]
    store = Store.open(path)
    previous = None
    views = {}
    for k in range(seconds):
        at = START + k + 0.013 * (k % 7)
        results = tuple(TargetResult(r.name, r.url, "up", r.step(at), "", at) for r in fleet)
        figures = watcher.replay(results, at + 0.001)
        poll = Poll(figures, results, at + 0.001, watcher.window_seconds, watcher.interval_seconds)
        view = advance(previous, FLEET, figures, handle.plan_at(at + 0.002), at + 0.002)
        entry = poll_record(FLEET, poll, previous, view, plan, handle.plan_time(view.now))
        if (k + 1) % CHECKPOINT_POLLS == 0:
            entry = replace(entry, state=PollState(view.trends, view.flag_state, watcher.memory()))
        store.write_poll(entry)
        views[k] = view
        previous = view
    store.close()
    return views


def seek_cpu(path: Path, target: float, checkpoints: bool):
    """CPU seconds of one jump from a freshly opened replay (opening not counted), its frame and poll index."""
    replay = open_replay(path)
    try:
        if not checkpoints:
            for fleet in replay.fleets:
                fleet.checkpoints = []
        controller = ReplayController(replay, playing=False)
        controller.open()
        began = time.process_time()
        frame = controller.seek(target)
        return time.process_time() - began, frame, replay.fleets[0].index_at(frame.at)
    finally:
        replay.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seeks", type=int, default=5, help="jumps measured, spread over the middle of the hour")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 replicas, 20 minutes, 2 jumps")
    parser.add_argument("--keep", type=Path, help="record into this file, or replay it if it exists (no live check)")
    args = parser.parse_args(argv)
    if args.quick:
        args.replicas, args.minutes, args.seeks = 4, 20.0, 2
    seconds = int(args.minutes * 60)
    print(f"recording: {args.replicas} replicas, {seconds} polls at 1 s, a checkpoint every {CHECKPOINT_POLLS} polls")
    with tempfile.TemporaryDirectory(prefix="bench-seek-") as folder:
        path = args.keep or Path(folder) / "history.sqlite"
        live: dict[int, object] | None = None
        if not path.exists():
            began = time.process_time()
            live = record(path, args.replicas, seconds)
            print(f"recorded in {time.process_time() - began:.1f} s CPU; file {path.stat().st_size / 1e6:.1f} MB")
        store = Store.open(path, read_only=True)
        stored = store.connection.execute("SELECT count(*), sum(length(state)) FROM checkpoints").fetchone()
        store.close()
        print(
            f"checkpoints: {stored[0]}, {stored[1] / 1e3:.0f} KB in all ({stored[1] / stored[0]:.0f} B each;"
            f" {stored[1] / path.stat().st_size:.2%} of the file)"
        )

        began = time.process_time()
        controller, frame = first_view(path)
        first = time.process_time() - began
        controller.replay.close()
        print(f"first_view_cpu_seconds: {first:.3f}  (open, index, first frame at the start)")

        # Jumps spread over the middle third, none on a checkpoint's own poll (the worst is just before the next).
        # Each a different distance past a checkpoint, up to the farthest (CHECKPOINT_POLLS - 1 polls to compute).
        middle, spread = seconds / 2, max(args.seeks - 1, 1)
        targets = [
            round(middle - seconds / 6 + i * (seconds / 3) / spread) + round((CHECKPOINT_POLLS - 1) * i / spread) + 0.5
            for i in range(args.seeks)
        ]
        fast, slow = [], []
        for target in targets:
            cpu, frame, index = seek_cpu(path, START + target, checkpoints=True)
            base_cpu, base_frame, _ = seek_cpu(path, START + target, checkpoints=False)
            (view,), (base_view,) = frame.views, base_frame.views
            assert live is None or view == live[index], f"the jump to +{target:.0f} s does not show the live view"
            assert view.figures == base_view.figures and view.trends == base_view.trends
            fast.append(cpu)
            slow.append(base_cpu)
            print(
                f"  jump to +{target:6.0f} s: {cpu:.3f} s CPU, {frame.computed} polls"
                f" (warm-up: {base_cpu:.3f} s, {base_frame.computed} polls)"
            )
        seek, base = statistics.median(fast), statistics.median(slow)
        print(
            f"mid_hour_seek_cpu_seconds: {seek:.3f} (max {max(fast):.3f}; target < 1 s)"
            f"  baseline_warmup_cpu_seconds: {base:.3f}  ratio_vs_warmup {seek / base:.3f}"
        )
    if args.minutes < 60 or args.replicas < 20:
        print(f"\nnote: {args.replicas} replicas for {args.minutes:g} min; the target is for 20 replicas over an hour")
    return 0


if __name__ == "__main__":
    sys.exit(main())
