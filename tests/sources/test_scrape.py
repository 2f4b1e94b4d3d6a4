"""The scrape source against real loopback servers: every fault becomes that target's state."""

from __future__ import annotations

import asyncio
import gzip
import ssl
import subprocess
import tracemalloc

import pytest
from aiohttp import web
from metrics.pages import V032_SMALL_KV, V08_MODEL_NAME_ONLY, sample_text
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from console.errors import UserError
from console.sources.scrape import ScrapeSource, bearer_token_from_env
from console.targets import Target, metrics_url, targets_from

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
    assert seen["Accept"].startswith("text/plain") and seen["Accept-Encoding"] == "gzip"
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
        await asyncio.sleep(1.5)
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
    assert result.state == "bad_payload" and "cut short" in result.error


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
    text = sample_text(V032_SMALL_KV).replace(
        'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
        'vllm:num_requests_running{engine="0",model_name="tiny"} NaN',
    )
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
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ],
        capture_output=True,
        check=False,
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


def gzipping(text: str):
    """A handler that answers gzipped when the client accepts it, as vLLM's /metrics does."""
    seen = []

    async def handler(request):
        accepted = "gzip" in request.headers.get("Accept-Encoding", "")
        seen.append(accepted)
        if accepted:
            return web.Response(
                body=gzip.compress(text.encode()), headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"}
            )
        return web.Response(text=text)

    return handler, seen


async def test_a_gzipped_page_reads_the_same_as_a_plain_one():
    handler, seen = gzipping(sample_text(V032_SMALL_KV))
    async with serve(handler) as url:
        zipped = await scrape_one(url)
    async with serve(pages_in_turn(sample_text(V032_SMALL_KV))) as url:
        plain = await scrape_one(url)
    assert seen == [True]
    assert zipped.state == "up" and zipped.sample == plain.sample


async def test_a_gzip_bomb_is_cut_at_the_cap_with_bounded_memory():
    bomb = gzip.compress(b"# padding\n" * (3 * 1024 * 1024))  # 30 MB of text in ~30 KB

    async def handler(request):
        return web.Response(body=bomb, headers={"Content-Encoding": "gzip"})

    async with serve(handler) as url:
        tracemalloc.start()
        try:
            result = await scrape_one(url, max_bytes=2 * 1024 * 1024)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert len(bomb) < 2 * 1024 * 1024
    assert result.state == "bad_payload" and "larger than 2 MB" in result.error
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB while refusing a 30 MB page"


@pytest.mark.parametrize(
    "body,encoding,expected",
    [
        (b"\x1f\x8b\x08\x00 not really gzip", "gzip", "corrupt"),
        (gzip.compress(sample_text(V032_SMALL_KV).encode())[:2000], "gzip", "cut short"),
        (b"vllm:num_requests_running 1\n", "br", "unsupported Content-Encoding 'br'"),
    ],
    ids=["corrupt-gzip", "truncated-gzip", "unasked-encoding"],
)
async def test_bad_encodings_are_bad_payloads(body, encoding, expected):
    async def handler(request):
        return web.Response(body=body, headers={"Content-Encoding": encoding})

    async with serve(handler) as url:
        result = await scrape_one(url)
    assert result.state == "bad_payload" and expected in result.error


async def test_redirects_are_not_followed():
    async def moved(request):
        raise web.HTTPFound("/elsewhere")

    async with serve(moved) as url:
        result = await scrape_one(url)
    assert result.state == "down" and result.error == "HTTP 302 Found"


async def test_one_connection_is_kept_alive_across_refreshes():
    peers = []

    async def handler(request):
        peers.append(request.transport.get_extra_info("peername"))
        return web.Response(text=sample_text(V032_SMALL_KV))

    async with serve(handler) as url:
        source = ScrapeSource([Target("t", url + "/metrics")])
        try:
            states = [(await source.fetch(now=float(i)))[0].state for i in range(3)]
        finally:
            await source.aclose()
    assert states == ["up"] * 3 and len(peers) == 3 and len(set(peers)) == 1


async def test_a_kept_alive_connection_the_server_dropped_is_asked_again_on_a_new_one():
    body = sample_text(V032_SMALL_KV).encode()
    answer = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    connections = []

    async def client(reader, writer):
        # Answers one request per connection while keeping it open, then drops it without a word
        # as soon as the next request arrives: the client must retry that GET once, elsewhere.
        connections.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"
    source = ScrapeSource([Target("t", url)], timeout=5)
    try:
        results = [(await source.fetch(now=float(i)))[0] for i in range(3)]
    finally:
        await source.aclose()
        server.close()
        await server.wait_closed()
    assert [r.state for r in results] == ["up"] * 3, [r.error for r in results]
    assert len(connections) == 3


