"""The console against a real vLLM: what a streaming client saw and what vLLM's own buckets say.

One known load (40 streamed requests, 8 in flight, exactly 300 output tokens
each) runs between two polls of the same Watcher that `capcon watch` drives.
The console must count every request and token, give the client's rates within
2 %, and give the p95 TTFT that `histogram_quantile` yields on vLLM's own
buckets scraped just before and just after the load (computed here
independently of the project's parser). With vLLM's small KV cache the console
must also see a queue and a nearly full cache while the load runs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from console.commands.watch_output import once_json
from console.live.watcher import Poll, RecordedSource, Watcher
from console.sources.scrape import ScrapeSource
from console.store.database import Store
from console.store.records import PollRecord
from console.targets import targets_from

from . import raw_metrics
from .load import CONCURRENCY, MAX_TOKENS, REQUESTS, Peaks, drive, settled, watch_peaks
from .vllm_harness import MAX_NUM_SEQS, NUM_BLOCKS

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]

TTFT = "vllm:time_to_first_token_seconds"


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


async def poll_until_finished(watcher: Watcher, first, requests: int, tries: int = 100):
    """The console's first poll that counts every request of the load.

    vLLM records a request's stats just after its last token goes out, so the
    poll right after the client finished may be a few milliseconds early. Polling
    again at once keeps the console's window as close as possible to the load.
    """
    for _ in range(tries):
        poll = await watcher.poll()
        figures = poll.figures
        replica = figures.replicas[0]
        if (
            replica.requests_per_second is not None
            and round(replica.requests_per_second * (figures.at - first.at)) >= requests
        ):
            return poll
        await asyncio.sleep(0.02)
    raise AssertionError(f"the console never counted {requests} finished requests: {replica}")


async def test_console_counts_rates_and_ttft_match_client_and_vllm_buckets(vllm_server, report, tmp_path):
    url = vllm_server.metrics_url
    before = await settled(url)
    watcher = Watcher(ScrapeSource(targets_from([url]), timeout=5.0), window_seconds=3600.0, interval_seconds=1.0)
    # The measuring polls also go into a real history file, as `capcon watch` records them.
    store = Store.open(tmp_path / "history.sqlite")

    def record(poll: Poll) -> int:
        at = poll.watched_at
        return store.write_poll(PollRecord("vllm", at, at, "scrape", poll.window_seconds, 1.0, poll.results))

    first_poll = await watcher.poll()
    first = first_poll.figures
    assert first.replicas[0].state == "up", first.replicas[0].error
    first_id = record(first_poll)

    raw_peaks = Peaks()
    during: list = []
    stop = asyncio.Event()

    # A second console watches during the load, so the measuring one polls only before and after.
    observer = Watcher(ScrapeSource(targets_from([url]), timeout=5.0), window_seconds=10.0, interval_seconds=0.25)

    async def console_polls() -> None:
        # Stopped between polls, never cancelled inside one.
        while not stop.is_set():
            during.append((await observer.poll()).figures)
            try:
                await asyncio.wait_for(stop.wait(), 0.25)
            except TimeoutError:
                pass

    peaks = asyncio.create_task(watch_peaks(url, raw_peaks))
    polls = asyncio.create_task(console_polls())
    try:
        load = await drive(vllm_server.base_url)
    finally:
        stop.set()
        peaks.cancel()
    final_poll = await poll_until_finished(watcher, first, REQUESTS)
    final = final_poll.figures
    final_id = record(final_poll)
    await asyncio.gather(peaks, polls, return_exceptions=True)
    after = await settled(url)
    await watcher.aclose()
    await observer.aclose()

    assert not load.failed, [r.error for r in load.failed][:3]
    assert len(load.succeeded) == REQUESTS
    client_prompt, client_output = load.total("prompt_tokens"), load.total("output_tokens")
    assert client_output == REQUESTS * MAX_TOKENS  # ignore_eos: every request ran to max_tokens

    replica = final.replicas[0]
    document = once_json(final)  # what `capcon watch --once --json` prints for these figures
    assert json.loads(json.dumps(document))["replicas"][0]["ttft_p95_seconds"] == replica.ttft_p95_seconds
    elapsed = final.at - first.at

    # Counts: exact.
    assert replica.requests_per_second * elapsed == pytest.approx(REQUESTS, rel=1e-9)
    assert replica.requests_per_second_by_reason["length"] * elapsed == pytest.approx(REQUESTS, rel=1e-9)
    assert replica.prompt_tokens_per_second * elapsed == pytest.approx(client_prompt, rel=1e-9)
    assert replica.generation_tokens_per_second * elapsed == pytest.approx(client_output, rel=1e-9)
    assert replica.mean_output_tokens == pytest.approx(MAX_TOKENS, rel=1e-9)
    assert replica.mean_input_tokens == pytest.approx(client_prompt / REQUESTS, rel=1e-9)
    assert document["fleet"]["requests_per_second"] == pytest.approx(replica.requests_per_second, rel=1e-12)

    # Rates: within 2 % of what the client measured over its own run.
    client_rps = REQUESTS / load.wall_seconds
    client_tps = client_output / load.wall_seconds
    assert relative(replica.requests_per_second, client_rps) <= 0.02
    assert relative(replica.generation_tokens_per_second, client_tps) <= 0.02

    # p95 TTFT: the console equals histogram_quantile on vLLM's own bucket deltas.
    delta = raw_metrics.bucket_delta(raw_metrics.buckets(before, TTFT), raw_metrics.buckets(after, TTFT))
    assert delta[float("inf")] == REQUESTS
    independent = {q: raw_metrics.quantile(q, delta) for q in (0.5, 0.95, 0.99)}
    assert relative(replica.ttft_p95_seconds, independent[0.95]) <= 0.01
    assert relative(final.fleet.ttft_p95_seconds, independent[0.95]) <= 0.01
    assert relative(replica.ttft_p50_seconds, independent[0.5]) <= 0.01
    assert relative(replica.ttft_p99_seconds, independent[0.99]) <= 0.01
    client_p95 = load.quantile("ttft_seconds", 0.95)

    # The history: the stored buckets of the two polls give the very figures the console showed.
    reader = Store.open(tmp_path / "history.sqlite", read_only=True)
    replayer = Watcher(RecordedSource("scrape"), window_seconds=3600.0, interval_seconds=1.0)
    for poll_id in (first_id, final_id):
        stored = reader.poll(poll_id)
        replayed = replayer.replay(stored.results, stored.watched_at)
    assert replayed == final
    assert relative(replayed.replicas[0].ttft_p95_seconds, independent[0.95]) <= 0.01

    # Queueing and KV pressure under load, as vLLM reported them and as the console showed them.
    console_waiting = max((f.replicas[0].waiting or 0.0) for f in during)
    console_kv = max((f.replicas[0].kv_usage or 0.0) for f in during)
    console_running = max((f.replicas[0].running or 0.0) for f in during)
    # vLLM's gauges flicker between engine steps (a mid-load read can say 0 waiting), and /metrics answers slowly
    # under load (a handful of reads), so both samplers may miss every moment with a request waiting; the queue
    # itself is certain from vLLM's queue-time histogram. What a sampler cannot miss is saturation: every slot
    # busy (running at --max-num-seqs) or a request waiting.
    report(
        f"  under load: raw waiting max {raw_peaks.waiting:.0f}, KV max {raw_peaks.kv_usage:.3f} ({raw_peaks.polls} reads); "
        f"console waiting max {console_waiting:.0f}, running max {console_running:.0f}, KV max {console_kv:.3f} ({len(during)} polls)"
    )
    assert replica.queue_p95_seconds is not None and replica.queue_p95_seconds > 0
    assert max(raw_peaks.waiting, console_waiting) > 0 or max(raw_peaks.running, console_running) >= MAX_NUM_SEQS
    assert console_running >= 1, "the console saw requests running under load"
    usable = (NUM_BLOCKS - 1) / NUM_BLOCKS  # vLLM keeps one block aside
    assert max(raw_peaks.kv_usage, console_kv) >= 0.75 * usable
    assert replica.kv_capacity_tokens == NUM_BLOCKS * 128  # cache_config_info: 16 blocks of 128 tokens

    report("")
    report(
        f"real vLLM: {REQUESTS} requests, {CONCURRENCY} in flight, {MAX_TOKENS} output tokens each, client wall {load.wall_seconds:.2f} s"
    )
    report(
        f"  counts  console/client: requests {replica.requests_per_second * elapsed:.0f}/{REQUESTS}, prompt tokens {replica.prompt_tokens_per_second * elapsed:.0f}/{client_prompt}, output tokens {replica.generation_tokens_per_second * elapsed:.0f}/{client_output}"
    )
    report(
        f"  rates   console {replica.requests_per_second:.3f} req/s, {replica.generation_tokens_per_second:.1f} out tok/s; client {client_rps:.3f} req/s, {client_tps:.1f} out tok/s"
    )
    report(
        f"  p95 TTFT  console {replica.ttft_p95_seconds:.4f} s, independent histogram_quantile {independent[0.95]:.4f} s, client-measured {client_p95:.4f} s"
    )
    report(
        f"  p50 TTFT  console {replica.ttft_p50_seconds:.4f} s, client-measured {load.quantile('ttft_seconds', 0.5):.4f} s; p95 e2e console {replica.e2e_p95_seconds:.3f} s, client {load.quantile('e2e_seconds', 0.95):.3f} s"
    )
    report(
        f"  under load: waiting max {raw_peaks.waiting:.0f} (console {console_waiting:.0f}), KV usage max {raw_peaks.kv_usage:.3f} (console {console_kv:.3f}), running max {raw_peaks.running:.0f}"
    )


def test_watch_once_json_cli_reads_the_real_server(vllm_server):
    """`capcon watch --once --json` end to end against the real server."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "console",
            "watch",
            "--once",
            "--json",
            "--interval",
            "1",
            "--target",
            vllm_server.base_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["source"] == "scrape"
    (replica,) = document["replicas"]
    assert replica["state"] == "up"
    assert replica["name"] == vllm_server.target
    assert replica["kv_capacity_tokens"] == NUM_BLOCKS * 128
    assert replica["kv_usage"] is not None and 0.0 <= replica["kv_usage"] <= 1.0
    assert replica["requests_per_second"] is not None  # both samples present: a rate, possibly 0


