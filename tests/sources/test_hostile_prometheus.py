"""A Prometheus (or a proxy in front of it) that answers anything: never a crash, never unbounded.

* Valid JSON of the wrong shape is the source's error state, one line in `watch --once`, exit 1;
  NaN and infinities are unknown, never a number. Proven as properties, on answers built
  directly and on answers served by a real loopback server.
* A gzip bomb is refused at the size cap with the process's memory bounded (measured in a
  subprocess, from /proc/self/status), and a slow drip is given up at the deadline: the server
  sees its connection closed long before it has sent its answer.
* What the server says (an HTTP reason phrase, Prometheus' error text, `instance` labels) reaches
  the terminal with its control characters shown as escapes; JSON keeps the real text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import threading
import zlib
from dataclasses import fields

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metrics.pages import REPO

from console.metrics.figures import Figures, FleetFigures
from console.sources import promql
from console.sources.prometheus import AnswerError, PrometheusSource, _Abandoned, figures_from_answers

NOW = 1_800_000_000.0
PURPOSES = tuple(promql.refresh_queries("", 10))
BY_QUERY = {query: purpose for purpose, query in promql.refresh_queries("", 10).items()}
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


def vector(result) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def row(figure: str, value, **labels) -> dict:
    return {"metric": {promql.FIGURE_LABEL: figure, **labels}, "value": [NOW, value]}


def numbers_are_finite_or_unknown(figures: FleetFigures) -> None:
    for replica in (*figures.replicas, figures.fleet):
        for f in fields(Figures):
            value = getattr(replica, f.name)
            if isinstance(value, float):
                assert math.isfinite(value), (replica.name, f.name, value)
            elif isinstance(value, dict):
                assert all(isinstance(v, float) and math.isfinite(v) for v in value.values()), (
                    replica.name,
                    f.name,
                    value,
                )
    json.dumps(figures.to_json(), allow_nan=False)


# --- the shape of an answer ------------------------------------------------------------------


WRONG_SHAPES = {
    "result a string": "vector",
    "result a list of numbers": [1, 2, 3],
    "metric a string": [{"metric": "up", "value": [NOW, "1"]}],
    "instance an object": [row("up", "1", instance={"host": "a"})],
    "instance a number": [row("up", "1", instance=8000)],
    "value not a pair": [{"metric": {promql.FIGURE_LABEL: "up", "instance": "a"}, "value": "1"}],
    "value a number": [row("up", 1.0, instance="a")],
    "value a pair of strings": [{"metric": {"instance": "a"}, "value": ["now", "1"]}],
    "a non-numeric string": [row("up", "one", instance="a")],
    "a row that is a list": [["up", 1]],
    "no metric": [{"value": [NOW, "1"]}],
}


@pytest.mark.parametrize("result", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_a_result_of_the_wrong_shape_is_an_answer_error(result):
    answers = {purpose: [] for purpose in PURPOSES}
    answers["up"] = result
    with pytest.raises(AnswerError) as error:
        figures_from_answers(answers, 60.0, NOW)
    assert str(error.value).startswith("answer to the up query") and "\n" not in str(error.value)


@pytest.mark.parametrize("text", ["NaN", "+Inf", "-Inf", "nan", "inf"])
def test_non_finite_values_are_unknown_never_a_number(text):
    answers = {purpose: [] for purpose in PURPOSES}
    answers["up"] = [row("up", "1", instance="a"), row("scraped_at", str(NOW - 1), instance="a")]
    answers["rates"] = [
        row("requests", text, instance="a"),
        row("prompt_length_sum", text, instance="a"),
        row("prompt_length_count", "2", instance="a"),
    ]
    answers["gauges"] = [row("waiting", text, instance="a"), row("kv_usage", text, instance="a", engine="0")]
    answers["quantiles"] = [row("ttft_p95_seconds", text, instance="a")]
    answers["fleet_quantiles"] = [row("ttft_p95_seconds", text)]
    figures = figures_from_answers(answers, 60.0, NOW)
    [replica] = figures.replicas
    for figures_of in (replica, figures.fleet):
        assert figures_of.requests_per_second is None and figures_of.waiting is None and figures_of.kv_usage is None
        assert figures_of.ttft_p95_seconds is None and figures_of.mean_input_tokens is None
    assert replica.state == "up"
    numbers_are_finite_or_unknown(figures)


LABEL_TEXT = st.text(max_size=12) | st.sampled_from(["10.0.0.1:8000", "\x1b[2J", "a" * 300, "", "instance"])
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
VALUE_TEXT = st.sampled_from(
    ["1", "0", "-3", "2.5", "NaN", "+Inf", "-Inf", "1e308", "1e-300", "abc", "", " 7 "]
) | st.text(max_size=6)
FIGURES = st.sampled_from(
    [
        "up",
        "scraped_at",
        "requests",
        "prompt_tokens",
        "resets",
        "running",
        "waiting",
        "kv_usage",
        "requests_by_reason",
        "prompt_length_sum",
        "prompt_length_count",
        "ttft_p95_seconds",
        "",
        "junk",
    ]
)
GOOD_ROW = st.builds(
    lambda figure, instance, value, extra: {
        "metric": {promql.FIGURE_LABEL: figure, "instance": instance, **extra},
        "value": [NOW, value],
    },
    FIGURES,
    LABEL_TEXT,
    VALUE_TEXT,
    st.dictionaries(
        st.sampled_from(["engine", "finished_reason", "block_size", "num_gpu_blocks", "kv_cache_size_tokens"]),
        LABEL_TEXT,
        max_size=3,
    ),
)
BAD_ROW = st.one_of(
    JSONISH,
    st.builds(lambda m, v: {"metric": m, "value": v}, JSONISH, JSONISH),
    st.builds(lambda m, v: {"metric": {"instance": m}, "value": [NOW, v]}, JSONISH, JSONISH),
)
RESULT = st.one_of(st.lists(GOOD_ROW, max_size=8), st.lists(st.one_of(GOOD_ROW, BAD_ROW), max_size=6), JSONISH)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(PURPOSES), RESULT))
def test_any_result_is_figures_or_an_answer_error(answers):
    try:
        figures = figures_from_answers(answers, 60.0, NOW)
    except AnswerError as error:
        assert str(error) and "\n" not in str(error)
        return
    numbers_are_finite_or_unknown(figures)


def test_a_worker_given_up_stops_parsing():
    source = PrometheusSource("http://127.0.0.1:9", "", 10)
    stop = threading.Event()
    stop.set()
    with pytest.raises(_Abandoned):
        source._figures({purpose: json.dumps(EMPTY).encode() for purpose in PURPOSES}, NOW, stop)


# --- the same through a real loopback server ------------------------------------------------


class Answering:
    """A Prometheus stand-in on loopback (its own thread and event loop): /api/v1/query answers
    each query with the body set for its purpose."""

    def __init__(self) -> None:
        self.bodies: dict[str, tuple[int, bytes, dict]] = {}
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def answer(self, purpose: str, body: bytes, status: int = 200, **headers: str) -> None:
        self.bodies[purpose] = (status, body, headers)

    async def _query(self, request: web.Request) -> web.Response:
        status, body, headers = self.bodies.get(
            BY_QUERY.get(request.query.get("query", ""), ""), (200, json.dumps(EMPTY).encode(), {})
        )
        return web.Response(status=status, body=body, headers={"Content-Type": "application/json", **headers})

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/api/v1/query", self._query)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self._runner = runner
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def __enter__(self) -> Answering:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def answering():
    with Answering() as server:
        yield server


def collect(url: str, timeout: float = 5.0) -> FleetFigures:
    async def once() -> FleetFigures:
        source = PrometheusSource(url, "", 10, timeout=timeout)
        try:
            return await source.collect(NOW)
        finally:
            await source.aclose()

    return asyncio.run(once())


ENVELOPE = st.one_of(
    st.builds(vector, RESULT),
    st.builds(
        lambda s, t, r: {"status": s, "data": {"resultType": t, "result": r}},
        st.sampled_from(["success", "error", "", None, 1]),
        st.sampled_from(["vector", "matrix", "scalar", None]),
        RESULT,
    ),
    st.builds(lambda e: {"status": "error", "errorType": "bad_data", "error": e}, JSONISH),
    JSONISH,
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.dictionaries(
        st.sampled_from(PURPOSES), st.tuples(ENVELOPE, st.sampled_from([200, 200, 200, 400, 503]), st.booleans())
    )
)
def test_any_answer_served_is_figures_or_one_line_of_source_error(answering, bodies):
    answering.bodies.clear()
    for purpose, (document, status, gzipped) in bodies.items():
        body = json.dumps(document).encode()
        if gzipped:
            answering.answer(purpose, zlib.compress(body, wbits=31), status, **{"Content-Encoding": "gzip"})
        else:
            answering.answer(purpose, body, status)
    figures = collect(answering.url)
    assert isinstance(figures, FleetFigures)
    if figures.source_error:
        assert figures.replicas == () and figures.source_error.startswith(f"Prometheus at {answering.url}: ")
    numbers_are_finite_or_unknown(figures)


async def capcon(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "console",
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("result", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
async def test_watch_once_on_a_wrong_shape_prints_one_line_and_exits_1(answering, result):
    answering.bodies.clear()
    answering.answer("up", json.dumps(vector(result)).encode())
    code, out, err = await capcon(
        "watch", "--once", "--source", "prometheus", "--prometheus", answering.url, "--timeout", "5"
    )
    assert code == 1 and err == "" and "Traceback" not in out
    assert out.count("\n") == 1 and out.startswith(
        f"capcon watch · source prometheus · Prometheus at {answering.url}: answer to the up query"
    )
    code, out, err = await capcon(
        "watch", "--once", "--json", "--source", "prometheus", "--prometheus", answering.url, "--timeout", "5"
    )
    report = json.loads(out)
    assert code == 1 and report["replicas"] == [] and "answer to the up query" in report["source_error"]


# --- what reaches the terminal ---------------------------------------------------------------


ESCAPE = "\x1b[2J\x1b]0;owned\x07"


async def test_a_servers_words_reach_the_terminal_escaped_and_json_keeps_them(answering):
    answering.bodies.clear()
    answering.answer(
        "up",
        json.dumps(
            vector(
                [
                    row("up", "1", instance=f"evil{ESCAPE}:8000"),
                    row("scraped_at", str(NOW), instance=f"evil{ESCAPE}:8000"),
                    row("up", "0", instance="down\r\nfake line:1"),
                ]
            )
        ).encode(),
    )
    code, out, _err = await capcon(
        "watch", "--once", "--source", "prometheus", "--prometheus", answering.url, "--timeout", "5"
    )
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "evil\\x1b[2J\\x1b]0;owned\\x07:8000" in out and "down\\r\\nfake line:1" in out
    code, out, _err = await capcon(
        "watch", "--once", "--json", "--source", "prometheus", "--prometheus", answering.url, "--timeout", "5"
    )
    assert {r["name"] for r in json.loads(out)["replicas"]} == {f"evil{ESCAPE}:8000", "down\r\nfake line:1"}

    answering.answer(
        "up", json.dumps({"status": "error", "errorType": "bad_data", "error": f"nope{ESCAPE}"}).encode(), 400
    )
    code, out, _err = await capcon(
        "watch", "--once", "--source", "prometheus", "--prometheus", answering.url, "--timeout", "5"
    )
    assert code == 1 and out.count("\n") == 1 and "\x1b" not in out and "query refused (HTTP 400): nope\\x1b[2J" in out

    answering.answer("up", b"<html>gateway</html>", 503)
    code, out, _err = await capcon(
        "watch", "--once", "--source", "prometheus", "--prometheus", answering.url, "--timeout", "5"
    )
    assert code == 1 and "HTTP 503 Service Unavailable: <html>gateway</html>" in out


@pytest.fixture
async def reason_server():
    """A raw server answering with a reason phrase full of escape sequences."""
    phrase = b"\x1b[2J\x1b[1;1HAll good\x1b]0;pwned\x07"

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 503 " + phrase + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()
    await server.wait_closed()


async def test_an_http_reason_phrase_reaches_the_terminal_escaped(reason_server):
    code, out, err = await capcon("watch", "--once", "--target", reason_server, "--interval", "0.2", "--timeout", "2")
    assert code == 1 and "\x1b" not in out + err and "\x07" not in out
    assert "HTTP 503 \\x1b[2J\\x1b[1;1HAll good\\x1b]0;pwned\\x07" in out
    code, out, err = await capcon(
        "watch", "--once", "--source", "prometheus", "--prometheus", reason_server, "--timeout", "2"
    )
    assert code == 1 and out.count("\n") == 1 and "\x1b" not in out and "HTTP 503 \\x1b[2J" in out
    code, out, err = await capcon(
        "watch", "--once", "--json", "--target", reason_server, "--interval", "0.2", "--timeout", "2"
    )
    assert "HTTP 503 \x1b[2J\x1b[1;1HAll good\x1b]0;pwned\x07" in json.loads(out)["replicas"][0]["error"]


# --- bombs and drips -------------------------------------------------------------------------


def gzip_bomb_segment() -> bytes:
    """1 MiB of zeros as raw deflate ending in a full flush: the same ~1 KB repeats for every MiB."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    return deflate.compress(b"\0" * (1 << 20)) + deflate.flush(zlib.Z_FULL_FLUSH)


GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


@pytest.fixture
async def bomb():
    """/api/v1/query answers a gzip body that inflates to 10 GiB (10 MB sent); records how each send ended."""
    segment = gzip_bomb_segment()
    sends: list[dict] = []

    async def query(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        send = {"sent": 0, "finished": False, "closed": False}
        sends.append(send)
        await response.prepare(request)
        try:
            await response.write(GZIP_HEADER)
            for _ in range(10 * 1024):
                await response.write(segment * 16)  # 16 MiB inflated per write
                send["sent"] += 16
            send["finished"] = True
        except (ConnectionError, RuntimeError):
            send["closed"] = True
            raise
        return response

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", sends
    await runner.cleanup()


MEASURED = """
import asyncio, json, sys
from console.sources.prometheus import PrometheusSource

def peak():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024

async def main():
    source = PrometheusSource(sys.argv[1], "", 10, timeout=float(sys.argv[2]), max_answer_bytes=int(sys.argv[3]))
    before = peak()
    figures = await source.collect(1.8e9)
    await source.aclose()
    print(json.dumps({"growth": peak() - before, "error": figures.source_error}))

asyncio.run(main())
"""


async def measured(url: str, timeout: float, cap: int) -> dict:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        MEASURED,
        url,
        str(timeout),
        str(cap),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def wait_for(condition, seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)


MiB = 1024 * 1024


@pytest.mark.parametrize("cap_mib", [8, 128])
async def test_a_gzip_bomb_is_refused_at_the_cap_with_memory_bounded(bomb, cap_mib):
    url, sends = bomb
    result = await measured(url, 30.0, cap_mib * MiB)
    assert (
        result["error"]
        == f"Prometheus at {url}: answers larger than {cap_mib} MB in total (decompressed); not read (a fleet this large needs --max-answer-mb)"
    )
    # The six answers together stop at the cap (they share it); the old reader held 4-5 GB here.
    assert result["growth"] < cap_mib * MiB + 96 * MiB, result["growth"] / MiB
    await wait_for(lambda: len(sends) == 6 and all(s["closed"] or s["finished"] for s in sends))
    assert sends and all(s["closed"] and not s["finished"] for s in sends), sends
    assert all(s["sent"] < 10 * 1024 for s in sends)


async def test_watch_once_on_a_gzip_bomb_prints_one_line_exits_1_and_stays_small(bomb):
    url, _sends = bomb
    wrapper = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write(open('/proc/self/status').read().split('VmHWM:')[1].split()[0] + '\\n'))\n"
        "from console.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        wrapper,
        "watch",
        "--once",
        "--source",
        "prometheus",
        "--prometheus",
        url,
        "--timeout",
        "30",
        "--max-answer-mb",
        "16",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 1
    assert (
        out.decode()
        == f"capcon watch · source prometheus · Prometheus at {url}: answers larger than 16 MB in total (decompressed); not read (a fleet this large needs --max-answer-mb)\n"
    )
    peak_kib = int(err.decode().split()[-1])
    assert peak_kib * 1024 < 400 * MiB, peak_kib  # the whole CLI, imports included


