"""The `prometheus` source against a real Prometheus scraping the real vLLM every second.

Both sources look at the same load over the same window: the direct scrape
through the Watcher (two samples, the load between them) and PrometheusSource
evaluated at the second sample's time over the span between the two. They must
agree within the window's tolerance: Prometheus' `rate()` takes the increase
between the first and last scrapes inside the window and extrapolates it to
the window's edges when each is within 1.1 scrape intervals of them, so a
rate can read as the increase over a span up to 2.2 intervals shorter than the
window: high by up to 2.2 / (window - 2.2) (29 % over a 9.8 s window, when the
real vLLM runs the load fast). Quantiles and means are ratios of the same bucket
increases, so they agree more closely still.

Prometheus scrapes the one vLLM three times over: as is, with `vllm:` rewritten
to `vllm_`, and with older vLLM names on top, so the source's name fallbacks are
proven on a real server too.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx
import pytest

from console.live.watcher import Watcher
from console.sources.prometheus import PrometheusSource
from console.sources.scrape import ScrapeSource
from console.targets import targets_from

from .load import MAX_TOKENS, REQUESTS, drive, settled
from .prometheus_harness import ESCAPED_JOB, JOB, LEGACY_JOB, SCRAPE_INTERVAL_SECONDS
from .vllm_harness import NUM_BLOCKS

pytestmark = [pytest.mark.real_prometheus, pytest.mark.timeout(1800)]

SELECTOR = f'job="{JOB}"'
SELECTORS = {JOB: SELECTOR, ESCAPED_JOB: f'job="{ESCAPED_JOB}"', LEGACY_JOB: f'job="{LEGACY_JOB}"'}
COMPARED = (
    "requests_per_second",
    "prompt_tokens_per_second",
    "generation_tokens_per_second",
    "ttft_p50_seconds",
    "ttft_p95_seconds",
    "ttft_p99_seconds",
    "itl_p95_seconds",
    "tpot_p95_seconds",
    "e2e_p95_seconds",
    "queue_p95_seconds",
    "mean_input_tokens",
    "mean_output_tokens",
)


async def scraped_after(source: PrometheusSource, moment: float, tries: int = 150):
    """Figures once Prometheus has scraped the target after `moment` (bounded wait)."""
    figures = None
    for _ in range(tries):
        figures = await source.collect(time.time())
        replica = figures.replicas[0] if figures.replicas else None
        if (
            replica is not None
            and replica.state == "up"
            and replica.data_age_seconds is not None
            and figures.at - replica.data_age_seconds > moment
        ):
            return figures
        await asyncio.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape the target after {moment:.3f}: {figures}")


async def series_names(prometheus_url: str, selector: str) -> list[str]:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(prometheus_url + "/api/v1/query", params={"query": selector})
        response.raise_for_status()
        return sorted(r["metric"].get("__name__", "") for r in response.json()["data"]["result"])


async def stored_peak(prometheus_url: str, query: str) -> float:
    """The largest value of an instant query's answer (0 when it names no series)."""
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(prometheus_url + "/api/v1/query", params={"query": query})
        response.raise_for_status()
        return max((float(r["value"][1]) for r in response.json()["data"]["result"]), default=0.0)


async def all_scraped_after(sources: dict[str, PrometheusSource], moment: float) -> None:
    for source in sources.values():
        await scraped_after(source, moment)


