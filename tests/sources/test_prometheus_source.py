"""PrometheusSource: answers turned into figures, and a Prometheus that is down or refuses a query."""

from __future__ import annotations

import asyncio
import math
import socket

import pytest
from aiohttp import web

from console.metrics.figures import ReplicaState
from console.sources import promql
from console.sources.prometheus import PrometheusSource, figures_from_answers

NOW = 1_800_000_000.0
A, B = "10.0.0.1:8000", "10.0.0.2:8000"


def row(figure: str, value, **labels) -> dict:
    return {"metric": {promql.FIGURE_LABEL: figure, **labels}, "value": [NOW, str(value)]}


def answers_for(instances: list[str]) -> dict[str, list[dict]]:
    """Answers shaped as Prometheus gives them, for a fleet of identical replicas but the first two."""
    up, rates, gauges, config, quantiles = [], [], [], [], []
    for index, instance in enumerate(instances):
        up += [row("up", 1, instance=instance, job="vllm"), row("scraped_at", NOW - 1.5, instance=instance)]
        rates += [
            row("requests", 2.0, instance=instance),
            row("prompt_tokens", 200.0, instance=instance),
            row("generation_tokens", 600.0, instance=instance),
            row("preemptions", 0.0, instance=instance),
            row("prefix_cache_queries", 200.0, instance=instance),
            row("prefix_cache_hits", 50.0, instance=instance),
            row("admission_rejections", 0.0, instance=instance),
            row("requests_by_reason", 1.5, instance=instance, finished_reason="length"),
            row("requests_by_reason", 0.5, instance=instance, finished_reason="stop"),
            row("prompt_length_sum", 200.0, instance=instance),
            row("prompt_length_count", 2.0, instance=instance),
            row("output_length_sum", 600.0, instance=instance),
            row("output_length_count", 2.0, instance=instance),
            row("resets", 0, instance=instance),
        ]
        gauges += [
            row("running", 4, instance=instance),
            row("waiting", 3 + index, instance=instance),
            row("kv_usage", 0.5, instance=instance, engine="0"),
            row("kv_usage", 0.8 if index == 0 else 0.25, instance=instance, engine="1"),
        ]
        for engine in ("0", "1"):
            labels = {
                "__name__": "vllm:cache_config_info",
                "instance": instance,
                "engine": engine,
                "block_size": "16",
                "num_gpu_blocks": "1000",
            }
            config.append({"metric": labels, "value": [NOW, "1"]})
        quantiles += [
            row("ttft_p95_seconds", 0.25 * (index + 1), instance=instance),
            row("itl_p95_seconds", "NaN", instance=instance),
        ]
    fleet = [row("ttft_p95_seconds", 0.4), row("ttft_p50_seconds", 0.1), row("itl_p95_seconds", "NaN")]
    return {
        "up": up,
        "rates": rates,
        "gauges": gauges,
        "cache_config": config,
        "quantiles": quantiles,
        "fleet_quantiles": fleet,
    }


def test_answers_become_per_replica_and_fleet_figures():
    figures = figures_from_answers(answers_for([A, B]), 60.0, NOW)
    assert figures.source == "prometheus" and figures.source_error == "" and figures.window_seconds == 60.0
    first, second = figures.replicas
    assert (first.name, first.url, first.state) == (A, A, "up")
    assert first.requests_per_second == 2.0 and first.generation_tokens_per_second == 600.0
    assert first.requests_per_second_by_reason == {"length": 1.5, "stop": 0.5}
    assert first.kv_usage == 0.8 and first.kv_usage_by_engine == {"0": 0.5, "1": 0.8}
    assert second.kv_usage == 0.5
    assert first.kv_capacity_tokens == 2 * 16 * 1000  # both engines
    assert first.kv_capacity_tokens_by_engine == {"0": 16 * 1000, "1": 16 * 1000}
    assert first.prefix_hit_share == 0.25
    assert first.mean_input_tokens == 100.0 and first.mean_output_tokens == 300.0
    assert first.ttft_p95_seconds == 0.25 and second.ttft_p95_seconds == 0.5
    assert first.itl_p95_seconds is None  # NaN: no observations in the window, unknown
    assert first.tpot_p95_seconds is None  # not answered at all: unknown, not 0
    assert first.data_age_seconds == pytest.approx(1.5)

    fleet = figures.fleet
    assert fleet.state == "up" and fleet.error == ""
    assert fleet.requests_per_second == 4.0 and fleet.prompt_tokens_per_second == 400.0
    assert fleet.requests_per_second_by_reason == {"length": 3.0, "stop": 1.0}
    assert fleet.running == 8 and fleet.waiting == 7 and fleet.kv_usage == 0.8
    assert fleet.kv_capacity_tokens == 4 * 16 * 1000
    assert fleet.kv_capacity_tokens_by_engine == {}  # engine labels of different replicas would collide
    assert fleet.ttft_p95_seconds == 0.4  # from merged buckets, not the mean of 0.25 and 0.5
    assert fleet.itl_p95_seconds is None
    assert fleet.mean_output_tokens == 300.0 and fleet.prefix_hit_share == 0.25


