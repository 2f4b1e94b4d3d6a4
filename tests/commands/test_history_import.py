"""`capcon history import`: range-query answers turned into polls (the conversion, by hand and under hostile input),
and the whole import against a small Prometheus API on a real loopback socket, into a real SQLite file that
`capcon history` then reads. Failures are one line and exit 1. The real Prometheus is tests/real's lane."""

from __future__ import annotations

import json
import math
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.cli import main
from console.sources.prometheus_history import replica_url, rows_from_matrix, series_query

T0 = 1_800_000_000.0  # a minute boundary
STEP = 60.0
BOUNDS = ("0.1", "0.5", "+Inf")


def series(name: str, instance: str, values, **labels) -> dict:
    return {"metric": {"__name__": name, "instance": instance, "job": "vllm", **labels}, "values": values}


def at_steps(value_at, steps: list[float]) -> list[list]:
    return [[t, repr(float(value_at(t)))] for t in steps]


def fleet_matrix(steps: list[float], rates: dict[str, float]) -> list[dict]:
    """Each instance serves `rates[instance]` req/s from T0: its counters, a TTFT histogram (every request under
    0.1 s) and a KV gauge, as Prometheus answers a range query for them."""
    out = []
    for instance, rate in rates.items():
        served = lambda t, r=rate: r * (t - T0)  # noqa: E731
        out.append(series("vllm:request_success_total", instance, at_steps(served, steps), finished_reason="stop"))
        out.append(series("vllm:prompt_tokens_total", instance, at_steps(lambda t, s=served: 100 * s(t), steps)))
        out.append(series("vllm:generation_tokens_total", instance, at_steps(lambda t, s=served: 20 * s(t), steps)))
        for le in BOUNDS:
            name = "vllm:time_to_first_token_seconds_bucket"
            out.append(series(name, instance, at_steps(served, steps), le=le))
        out.append(series("vllm:time_to_first_token_seconds_count", instance, at_steps(served, steps)))
        out.append(
            series("vllm:time_to_first_token_seconds_sum", instance, at_steps(lambda t, s=served: 0.05 * s(t), steps))
        )
        out.append(series("vllm:kv_cache_usage_perc", instance, at_steps(lambda t: 0.25, steps), model_name="m"))
        out.append(series("process_start_time_seconds", instance, at_steps(lambda t: T0 - 10, steps)))
    return out


# --- the conversion ------------------------------------------------------------------------------------------


def test_each_step_becomes_a_poll_of_each_instance_read_as_one_scrape():
    steps = [T0 + 60.0 * i for i in range(3)]
    polls = rows_from_matrix(fleet_matrix(steps, {"10.0.0.1:8000": 2.0, "10.0.0.2:8000": 1.0}))
    assert [p.at for p in polls] == steps
    last = {r.name: r for r in polls[-1].results}
    assert set(last) == {"10.0.0.1:8000", "10.0.0.2:8000"}
    first = last["10.0.0.1:8000"]
    assert first.url == "http://10.0.0.1:8000/metrics" and first.state == "up"
    assert first.sample.counters["requests"] == 240.0 and first.sample.counters["prompt_tokens"] == 24000.0
    assert first.sample.histograms["ttft"].bounds == (0.1, 0.5, math.inf)
    assert first.sample.histograms["ttft"].count == 240.0
    assert first.sample.kv_usage_by_engine == {"0": 0.25} and first.sample.start_time == T0 - 10


def test_engines_are_summed_and_an_impossible_value_is_unknown_not_a_number():
    steps = [T0]
    matrix = [
        series("vllm:request_success_total", "a:1", at_steps(lambda t: 5, steps), engine="0"),
        series("vllm:request_success_total", "a:1", at_steps(lambda t: 7, steps), engine="1"),
        series("vllm:num_requests_waiting", "a:1", [[T0, "NaN"]]),
    ]
    [poll] = rows_from_matrix(matrix)
    sample = poll.results[0].sample
    assert sample.counters["requests"] == 12.0
    assert sample.waiting is None and "waiting" in sample.doubtful


