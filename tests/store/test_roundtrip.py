"""A simulated fleet, scraped and watched live, recorded to a real file and replayed: the same figures, exactly.

Two live watchers run side by side on their own scrape sources: a 1-second window
(older samples leave the ring as the polls go on) and a 60-second window (every
figure spans back to the first poll, so it can be recomputed by hand from the two
stored samples).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from console.fleet.plan_now import plan_now
from console.fleet.view import advance
from console.live.feed import poll_record
from console.live.watcher import RecordedSource, Watcher
from console.metrics.window import fleet_figures, replica_figures
from console.plan.schema import load_plan
from console.sim.fleet import SimFleet
from console.sources.scrape import ScrapeSource
from console.store.database import Store
from console.targets import targets_from
from tests.metrics.pages import REPO

pytestmark = pytest.mark.timeout(120)

POLLS = 16
INTERVAL = 0.25
PERCENTILES = (
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "ttft_p99_seconds",
    "itl_p95_seconds",
    "tpot_p95_seconds",
    "e2e_p95_seconds",
    "queue_p95_seconds",
)
RATES = ("requests_per_second", "prompt_tokens_per_second", "generation_tokens_per_second", "preemptions_per_second")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """Record POLLS polls of two live watchers; returns (path, plan, {fleet: [(figures, view)]})."""
    path = tmp_path_factory.mktemp("roundtrip") / "history.sqlite"
    plan = load_plan(REPO / "plans" / "internal-assistant-18rps.yaml")

    async def run():
        live = {"short": [], "long": []}
        # Monday 10:00, the plan's peak: 18 rps of short answers, so every window has finished requests.
        async with SimFleet(plan, replicas=3, seed=7, speed=60.0, rps_scale=1.0, start_week_seconds=10 * 3600) as sim:
            watchers = {
                name: Watcher(
                    ScrapeSource(targets_from(sim.metrics_urls), timeout=5.0),
                    window_seconds=window,
                    interval_seconds=INTERVAL,
                )
                for name, window in (("short", 1.0), ("long", 60.0))
            }
            store = Store.open(path)
            previous = dict.fromkeys(watchers)
            try:
                await asyncio.sleep(1.0)  # let the first requests finish
                for _ in range(POLLS):
                    for name, watcher in watchers.items():
                        poll = await watcher.poll()
                        figures = poll.figures
                        now = time.time()
                        view = advance(previous[name], name, figures, plan_now(plan, now), now)
                        store.write_poll(poll_record(name, poll, previous[name], view, plan, plan_clock=now))
                        live[name].append((figures, view))
                        previous[name] = view
                    await asyncio.sleep(INTERVAL)
            finally:
                store.close()
                for watcher in watchers.values():
                    await watcher.aclose()
        return live

    return path, plan, asyncio.run(run())


def test_the_live_run_measured_something(recording):
    _, _, live = recording
    for name in ("short", "long"):
        last = live[name][-1][0]
        assert len(last.replicas) == 3 and all(r.state == "up" for r in last.replicas)
        assert (
            last.fleet.requests_per_second > 0
            and last.fleet.ttft_p95_seconds is not None
            and last.fleet.kv_usage is not None
        )
    spans = {figures.fleet.ttft_p95_seconds for figures, _ in live["short"]}
    assert len(spans) > 2, "a 1-second window moves: its percentiles change from poll to poll"


@pytest.mark.parametrize("fleet", ["short", "long"])
def test_replaying_the_file_gives_the_live_figures_and_views_exactly(recording, fleet):
    path, plan, live = recording
    store = Store.open(path, read_only=True)
    polls = [store.poll(poll_id) for poll_id, _ in store.poll_times(fleet)]
    assert len(polls) == POLLS
    watcher = Watcher(
        RecordedSource(polls[0].source), polls[0].window_seconds, interval_seconds=polls[0].interval_seconds
    )
    previous = None
    for poll, (figures, view) in zip(polls, live[fleet]):
        replayed = watcher.replay(poll.results, poll.watched_at)
        assert replayed == figures  # every percentile, rate, mean, KV figure, state and age
        stored_plan = store.plan_version(poll.plan_id)
        assert stored_plan.text == plan.source_text
        replayed_view = advance(previous, poll.fleet, replayed, plan_now(plan, poll.plan_clock), poll.at)
        assert replayed_view.flags == view.flags and replayed_view == view
        previous = replayed_view


def test_a_window_recomputed_from_two_stored_samples_gives_the_percentiles_the_live_view_showed(recording):
    path, _, live = recording
    store = Store.open(path, read_only=True)
    polls = [store.poll(poll_id) for poll_id, _ in store.poll_times("long")]
    first = polls[0]
    checked = 0
    for poll, (shown, _) in list(zip(polls, live["long"]))[1:]:
        replicas, windows = [], []
        for older, newer, seen in zip(first.results, poll.results, shown.replicas):
            # Decoded straight from the stored buckets: no watcher, no ring.
            figures = replica_figures(older.sample, newer.sample, newer.name, newer.url, now=poll.watched_at)
            for field in PERCENTILES + RATES + ("kv_usage", "mean_input_tokens", "mean_output_tokens"):
                assert getattr(figures, field) == getattr(seen, field), (newer.name, field)
            replicas.append(figures)
            windows.append((older.sample, newer.sample))
        fleet = fleet_figures(windows, replicas, now=poll.watched_at)
        for field in PERCENTILES + RATES + ("kv_usage",):
            assert getattr(fleet, field) == getattr(shown.fleet, field), field
        checked += shown.fleet.ttft_p95_seconds is not None
    assert checked >= POLLS // 2, "most compared windows held finished requests"
