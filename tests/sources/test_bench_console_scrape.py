"""benchmarks/bench_console_scrape.py's targets: the real page on each port, gzipped when asked, GETs counted per
client, so refreshes are counted from what the monitors really asked; and the scrape source reads them whole."""

from __future__ import annotations

import asyncio
import gzip
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_console_scrape as bench  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_the_targets_serve_the_real_page_and_count_each_clients_gets():
    targets = bench.Targets(bench.DEFAULT_PAGE, 3)
    try:
        page = bench.DEFAULT_PAGE.read_bytes()
        plain = urllib.request.Request(f"http://127.0.0.1:{targets.ports[0]}/metrics", headers={"User-Agent": "peer/1"})
        with urllib.request.urlopen(plain, timeout=10) as answer:
            assert answer.read() == page
        zipped = urllib.request.Request(
            f"http://127.0.0.1:{targets.ports[1]}/metrics", headers={"User-Agent": "peer/1", "Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(zipped, timeout=10) as answer:
            assert answer.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(answer.read()) == page
        assert targets.gets("peer") == 2

        from console.sources.scrape import ScrapeSource
        from console.targets import Target

        async def scrape():
            source = ScrapeSource([Target(f"r{p}", f"http://127.0.0.1:{p}/metrics") for p in targets.ports])
            try:
                return await source.fetch(time.time())
            finally:
                await source.aclose()

        results = asyncio.run(scrape())
        assert [r.state for r in results] == ["up"] * 3
        assert targets.gets("capcon") == 3  # one GET per target per refresh: refreshes = GETs / targets
    finally:
        targets.close()
    assert targets.process.returncode is not None