@pytest.fixture
async def drip():
    """Answers that never finish: a body one byte per 20 ms (`/api/v1/query`), or headers
    one byte per 20 ms (raw socket, `headers` in the URL). Records how each send ended."""
    sends: list[dict] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        send = {"sent": 0, "finished": False, "closed": False}
        sends.append(send)
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            if b"/headers/" in request.split(b"\r\n", 1)[0]:
                writer.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                body = b"a" * 3000
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 3000\r\n\r\n")
                body = b" " * 3000
            for byte in body:
                writer.write(bytes([byte]))
                await writer.drain()
                send["sent"] += 1
                await asyncio.sleep(0.02)
            send["finished"] = True
        except (ConnectionError, asyncio.IncompleteReadError):
            send["closed"] = True
        finally:
            writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", sends
    server.close()


@pytest.mark.parametrize("path", ["", "/headers"])
async def test_a_slow_drip_is_given_up_at_the_deadline_and_its_connection_closed(drip, path):
    url, sends = drip
    source = PrometheusSource(url + path, "", 10, timeout=0.5)
    figures = await source.collect(NOW)
    await source.aclose()
    assert figures.source_error == f"Prometheus at {url + path}: no answer within 0.5 s"
    # Each of the six reads stopped: the server saw its connection closed with most still to send
    # (3,000 bytes at 50 a second would take a minute).
    await wait_for(lambda: len(sends) == 6 and all(s["closed"] or s["finished"] for s in sends))
    assert len(sends) == 6 and all(s["closed"] and not s["finished"] and s["sent"] < 1500 for s in sends), sends