def config_row(instance: str, **labels: str) -> dict:
    return {"metric": {"__name__": "vllm:cache_config_info", "instance": instance, **labels}, "value": [NOW, "1"]}


@pytest.mark.parametrize(
    "config,by_engine,total",
    [
        pytest.param(
            [
                config_row(A, engine="0", block_size="16", num_gpu_blocks="14000"),
                config_row(A, engine="1", block_size="16", num_gpu_blocks="2000"),
            ],
            {"0": 224_000.0, "1": 32_000.0},
            256_000.0,
            id="per engine label",
        ),
        pytest.param(
            # Two series for the same engine (e.g. scraped by two jobs): counted once.
            [
                config_row(A, engine="0", kv_cache_size_tokens="2048"),
                config_row(A, engine="0", kv_cache_size_tokens="2048", job="other"),
            ],
            {"0": 2048.0},
            2048.0,
            id="one engine twice",
        ),
        pytest.param(
            [config_row(A, block_size="16", num_gpu_blocks="1000")], {"0": 16_000.0}, 16_000.0, id="no engine label"
        ),
        pytest.param(
            [
                config_row(A, engine="0", block_size="16", num_gpu_blocks="1000"),
                config_row(A, engine="1", block_size="16", num_gpu_blocks="None"),
            ],
            {"0": 16_000.0},
            None,
            id="one engine without a figure",
        ),
        pytest.param([], {}, None, id="no cache_config_info"),
    ],
)
def test_kv_capacity_per_engine_from_cache_config_info(config, by_engine, total):
    answers = answers_for([A])
    answers["cache_config"] = config
    (replica,) = figures_from_answers(answers, 60.0, NOW).replicas
    assert replica.kv_capacity_tokens_by_engine == by_engine
    assert replica.kv_capacity_tokens == total


def test_replica_states_from_up_timestamps_and_resets():
    answers = answers_for([A, B, "10.0.0.3:8000", "10.0.0.4:8000"])
    answers["up"] = [
        r for r in answers["up"] if not (r["metric"]["instance"] == B and r["metric"][promql.FIGURE_LABEL] == "up")
    ]
    answers["up"].append(row("up", 0, instance=B))
    answers["up"] = [
        r
        for r in answers["up"]
        if not (r["metric"]["instance"] == "10.0.0.3:8000" and r["metric"][promql.FIGURE_LABEL] == "scraped_at")
    ]
    answers["up"].append(row("scraped_at", NOW - 600, instance="10.0.0.3:8000"))
    answers["rates"] = [
        r
        for r in answers["rates"]
        if not (r["metric"]["instance"] == "10.0.0.4:8000" and r["metric"][promql.FIGURE_LABEL] == "resets")
    ]
    answers["rates"].append(row("resets", 1, instance="10.0.0.4:8000"))
    figures = figures_from_answers(answers, 60.0, NOW)
    states = {r.name: (r.state, r.error) for r in figures.replicas}
    assert states[A] == ("up", "")
    assert states[B][0] == "down" and "up == 0" in states[B][1]
    assert states["10.0.0.3:8000"][0] == "stale" and "600 s ago" in states["10.0.0.3:8000"][1]
    assert states["10.0.0.4:8000"][0] is ReplicaState.RESTARTED  # the state itself, as the scrape gives it
    assert figures.fleet.error == "1 of 4 replicas not answering"
    assert figures.fleet.waiting == 3 + 5 + 6  # the down replica's gauges are left out


def test_no_matching_targets_is_an_empty_fleet_not_an_error():
    figures = figures_from_answers({name: [] for name in promql.refresh_queries("", 60)}, 60.0, NOW)
    assert figures.replicas == () and figures.source_error == ""
    assert figures.fleet.state == "unknown" and "no targets match the selector" in figures.fleet.error
    assert figures.fleet.requests_per_second is None and figures.fleet.ttft_p95_seconds is None


