"""CPU seconds per refresh of the scrape source for a fleet of loopback targets.

    python benchmarks/bench_scrape.py [PAGE] [--targets 256] [--refreshes 10] [--plain]

A child process serves PAGE (default: the project's real vLLM 0.32 capture) on TARGETS
loopback ports, gzipped when the client accepts it, as vLLM's /metrics does
(`--plain`: always uncompressed). This process then refreshes the whole fleet
with capcon's ScrapeSource and measures its own CPU time per refresh (the
server's CPU is not counted). The baseline, measured in the same run, is the
same refresh with the same HTTP fetch but pages read by prometheus_client's
parser. Last line: `cpu_seconds_per_refresh: N`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_PAGE = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm" / "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"
)


async def serve(page: Path, count: int, plain: bool) -> None:
    from aiohttp import web

    body = page.read_bytes()  # noqa: ASYNC240 - once, before the server starts serving
    gzipped = gzip.compress(body)  # once: vLLM compresses each answer, but that is server CPU, not ours

    async def metrics(request):
        if not plain and "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=gzipped, content_type="text/plain", headers={"Content-Encoding": "gzip"})
        return web.Response(body=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ports = []
    for _ in range(count):
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports.append(site._server.sockets[0].getsockname()[1])
    print(" ".join(map(str, ports)), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    await runner.cleanup()


async def measure(ports: list[int], refreshes: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    from console.sources.scrape import ScrapeSource
    from console.targets import Target

    targets = [Target(f"r{port}", f"http://127.0.0.1:{port}/metrics") for port in ports]
    source = ScrapeSource(targets, timeout=30)

    async def capcon_refresh():
        results = await source.fetch(time.time())
        bad = [r for r in results if r.state != "up"]
        if bad:
            raise SystemExit(f"{len(bad)} targets not up, e.g. {bad[0].state}: {bad[0].error}")

    # The baseline fetches through the very same connections and retry; only the parser differs.
    async def baseline_refresh():
        async def one(route):
            text = (await source._get(route)).decode("utf-8", errors="replace")
            return [s for family in text_string_to_metric_families(text) for s in family.samples]

        await asyncio.gather(*(one(route) for route in source._routes))

    async def fetch_only_refresh():
        await asyncio.gather(*(source._get(route) for route in source._routes))

    async def cpu_per_refresh(refresh) -> float:
        await refresh()  # warm: connections open, series cached
        samples = []
        for _ in range(refreshes):
            start = time.process_time()
            await refresh()
            samples.append(time.process_time() - start)
        return statistics.median(samples)

    try:
        return {
            "capcon": await cpu_per_refresh(capcon_refresh),
            "baseline": await cpu_per_refresh(baseline_refresh),
            "fetch_only": await cpu_per_refresh(fetch_only_refresh),
        }
    finally:
        await source.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", nargs="?", default=str(DEFAULT_PAGE), help="a /metrics page to serve")
    parser.add_argument("--targets", type=int, default=256)
    parser.add_argument("--refreshes", type=int, default=10)
    parser.add_argument("--plain", action="store_true", help="serve the page uncompressed even when gzip is accepted")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    page = Path(args.page)
    if args.serve:
        asyncio.run(serve(page, args.targets, args.plain))
        return 0
    if not page.is_file():
        print(f"page not found: {page}", file=sys.stderr)
        return 2
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            str(page),
            "--targets",
            str(args.targets),
            "--serve",
            *(["--plain"] if args.plain else []),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ports = [int(p) for p in server.stdout.readline().split()]
        figures = asyncio.run(measure(ports, args.refreshes))
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    size = page.stat().st_size
    wire = "uncompressed" if args.plain else "gzipped"
    print(
        f"{args.targets} loopback targets, {size} bytes each ({wire}), median of {args.refreshes} refreshes (client CPU only)"
    )
    print(f"fetch only (HTTP and decompression, no parsing): {figures['fetch_only']:.3f} s per refresh")
    print(f"baseline (same fetch + prometheus_client parser): {figures['baseline']:.3f} s per refresh")
    print(f"capcon scrape source (fetch + parse + normalise): {figures['capcon']:.3f} s per refresh")
    print(f"ratio_vs_baseline: {figures['capcon'] / figures['baseline']:.2f}")
    print(f"cpu_seconds_per_refresh: {figures['capcon']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