async def test_light_load_ttft_on_the_client_clock_and_on_vllm_clock(vllm_server, report):
    """No queueing (2 in flight, 4 slots): the gap between the two clocks is the front end's share."""
    url = vllm_server.metrics_url
    before = await settled(url)
    watcher = Watcher(ScrapeSource(targets_from([url]), timeout=5.0), window_seconds=3600.0, interval_seconds=1.0)
    first = (await watcher.poll()).figures
    load = await drive(vllm_server.base_url, requests=12, concurrency=2, max_tokens=32, first=3 * REQUESTS)
    final = (await poll_until_finished(watcher, first, 12)).figures
    after = await settled(url)
    await watcher.aclose()

    assert not load.failed, [r.error for r in load.failed][:3]
    replica = final.replicas[0]
    assert replica.generation_tokens_per_second * (final.at - first.at) == pytest.approx(12 * 32, rel=1e-9)
    delta = raw_metrics.bucket_delta(raw_metrics.buckets(before, TTFT), raw_metrics.buckets(after, TTFT))
    independent = raw_metrics.quantile(0.95, delta)
    assert relative(replica.ttft_p95_seconds, independent) <= 0.01
    assert replica.waiting == 0
    report("")
    report(
        f"light load (12 requests, 2 in flight, 32 tokens): p95 TTFT console {replica.ttft_p95_seconds:.4f} s, "
        f"independent histogram_quantile {independent:.4f} s, client-measured {load.quantile('ttft_seconds', 0.95):.4f} s; "
        f"p50 console {replica.ttft_p50_seconds:.4f} s, client {load.quantile('ttft_seconds', 0.5):.4f} s"
    )