class CountingClient:
    """Stands in for PrometheusConnect: answers from a fleet fixture and counts the queries."""

    def __init__(self, answers: dict[str, list[dict]]) -> None:
        self.by_query = {query: answers[purpose] for purpose, query in promql.refresh_queries('job="vllm"', 30).items()}
        self.calls: list[tuple[str, dict]] = []

    def custom_query(self, query, params=None, timeout=None):
        self.calls.append((query, params))
        return self.by_query[query]


@pytest.mark.parametrize("size", [1, 50])
async def test_a_refresh_sends_a_fixed_number_of_queries_at_one_instant(size):
    instances = [f"10.0.{i // 250}.{i % 250}:8000" for i in range(size)]
    client = CountingClient(answers_for(instances))
    source = PrometheusSource("http://prometheus.invalid", 'job="vllm"', window_seconds=30, client=client)
    figures = await source.collect(NOW)
    assert len(client.calls) == 6
    assert {params["time"] for _q, params in client.calls} == {f"{NOW:.3f}"}
    assert len(figures.replicas) == size and figures.fleet.requests_per_second == pytest.approx(2.0 * size)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


async def test_prometheus_down_is_a_source_error_not_a_crash():
    source = PrometheusSource(f"http://127.0.0.1:{closed_port()}", 'job="vllm"', window_seconds=10, timeout=2)
    figures = await source.collect(NOW)
    await source.aclose()
    assert figures.source == "prometheus" and figures.replicas == ()
    assert "cannot connect" in figures.source_error and "127.0.0.1" in figures.source_error
    assert figures.fleet.state == "unknown" and figures.fleet.requests_per_second is None
    assert figures.to_json()["source_error"] == figures.source_error


@pytest.fixture
async def fake_prometheus():
    """A loopback HTTP server answering /api/v1/query as `behaviour` says."""
    behaviour = {
        "status": 200,
        "body": {"status": "success", "data": {"resultType": "vector", "result": []}},
        "delay": 0.0,
    }

    async def query(request: web.Request) -> web.Response:
        await asyncio.sleep(behaviour["delay"])
        return web.json_response(behaviour["body"], status=behaviour["status"])

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    port = closed_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield f"http://127.0.0.1:{port}", behaviour
    await runner.cleanup()


async def test_a_refused_query_reports_prometheus_own_error(fake_prometheus):
    url, behaviour = fake_prometheus
    behaviour.update(
        status=400, body={"status": "error", "errorType": "bad_data", "error": 'parse error: unexpected "}"'}
    )
    source = PrometheusSource(url, 'job="vllm"', window_seconds=10, timeout=2)
    figures = await source.collect(NOW)
    await source.aclose()
    assert figures.replicas == ()
    assert figures.source_error == f'Prometheus at {url}: query refused (HTTP 400): parse error: unexpected "}}"'


async def test_a_slow_prometheus_times_out_into_a_source_error(fake_prometheus):
    url, behaviour = fake_prometheus
    behaviour["delay"] = 3.0
    source = PrometheusSource(url, "", window_seconds=10, timeout=0.3)
    figures = await source.collect(NOW)
    await source.aclose()
    assert figures.replicas == () and (
        "timed out" in figures.source_error or "no answer within" in figures.source_error
    )


async def test_an_empty_answer_from_a_live_prometheus_is_an_empty_fleet(fake_prometheus):
    url, _behaviour = fake_prometheus
    source = PrometheusSource(url, 'job="nothing"', window_seconds=10, timeout=2)
    figures = await source.collect(NOW)
    await source.aclose()
    assert figures.source_error == "" and figures.replicas == ()
    assert math.isclose(figures.at, NOW)


class BrokenClient:
    def custom_query(self, query, params=None, timeout=None):
        raise ValueError("Expecting value: line 1 column 1 (char 0)")


async def test_any_client_fault_is_a_source_error():
    figures = await PrometheusSource("http://p.invalid", "", 10, client=BrokenClient()).collect(NOW)
    assert (
        figures.source_error == "Prometheus at http://p.invalid: ValueError: Expecting value: line 1 column 1 (char 0)"
    )


