"""The scrape source against real loopback servers: every fault becomes that target's state."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import tracemalloc

import pytest
from aiohttp import web

from console.errors import UserError
from console.sources.base import Target, metrics_url, targets_from
from console.sources.scrape import ScrapeSource, bearer_token_from_env

from metrics.pages import V032_SMALL_KV, V08_MODEL_NAME_ONLY, sample_text
from .servers import closed_port, pages_in_turn, raw_server, serve


async def scrape_one(url: str, **options):
    source = ScrapeSource([Target("t", url + ("/metrics" if url.count("/") == 2 else ""))], **options)
    try:
        [result] = await source.fetch(now=1000.0)
    finally:
        await source.aclose()
    return result


async def test_a_real_page_is_up_with_its_sample():
    async with serve(pages_in_turn(sample_text(V032_SMALL_KV))) as url:
        result = await scrape_one(url)
    assert result.state == "up" and result.error == ""
    assert result.sample.counters["prompt_tokens"] == 5285.0 and result.sample.at == 1000.0


async def test_sends_accept_text_plain_and_the_bearer_token():
    seen = {}

    async def handler(request):
        seen.update(request.headers)
        if request.headers.get("Authorization") != "Bearer s3cret":
            return web.Response(status=401, text="no")
        return web.Response(text=sample_text(V032_SMALL_KV))

    async with serve(handler) as url:
        denied = await scrape_one(url)
        allowed = await scrape_one(url, token="s3cret")
    assert seen["Accept"].startswith("text/plain")
    assert denied.state == "down" and "HTTP 401" in denied.error
    assert allowed.state == "up"


def test_token_from_an_unset_variable_is_a_user_error(monkeypatch):
    monkeypatch.delenv("CAPCON_TEST_TOKEN", raising=False)
    with pytest.raises(UserError, match="CAPCON_TEST_TOKEN"):
        bearer_token_from_env("CAPCON_TEST_TOKEN")
    monkeypatch.setenv("CAPCON_TEST_TOKEN", " abc \n")
    assert bearer_token_from_env("CAPCON_TEST_TOKEN") == "abc"


async def test_refused():
    result = await scrape_one(f"http://127.0.0.1:{closed_port()}")
    assert result.state == "down" and "cannot connect" in result.error and result.sample is None


async def test_a_target_that_goes_down():
    async with serve(pages_in_turn(sample_text(V032_SMALL_KV))) as url:
        assert (await scrape_one(url)).state == "up"
    result = await scrape_one(url)
    assert result.state == "down"


async def test_slow_past_the_timeout():
    async def slow(request):
        await asyncio.sleep(5)
        return web.Response(text="vllm:num_requests_running 1\n")

    async with serve(slow) as url:
        result = await scrape_one(url, timeout=0.3)
    assert result.state == "timeout" and "0.3 s" in result.error


async def test_a_page_that_trickles_in_past_the_deadline():
    async def trickle(request):
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(50):
            await response.write(b"# still coming\n")
            await asyncio.sleep(0.05)
        return response

    async with serve(trickle) as url:
        result = await scrape_one(url, timeout=0.5)
    assert result.state == "timeout"


async def test_http_500():
    async def broken(request):
        return web.Response(status=500, text="engine dead")

    async with serve(broken) as url:
        result = await scrape_one(url)
    assert result.state == "down" and "HTTP 500" in result.error


async def test_truncated_page_shorter_than_its_content_length():
    body = sample_text(V032_SMALL_KV).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    async with raw_server(head + body[: len(body) // 2]) as url:
        result = await scrape_one(url)
    assert result.state == "bad_payload" and "cut short" in result.error


async def test_truncated_page_ending_mid_line():
    text = sample_text(V032_SMALL_KV)
    cut = text[: text.index('vllm:request_success_total{engine="0",finished_reason="length"') + 30]
    async with serve(pages_in_turn(cut)) as url:
        result = await scrape_one(url)
    assert result.state == "bad_payload" and "unreadable" in result.error


@pytest.mark.parametrize(
    "body",
    [b"\x00\xff\xfe garbage \x89PNG\r\n", b"<html><body>Login required</body></html>", b""],
    ids=["binary", "html", "empty"],
)
async def test_garbage(body):
    async def handler(request):
        return web.Response(body=body, content_type="text/plain")

    async with serve(handler) as url:
        result = await scrape_one(url)
    assert result.state == "bad_payload" and result.sample is None


async def test_a_20_mb_page_is_refused_with_bounded_memory():
    line = b'vllm:num_requests_running{engine="0",model_name="m",pad="' + b"x" * 900 + b'"} 1\n'
    chunk = line * 64  # ~60 KB

    async def huge(request):
        response = web.StreamResponse()  # chunked: no length announced, so it must be cut while reading
        await response.prepare(request)
        for _ in range(20 * 1024 * 1024 // len(chunk) + 1):
            await response.write(chunk)
        return response

    async with serve(huge) as url:
        tracemalloc.start()
        try:
            result = await scrape_one(url, max_bytes=4 * 1024 * 1024, timeout=30)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.state == "bad_payload" and "larger than 4 MB" in result.error
    assert peak < 12 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB while refusing a 20 MB page"


async def test_an_announced_oversized_page_is_not_read():
    async def announced(request):
        return web.Response(body=b"vllm:a 1\n" * (1024 * 1024 // 9 + 1))

    async with serve(announced) as url:
        result = await scrape_one(url, max_bytes=512 * 1024)
    assert result.state == "bad_payload"


async def test_nan_gauges_read_as_unknown():
    text = sample_text(V032_SMALL_KV).replace('vllm:num_requests_running{engine="0",model_name="tiny"} 0.0', 'vllm:num_requests_running{engine="0",model_name="tiny"} NaN')
    async with serve(pages_in_turn(text)) as url:
        result = await scrape_one(url)
    assert result.state == "up" and result.sample.running is None and result.sample.waiting == 0.0


async def test_duplicate_series_are_a_warning_not_a_failure():
    line = 'vllm:prompt_tokens_total{engine="0",model_name="tiny"} 5285.0\n'
    text = sample_text(V032_SMALL_KV).replace(line, line + line.replace("5285.0", "1.0"))
    async with serve(pages_in_turn(text)) as url:
        result = await scrape_one(url)
    assert result.state == "up" and "1 duplicate" in result.error
    assert result.sample.counters["prompt_tokens"] == 5285.0


async def test_renamed_metrics_of_an_old_server():
    async with serve(pages_in_turn(sample_text(V08_MODEL_NAME_ONLY))) as url:
        result = await scrape_one(url)
    assert result.state == "up" and dict(result.sample.kv_usage_by_engine) == {"0": 0.0}
    assert result.sample.wire_names["kv_usage"] == "vllm:gpu_cache_usage_perc"


async def test_all_targets_are_scraped_concurrently_and_failures_stay_per_target():
    in_flight = {"now": 0, "max": 0}

    async def handler(request):
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        await asyncio.sleep(0.3)
        in_flight["now"] -= 1
        return web.Response(text=sample_text(V032_SMALL_KV))

    async with serve(handler) as url:
        targets = [Target(f"r{i}", f"{url}/metrics?replica={i}") for i in range(6)]
        targets.append(Target("gone", f"http://127.0.0.1:{closed_port()}/metrics"))
        source = ScrapeSource(targets, timeout=5)
        try:
            results = await source.fetch(now=1.0)
        finally:
            await source.aclose()
    assert in_flight["max"] == 6
    assert [r.state for r in results] == ["up"] * 6 + ["down"]


@pytest.fixture
def self_signed(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl could not make a test certificate: {made.stderr.decode()[:200]}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def test_tls_is_verified_unless_told_otherwise(self_signed):
    async with serve(pages_in_turn(sample_text(V032_SMALL_KV)), ssl_context=self_signed) as url:
        verified = await scrape_one(url)
        insecure = await scrape_one(url, verify=False)
    assert verified.state == "down" and "CERTIFICATE" in verified.error.upper()
    assert insecure.state == "up"


@pytest.mark.parametrize(
    "given,expected",
    [
        ("10.0.0.5:8000", "http://10.0.0.5:8000/metrics"),
        ("http://h:8000/", "http://h:8000/metrics"),
        ("https://h/vllm/metrics", "https://h/vllm/metrics"),
    ],
)
def test_metrics_url(given, expected):
    assert metrics_url(given) == expected


def test_targets_are_named_by_host_and_deduplicated():
    targets = targets_from(["h1:8000", "http://h1:8000/metrics", "h2:8000"])
    assert [t.name for t in targets] == ["h1:8000", "h2:8000"]


async def test_a_server_that_hangs_up_without_answering_is_down():
    async with raw_server(b"") as url:
        result = await scrape_one(url)
    assert result.state == "down" and "without an answer" in result.error