def test_malformed_items_are_skipped_and_names_made_printable():
    matrix = [
        "not an item",
        {"metric": "no labels", "values": []},
        {"metric": {"__name__": "vllm:request_success_total"}, "values": [[T0, "1"]]},  # no instance
        series("vllm:request_success_total", "bad\x1b[2J:1", [[T0, "3"], ["soon", "4"], [T0 + 60]]),
    ]
    [poll] = rows_from_matrix(matrix)
    assert poll.results[0].name == "bad?[2J:1" and poll.results[0].sample.counters["requests"] == 3.0


def test_a_step_with_no_vllm_series_is_no_poll():
    assert rows_from_matrix([series("up", "a:1", [[T0, "1"]])]) == []
    assert replica_url("pod/abc") == "pod/abc"


def test_the_query_names_every_series_and_takes_the_selector_with_or_without_braces():
    plain, braced = series_query('job="vllm"'), series_query('{job="vllm"}')
    assert plain == braced and plain.endswith(', job="vllm"}')
    assert "vllm:request_success_total" in plain and "vllm:time_to_first_token_seconds_bucket" in plain


labels = st.dictionaries(
    st.sampled_from(["__name__", "instance", "le", "engine", "x"]), st.text(max_size=8), max_size=5
)
anything = st.recursive(
    st.none() | st.booleans() | st.floats() | st.text(max_size=8) | st.integers(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
item = st.one_of(
    anything,
    st.fixed_dictionaries({"metric": labels, "values": st.lists(st.lists(anything, max_size=3), max_size=4)}),
    st.fixed_dictionaries(
        {
            "metric": st.fixed_dictionaries(
                {
                    "__name__": st.sampled_from(
                        [
                            "vllm:request_success_total",
                            "vllm:kv_cache_usage_perc",
                            "vllm:time_to_first_token_seconds_bucket",
                        ]
                    ),
                    "instance": st.just("a:1"),
                    "le": st.sampled_from(["0.1", "+Inf", "x", "-1"]),
                }
            ),
            "values": st.lists(
                st.tuples(st.just(T0), st.sampled_from(["1", "NaN", "-Inf", "2e308", "-3", "x"])), max_size=3
            ),
        }
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(item, max_size=6))
def test_hostile_answers_never_raise_and_never_yield_a_non_finite_figure(matrix):
    for poll in rows_from_matrix(matrix):
        for result in poll.results:
            sample = result.sample
            assert all(math.isfinite(v) and v >= 0 for v in sample.counters.values())
            assert all(0 <= v <= 1 for v in sample.kv_usage_by_engine.values())


# --- against a Prometheus API on loopback --------------------------------------------------------------------


@contextmanager
def prometheus(answer):
    """A Prometheus HTTP API on a real socket: `answer(params)` -> (status, body bytes) for /api/v1/query_range."""
    asked: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            parts = urlsplit(self.path)
            params = {k: v[0] for k, v in parse_qs(parts.query).items()}
            asked.append(params)
            status, body = answer(params) if parts.path == "/api/v1/query_range" else (404, b"not found")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def matrix_answer(rates):
    def answer(params):
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"].rstrip("s"))
        steps = [start + step * i for i in range(int((end - start) / step) + 1)]
        return 200, json.dumps(
            {"status": "success", "data": {"resultType": "matrix", "result": fleet_matrix(steps, rates)}}
        ).encode()

    return answer


def run(capsys, *argv):
    code = main(["history", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_an_import_fills_a_history_that_history_reads_as_a_recording(tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    with prometheus(matrix_answer({"10.0.0.1:8000": 2.0, "10.0.0.2:8000": 1.0})) as (url, asked):
        code, out, err = run(
            capsys,
            "import",
            "--prometheus",
            url,
            "--selector",
            'job="vllm"',
            "--from",
            str(T0),
            "--to",
            str(T0 + 2 * 3600),
            "--db",
            db,
            "--fleet",
            "chat",
        )
    assert code == 0, err
    assert "imported 120 polls of 2 replicas" in out and "as fleet chat" in out
    assert len(asked) == 2  # one range query per hour of the range: memory bounded by one chunk
    assert all('job="vllm"' in a["query"] and a["step"] == "60s" for a in asked)
    code, out, err = run(capsys, "--db", db, "--json", "--from", str(T0), "--to", str(T0 + 2 * 3600), "--tz", "UTC")
    assert code == 0, err
    rows = json.loads(out)["fleets"][0]["rows"]
    assert [r["busiest_rps"] for r in rows] == pytest.approx([3.0, 3.0])
    assert rows[1]["ttft_p95_seconds"] <= 0.1 and rows[1]["kv_usage_max"] == 0.25 and rows[1]["replicas"] == 2
    code, out, err = run(capsys, "--db", db, "--json", "--backtest")
    horizons = json.loads(out)["fleets"][0]["horizons"]
    assert code == 0 and horizons[0]["naive"]["mae_rps"] == pytest.approx(0.0) and horizons[0]["naive"]["points"] > 0
    # The same range again would double every figure: refused, nothing written.
    with prometheus(matrix_answer({"10.0.0.1:8000": 2.0})) as (url, _):
        code, out, err = run(
            capsys,
            "import",
            "--prometheus",
            url,
            "--selector",
            'job="vllm"',
            "--from",
            str(T0),
            "--to",
            str(T0 + 600),
            "--db",
            db,
            "--fleet",
            "chat",
        )
    assert code == 1 and "already holds 10 polls" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "status, body, words",
    [
        (
            200,
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
            "matched no vLLM series",
        ),
        (
            400,
            b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}',
            "answered HTTP 400: parse error at char 3",
        ),
        (200, b"", "the answer is not JSON"),
        (200, b"<html>a login page</html>", "the answer is not JSON"),
    ],
)
def test_an_answer_that_gives_nothing_is_one_line_and_exit_1_with_no_file_written(
    tmp_path, capsys, status, body, words
):
    db = tmp_path / "h.sqlite"
    with prometheus(lambda params: (status, body)) as (url, _):
        code, _out, err = run(
            capsys,
            "import",
            "--prometheus",
            url,
            "--selector",
            'job="none"',
            "--from",
            str(T0),
            "--to",
            str(T0 + 600),
            "--db",
            str(db),
        )
    assert code == 1 and words in err and err.count("\n") == 1 and "Traceback" not in err
    assert not Path(db).exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["--prometheus", "http://127.0.0.1:1", "--selector", 'job="x"', "--from", "-1h", "--to", "now"],
            "cannot connect",
        ),
        (
            ["--prometheus", "ftp://p:9090", "--selector", 'job="x"', "--from", "-1h", "--to", "now"],
            "not http or https",
        ),
        (
            ["--prometheus", "http://user:secret@127.0.0.1:1", "--selector", 'j="x"', "--from", "-1h", "--to", "now"],
            "user:***@",
        ),
        (["--selector", 'job="x"', "--from", "-1h", "--to", "now"], "needs --prometheus"),
        (["--prometheus", "http://p:9090", "--from", "-1h", "--to", "now"], "needs --selector"),
        (["--prometheus", "http://p:9090", "--selector", 'job="x"'], "needs --from WHEN and --to WHEN"),
        (["--prometheus", "http://p:9090", "--selector", 'job="x"', "--from", "now", "--to", "-1h"], "is not before"),
        (
            ["--prometheus", "http://p:9090", "--selector", 'job="x"', "--from", "-1h", "--to", "now", "--step", "0.5"],
            "--step 0.5",
        ),
    ],
)
def test_bad_input_and_an_unreachable_server_are_one_line_and_exit_1(tmp_path, capsys, argv, words):
    code, _out, err = run(capsys, "import", *argv, "--db", str(tmp_path / "h.sqlite"))
    assert code == 1 and words in err and err.count("\n") == 1 and "secret" not in err


def test_the_import_options_without_import_are_named(capsys):
    code, _, err = run(capsys, "--prometheus", "http://p:9090")
    assert code == 2 and "capcon history import" in err
