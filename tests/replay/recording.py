"""Recorded histories for replay tests: polls built by the live pipeline (Watcher, advance, poll_record) into a real SQLite file.

`record_synthetic` makes a fleet of replicas whose counters and histograms grow as
a served load would, with an incident in the middle (one replica down, another one
queueing), on a made-up clock: each poll goes through `Watcher.replay` (which is
what `Watcher.poll` calls with its fresh scrape) and `advance`, exactly as the
console's poll loop does, and is written with `Store.write_poll(poll_record(...))`.
The live views are kept so tests can compare what the replay shows.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

from console.ahead.profile import plan_profile
from console.fleet.view import FleetView, advance
from console.live.feed import poll_record
from console.live.handle import FleetHandle
from console.live.watcher import Watcher
from console.metrics.vllm import Histogram, ReplicaSample
from console.plan.schema import load_plan
from console.store.checkpoints import CHECKPOINT_POLLS
from console.store.database import Store
from console.store.records import PollState
from console.targets import TargetResult
from tests.live.polls import replayed_poll

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"
# Monday 2026-11-30 14:00:00 UTC: a weekday afternoon, when the plan schedules its replicas.
T0 = 1_796_047_200.0

LATENCY_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, math.inf)
TOKEN_BOUNDS = (16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, math.inf)


class ScrapeName:
    """The recorded source, for a watcher that only replays results."""

    name = "scrape"


@dataclass
class Incident:
    """What goes wrong, in seconds from the start: a replica down for a while, one queueing."""

    down_replica: int | None = 1
    down_from: float = 300.0
    down_until: float = 420.0
    queue_replica: int | None = 2
    queue_from: float = 600.0
    queue_until: float = 700.0


@dataclass
class Recorded:
    path: Path
    fleet: str
    times: list[float] = field(default_factory=list)
    views: list[FleetView] = field(default_factory=list)
    replicas: list = field(default_factory=list)  # the fleet itself, for a later run of the console to carry on with


def _histogram(rng: random.Random, previous: Histogram | None, bounds, new: int, scale: float) -> Histogram:
    counts = list(previous.counts) if previous else [0.0] * len(bounds)
    total = previous.sum if previous else 0.0
    for _ in range(new):
        value = rng.expovariate(1.0 / scale)
        total += value
        for i, bound in enumerate(bounds):
            if value <= bound:
                counts[i] += 1
    return Histogram(tuple(bounds), tuple(counts), total, counts[-1])


class SyntheticReplica:
    def __init__(self, index: int, seed: int) -> None:
        self.index = index
        self.rng = random.Random(seed * 7919 + index)
        self.sample: ReplicaSample | None = None
        self.start_time = T0 - 3600.0

    def scrape(self, at: float, serving: bool, queueing: bool) -> TargetResult:
        name, url = f"replica-{self.index}", f"http://127.0.0.1:{8100 + self.index}/metrics"
        if not serving:
            self.sample = None  # comes back as a new process
            self.start_time = at + 1.0
            return TargetResult(name, url, "down", None, "connection refused", at)
        rng, before = self.rng, self.sample
        new = rng.randint(2, 5)
        counters = (
            dict(before.counters)
            if before
            else dict.fromkeys(
                (
                    "requests",
                    "prompt_tokens",
                    "generation_tokens",
                    "preemptions",
                    "prefix_cache_queries",
                    "prefix_cache_hits",
                ),
                0.0,
            )
        )
        counters["requests"] += new
        counters["prompt_tokens"] += new * rng.randint(1500, 2500)
        counters["generation_tokens"] += new * rng.randint(300, 500)
        counters["prefix_cache_queries"] += new * 100
        counters["prefix_cache_hits"] += new * 30
        old = before.histograms if before else {}
        latency = 3.0 if queueing else 1.0
        histograms = {
            "ttft": _histogram(rng, old.get("ttft"), LATENCY_BOUNDS, new, 0.3 * latency),
            "itl": _histogram(rng, old.get("itl"), LATENCY_BOUNDS, new * 20, 0.02),
            "tpot": _histogram(rng, old.get("tpot"), LATENCY_BOUNDS, new, 0.025),
            "e2e": _histogram(rng, old.get("e2e"), LATENCY_BOUNDS, new, 8.0 * latency),
            "queue": _histogram(rng, old.get("queue"), LATENCY_BOUNDS, new, 0.05 * latency),
            "prompt_length": _histogram(rng, old.get("prompt_length"), TOKEN_BOUNDS, new, 2000.0),
            "output_length": _histogram(rng, old.get("output_length"), TOKEN_BOUNDS, new, 400.0),
        }
        self.sample = ReplicaSample(
            at=at,
            counters=counters,
            requests_by_reason={"stop": counters["requests"]},
            running=float(rng.randint(10, 30)),
            waiting=float(rng.randint(3, 8)) if queueing else 0.0,
            kv_usage_by_engine={"0": round(rng.uniform(0.3, 0.6), 4)},
            kv_capacity_tokens=220_000.0,
            kv_capacity_tokens_by_engine={"0": 220_000.0},
            histograms=histograms,
            start_time=self.start_time,
        )
        return TargetResult(name, url, "up", self.sample, "", at)


def record_synthetic(
    path: Path,
    seconds: float,
    replicas: int = 4,
    interval: float = 5.0,
    window: float = 60.0,
    incident: Incident | None = None,
    fleet: str = "assistant",
    start: float = T0,
    seed: int = 1,
    keep_views: bool = True,
    plan_path: Path | None = PLAN,
    jitter: float = 0.0,
    carry_on: Recorded | None = None,
    checkpoints: bool = False,
) -> Recorded:
    """Record `seconds` of a synthetic fleet into `path` the way the console records a live one.

    Without a plan (`plan_path=None`) only the replica rules can flag: the incident's flags
    come and go, and nothing holds for the whole recording. `jitter` delays each poll by up to
    that many seconds (a live poll loop is never exact). `carry_on` polls the replicas of an
    earlier recording: a new console run (an empty watcher, no flags) on a fleet that kept serving.
    `checkpoints=True` attaches the state the console's poll feed hands the recorder every CHECKPOINT_POLLS
    polls (stored as replay checkpoints); without it the file is one an older capcon wrote.
    """
    incident = incident if incident is not None else Incident()
    plan = load_plan(plan_path) if plan_path is not None else None
    store = Store.open(path)
    watcher = Watcher(ScrapeName(), window, interval_seconds=interval)
    handle = FleetHandle(fleet, plan, watcher)
    fleet_replicas = carry_on.replicas if carry_on is not None else [SyntheticReplica(i, seed) for i in range(replicas)]
    recorded = Recorded(Path(path), fleet, replicas=fleet_replicas)
    delays = random.Random(seed)
    previous = None
    try:
        for step in range(int(seconds // interval) + 1):
            elapsed = step * interval
            at = start + elapsed + (delays.uniform(0.0, jitter) if jitter else 0.0)
            results = [
                r.scrape(
                    at - 0.05,
                    serving=not (
                        r.index == incident.down_replica and incident.down_from <= elapsed < incident.down_until
                    ),
                    queueing=r.index == incident.queue_replica
                    and incident.queue_from <= elapsed < incident.queue_until,
                )
                for r in fleet_replicas
            ]
            poll = replayed_poll(watcher, results, at - 0.02)  # the watcher's own `now`, a moment before the view's
            plan_clock = handle.plan_time(at)  # what the console records: the plan's own clock
            # As the console's PollFeed builds it: the plan's next half hour goes to the forecast.
            profile = plan_profile(plan, plan_clock) if plan is not None and plan_clock is not None else None
            view = advance(previous, fleet, poll.figures, handle.plan_at(at), at, profile=profile)
            record = poll_record(fleet, poll, previous, view, plan, plan_clock)
            if checkpoints and (step + 1) % CHECKPOINT_POLLS == 0:
                # What the console's poll feed attaches every CHECKPOINT_POLLS polls: its state after this one.
                record = replace(record, state=PollState(view.trends, view.flag_state, watcher.memory()))
            store.write_poll(record)
            previous = view
            recorded.times.append(at)
            if keep_views:
                recorded.views.append(view)
    finally:
        store.close()
    return recorded