async def test_prometheus_source_agrees_with_direct_scrape(vllm_server, prometheus_server, report):
    url = vllm_server.metrics_url
    live = {
        job: PrometheusSource(prometheus_server.url, selector, window_seconds=5.0, timeout=5.0)
        for job, selector in SELECTORS.items()
    }
    await settled(url)
    await all_scraped_after(live, time.time())

    watcher = Watcher(ScrapeSource(targets_from([url]), timeout=5.0), window_seconds=3600.0, interval_seconds=1.0)
    first = (await watcher.poll()).figures
    await all_scraped_after(live, first.at)  # an idle sample inside Prometheus' window, before the load

    seen: dict[str, list] = {job: [] for job in live}
    stop = asyncio.Event()

    async def prometheus_polls() -> None:
        while not stop.is_set():
            for job, source in live.items():
                seen[job].append(await source.collect(time.time()))
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass

    polls = asyncio.create_task(prometheus_polls())
    try:
        load = await drive(vllm_server.base_url, first=REQUESTS)  # other prompts than the vLLM lane's
    finally:
        stop.set()
        await polls
    await settled(url)
    await all_scraped_after(live, time.time())
    final = (await watcher.poll()).figures
    window = final.at - first.at
    through, top_k = {}, {}
    for job, selector in SELECTORS.items():
        source = PrometheusSource(prometheus_server.url, selector, window_seconds=window, timeout=5.0)
        through[job] = await source.collect(final.at)
        await source.aclose()
        # The top-k view a fleet past the limit gets (overview, fleet aggregates, picks, restricted detail),
        # on the same Prometheus at the same instant: its PromQL must parse and give the very same figures.
        source = PrometheusSource(prometheus_server.url, selector, window_seconds=window, timeout=5.0, detail_all=0)
        source.top_k_view = True
        top_k[job] = await source.collect(final.at)
        assert source.top_k_view and source.last_queries == 8, job
        await source.aclose()
    await watcher.aclose()
    for source in live.values():
        await source.aclose()

    assert not load.failed, [r.error for r in load.failed][:3]
    (direct,) = final.replicas
    # Prometheus' extrapolation to the window's edges (above); the direct scrape's own two samples are exact.
    edges = 2.2 * SCRAPE_INTERVAL_SECONDS
    tolerance = edges / (window - edges) + 0.01
    report("")
    report(f"real Prometheus: window {window:.2f} s, tolerance {tolerance:.3f}")
    report(f"  {'figure':30s} {'scrape':>10s} " + " ".join(f"{job:>14s}" for job in through))
    for name in COMPARED:
        values = [getattr(through[job].replicas[0], name) if through[job].replicas else None for job in through]
        report(
            f"  {name:30s} {getattr(direct, name):10.4f} "
            + " ".join(f"{v:14.4f}" if v is not None else f"{'-':>14s}" for v in values)
        )

    for job, figures in through.items():
        assert figures.source_error == "", job
        (queried,) = figures.replicas
        assert queried.name == direct.name == vllm_server.target
        assert queried.state == direct.state == "up"
        for name in COMPARED:
            d, p = getattr(direct, name), getattr(queried, name)
            assert d is not None and p is not None, (job, name)
            assert abs(p - d) <= tolerance * abs(d), f"{job} {name}: prometheus {p} vs scrape {d}"
        for name in ("ttft_p95_seconds", "requests_per_second", "generation_tokens_per_second"):
            d, p = getattr(final.fleet, name), getattr(figures.fleet, name)
            assert abs(p - d) <= tolerance * abs(d), f"{job} fleet {name}: prometheus {p} vs scrape {d}"
        assert queried.mean_output_tokens == pytest.approx(MAX_TOKENS, rel=tolerance)
        # Gauges now (idle after the load) and the KV capacity from cache_config_info.
        assert queried.running == direct.running == 0
        assert queried.waiting == direct.waiting == 0
        assert queried.kv_usage == direct.kv_usage == 0.0  # found under this job's KV name, not unknown
        assert queried.kv_capacity_tokens == direct.kv_capacity_tokens == NUM_BLOCKS * 128
        assert queried.prefix_hit_share is not None

        # The top-k view: the one replica is picked, so its figures and the fleet's match the full refresh's.
        viewed = top_k[job]
        assert viewed.source_error == "", (job, viewed.source_error)
        (picked_replica,) = viewed.replicas
        for name in (*COMPARED, "running", "waiting", "kv_usage", "kv_capacity_tokens", "prefix_hit_share"):
            a, b = getattr(queried, name), getattr(picked_replica, name)
            assert a == pytest.approx(b, rel=1e-9), f"{job} top-k view {name}: {b} vs {a}"
        for name in (*COMPARED, "running", "waiting", "kv_usage"):
            a, b = getattr(figures.fleet, name), getattr(viewed.fleet, name)
            assert a == pytest.approx(b, rel=1e-9), f"{job} top-k view fleet {name}: {b} vs {a}"
        assert viewed.fleet.requests_per_second_by_reason == pytest.approx(figures.fleet.requests_per_second_by_reason)

    # The rewritten jobs really hold only the other spellings.
    assert await series_names(prometheus_server.url, f'{{job="{ESCAPED_JOB}", __name__=~"vllm:.+"}}') == []
    assert (
        await series_names(
            prometheus_server.url,
            f'{{job="{LEGACY_JOB}", __name__=~"vllm:.+|vllm_kv_cache.+|vllm_inter_token.+|vllm_prefix_cache.+", __name__!~".+_created"}}',
        )
        == []
    )
    for name in (
        "vllm_gpu_cache_usage_perc",
        "vllm_time_per_output_token_seconds_count",
        "vllm_gpu_prefix_cache_hits_total",
    ):
        assert await series_names(prometheus_server.url, f'{name}{{job="{LEGACY_JOB}"}}'), name

    # While the load ran, Prometheus saw the queue and the KV cache fill. A busy vLLM can answer
    # /metrics slower than the 1 s scrape timeout, so some scrapes (even all of one job's) may fail.
    peaks = []
    for job, polled in seen.items():
        answered = [f.replicas[0] for f in polled if f.replicas and f.replicas[0].state == "up"]
        peak_waiting = max((r.waiting or 0.0 for r in answered), default=0.0)
        peak_kv = max((r.kv_usage or 0.0 for r in answered), default=0.0)
        peaks.append((peak_waiting, peak_kv))
        report(
            f"  under load through Prometheus ({job}): {len(answered)}/{len(polled)} polls up, waiting max {peak_waiting:.0f}, KV usage max {peak_kv:.3f}"
        )
    # Prometheus scrapes once a second and vLLM's gauges flicker between steps: a job may catch the queue
    # and miss the full cache, or the other way round, and the console's once-a-second polls read only each
    # moment's last scrape. Every scrape Prometheus stored counts too (max_over_time over the load's span).
    span = f"{int(time.time() - first.at) + 2}s"
    stored = (
        await stored_peak(prometheus_server.url, f"max_over_time(vllm:num_requests_waiting{{{SELECTOR}}}[{span}])"),
        await stored_peak(prometheus_server.url, f"max_over_time(vllm:kv_cache_usage_perc{{{SELECTOR}}}[{span}])"),
    )
    report(f"  stored by Prometheus over the load ({JOB}): waiting max {stored[0]:.0f}, KV usage max {stored[1]:.3f}")
    peaks.append(stored)
    assert any(waiting > 0 for waiting, _ in peaks) and any(kv > 0.5 for _, kv in peaks), peaks


def test_watch_once_json_cli_through_prometheus(vllm_server, prometheus_server):
    """`capcon watch --once --json --source prometheus` end to end against the real Prometheus."""
    done = subprocess.run(
        [
            sys.executable, "-m", "console", "watch", "--once", "--json", "--interval", "1", "--window", "10",
            "--source", "prometheus", "--prometheus", prometheus_server.url, "--selector", SELECTOR,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["source"] == "prometheus" and document["source_error"] is None
    (replica,) = document["replicas"]
    assert replica["name"] == vllm_server.target and replica["state"] == "up"
    assert replica["kv_capacity_tokens"] == NUM_BLOCKS * 128
    assert replica["requests_per_second"] is not None  # a rate over the last 10 s, possibly 0