def test_watch_with_a_bad_selector_says_what_and_exits_2(capsys):
    from console.cli import main

    code = main(
        ["watch", "--once", "--source", "prometheus", "--prometheus", "http://127.0.0.1:9", "--selector", "job=vllm"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "--selector 'job=vllm'" in err and 'expected matchers like job="vllm"' in err


# --- the transport: capcon's own reads of /api/v1/query ------------------------------------------


@pytest.fixture
async def served_answers():
    """A loopback Prometheus answering each of the refresh's queries from `answers` (by purpose),
    gzipped when the client asks, under the path prefix /prom; records each request's query string."""
    state = {"answers": answers_for([A, B]), "requests": []}
    purposes = {query: purpose for purpose, query in promql.refresh_queries('job="vllm"', 30).items()}

    async def query(request: web.Request) -> web.StreamResponse:
        state["requests"].append((dict(request.query), request.headers.get("Accept-Encoding")))
        purpose = purposes[request.query["query"]]
        response = web.json_response(
            {"status": "success", "data": {"resultType": "vector", "result": state["answers"][purpose]}}
        )
        response.enable_compression()  # gzip, as Prometheus answers when asked
        return response

    app = web.Application()
    app.router.add_get("/prom/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/prom", state
    await runner.cleanup()


async def test_answers_read_over_http_gzipped_give_the_same_figures(served_answers):
    url, state = served_answers
    source = PrometheusSource(url + "/?tenant=team-a", 'job="vllm"', window_seconds=30, timeout=5)
    figures = await source.collect(NOW)
    await source.aclose()
    assert figures.source_error == ""
    assert figures == figures_from_answers(state["answers"], 30.0, NOW)
    assert len(state["requests"]) == 6
    for params, encoding in state["requests"]:
        assert params["time"] == f"{NOW:.3f}" and params["tenant"] == "team-a"  # the base URL's query is kept
        assert encoding == "gzip"


async def test_answers_over_the_cap_are_refused_not_parsed(served_answers):
    url, _state = served_answers
    source = PrometheusSource(url, 'job="vllm"', window_seconds=30, timeout=5, max_answer_bytes=2000)
    figures = await source.collect(NOW)
    await source.aclose()
    assert figures.replicas == ()
    assert (
        figures.source_error
        == f"Prometheus at {url}: answers larger than {2000 / 1048576:g} MB in total (decompressed); not read (a fleet this large needs --max-answer-mb)"
    )


async def test_a_declared_length_over_the_cap_is_refused_before_reading(fake_prometheus):
    url, behaviour = fake_prometheus
    behaviour["body"] = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [NOW, "1"]}] * 200},
    }
    source = PrometheusSource(url, "", window_seconds=10, timeout=2, max_answer_bytes=1000)
    figures = await source.collect(NOW)
    await source.aclose()
    assert "answers larger than" in figures.source_error


@pytest.mark.parametrize(
    "url, problem",
    [
        ("ftp://prom:9090", "not a usable URL"),
        ("http://", "not a usable URL"),
    ],
)
async def test_an_unusable_url_is_a_source_error(url, problem):
    figures = await PrometheusSource(url, "", 10, timeout=1).collect(NOW)
    assert problem in figures.source_error and figures.replicas == ()


@pytest.mark.parametrize(
    "typed, message",
    [
        ("prom_1:9090", "--prometheus 'prom_1:9090': '_' is not allowed in a host name"),
        (
            "http://admin:hunter2@prom:99999",
            "--prometheus 'http://admin:***@prom:99999': port 99999 is outside 1-65535",
        ),
    ],
)
def test_watch_refuses_an_unusable_prometheus_url_with_exit_2(capsys, typed, message):
    from console.cli import main

    assert main(["watch", "--once", "--source", "prometheus", "--prometheus", typed]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "hunter2" not in err


def test_watch_refuses_a_max_answer_that_is_not_positive(capsys):
    from console.cli import main

    assert (
        main(
            ["watch", "--once", "--source", "prometheus", "--prometheus", "http://127.0.0.1:9", "--max-answer-mb", "0"]
        )
        == 2
    )
    assert "--max-answer-mb 0: expected a positive number of MB" in capsys.readouterr().err


@pytest.fixture
def self_signed(tmp_path):
    import ssl
    import subprocess

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
    from .servers import serve

    async def query(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": []}})

    async with serve(query, path="/api/v1/query", ssl_context=self_signed) as url:
        verified = PrometheusSource(url, "", 10, timeout=5)
        insecure = PrometheusSource(url, "", 10, timeout=5, verify=False)
        refused, answered = await verified.collect(NOW), await insecure.collect(NOW)
        await verified.aclose()
        await insecure.aclose()
    assert (
        refused.source_error.startswith(f"Prometheus at {url}: TLS failed: ")
        and "CERTIFICATE" in refused.source_error.upper()
    )
    assert answered.source_error == ""