async def test_a_timed_out_target_answers_again_on_the_next_refresh():
    calls = {"count": 0}

    async def slow_once(request):
        calls["count"] += 1
        if calls["count"] == 1:
            await asyncio.sleep(1.5)
        return web.Response(text=sample_text(V032_SMALL_KV))

    async with serve(slow_once) as url:
        source = ScrapeSource([Target("t", url + "/metrics")], timeout=0.3)
        try:
            first = (await source.fetch(now=1.0))[0]
            second = (await source.fetch(now=2.0))[0]
        finally:
            await source.aclose()
    assert first.state == "timeout" and second.state == "up"


async def test_a_url_that_cannot_be_fetched_is_down_not_raised():
    targets = [
        Target("ftp", "ftp://h/metrics"),
        Target("port", "http://h:notaport/metrics"),
        Target("host", "http:///metrics"),
    ]
    source = ScrapeSource(targets)
    try:
        results = await source.fetch(now=1.0)
    finally:
        await source.aclose()
    assert [r.state for r in results] == ["down"] * 3
    assert "http(s)" in results[0].error and "Invalid port" in results[1].error and "http(s)" in results[2].error


async def test_the_environment_proxy_is_used_unless_no_proxy_names_the_host(monkeypatch):
    asked = []

    async def proxy(request):
        asked.append(str(request.url))  # a proxy is sent the absolute URL of the target
        return web.Response(text=sample_text(V032_SMALL_KV))

    unreachable = f"http://127.0.0.1:{closed_port()}/metrics"
    async with serve(proxy) as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        proxied = await scrape_one(unreachable)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        direct = await scrape_one(unreachable)
    assert proxied.state == "up" and asked == [unreachable]
    assert direct.state == "down" and "cannot connect" in direct.error


class _Replay:
    """A prometheus_client collector that exposes the families of a captured vLLM page."""

    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))

    def collect(self):
        return iter(self.families)


async def test_prometheus_clients_own_exporter_gzipped_and_closing_each_connection():
    # vLLM serves /metrics through prometheus_client, which gzips when asked; its stand-alone
    # server also speaks HTTP/1.0 and closes every connection, so each refresh connects anew.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Replay(sample_text(V032_SMALL_KV)))
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        source = ScrapeSource([Target("t", url)], timeout=5)
        try:
            results = [(await source.fetch(now=float(i)))[0] for i in range(2)]
        finally:
            await source.aclose()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    async with serve(pages_in_turn(sample_text(V032_SMALL_KV))) as direct:
        captured = await scrape_one(direct)
    assert [r.state for r in results] == ["up", "up"], [r.error for r in results]
    assert results[1].sample.counters["prompt_tokens"] == 5285.0
    assert results[1].sample.counters == captured.sample.counters


async def test_an_unsupported_environment_proxy_is_that_targets_state(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "socks5://user:secret@127.0.0.1:1080")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    result = await scrape_one(f"http://127.0.0.1:{closed_port()}")
    assert result.state == "down" and "only http(s) proxies" in result.error and "secret" not in result.error


async def test_two_targets_with_one_url_and_two_overlapping_fetches_all_answer():
    async with serve(pages_in_turn(sample_text(V032_SMALL_KV))) as url:
        source = ScrapeSource([Target("a", url + "/metrics"), Target("b", url + "/metrics")])
        try:
            first, second = await asyncio.gather(source.fetch(now=1.0), source.fetch(now=2.0))
        finally:
            await source.aclose()
    assert [r.state for r in first + second] == ["up"] * 4


async def test_a_tls_connection_is_kept_alive_too(self_signed):
    peers = []

    async def handler(request):
        peers.append(request.transport.get_extra_info("peername"))
        return web.Response(text=sample_text(V032_SMALL_KV))

    async with serve(handler, ssl_context=self_signed) as url:
        source = ScrapeSource([Target("t", url + "/metrics")], verify=False)
        try:
            states = [(await source.fetch(now=float(i)))[0].state for i in range(3)]
        finally:
            await source.aclose()
    assert states == ["up"] * 3 and len(set(peers)) == 1
