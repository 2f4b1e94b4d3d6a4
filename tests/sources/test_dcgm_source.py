"""Reading dcgm-exporter pages over real loopback HTTP: bounded in size and time, every failure a page's state."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest
from aiohttp import web

from console.sources.dcgm import DcgmSource

from .servers import serve

pytestmark = pytest.mark.timeout(60)
PAGE = (Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "h100x3_k8s_vllm-tp2.prom").read_text()


def answer(text: str, status: int = 200, **headers: str):
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=text.encode(), headers=headers)

    return handler


async def test_a_page_read_directly_names_its_node_by_its_address():
    async with serve(answer(PAGE)) as base:
        source = DcgmSource([base + "/metrics"])
        try:
            (result,) = await source.fetch()
        finally:
            await source.aclose()
    assert result.error == "" and len(result.gpus) == 3
    assert {g.host for g in result.gpus} == {"127.0.0.1"}
    assert result.gpus[0].sm_active == pytest.approx(0.734102)


async def test_gzip_pages_are_read_and_bombs_are_cut_off():
    bomb = gzip.compress(b"#" * (8 * 1024 * 1024))
    async with serve(answer(PAGE)) as good:

        async def bombing(request: web.Request) -> web.Response:
            return web.Response(body=bomb, headers={"Content-Encoding": "gzip"})

        async with serve(bombing) as bad:
            source = DcgmSource([good + "/metrics", bad + "/metrics"], max_bytes=1024 * 1024)
            try:
                ok, too_big = await source.fetch()
            finally:
                await source.aclose()
    assert ok.gpus and too_big.gpus == () and too_big.error == "page larger than 1 MB; not read"


async def test_failures_are_states_with_secrets_masked():
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.Response(text=PAGE)

    async with serve(answer("oops", status=500)) as failing, serve(slow) as hanging, serve(answer("<html/>")) as other:
        source = DcgmSource(
            [
                failing.replace("http://", "http://admin:hunter2@") + "/metrics",
                hanging + "/metrics",
                other + "/metrics",
                "http://127.0.0.1:1/metrics",
            ],
            timeout=0.5,
        )
        try:
            results = await source.fetch()
        finally:
            await source.aclose()
    assert [r.error for r in results] == [
        "HTTP 500",
        "no complete answer within 0.5 s",
        "no DCGM_FI_ sample in the page; expected dcgm-exporter's /metrics (Prometheus text)",
        "cannot connect",
    ]
    assert all(r.gpus == () for r in results)
    assert "hunter2" not in results[0].url
