"""`capcon bench import`: vllm bench serve results and GuideLLM reports mapped to capcon's report."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.bench.imported import BenchImportError, import_steps, imported_capacity
from console.bench.measure import BenchTargets
from console.cli import main
from console.errors import UserError
from console.plan.schema import load_plan

from .conftest import FAST_PLAN

TARGETS = BenchTargets(ttft=0.5, tpot=0.05, share=0.95)


def vllm_result(rate, p95_ttft_ms, p95_tpot_ms=30.0, completed=100, failed=0, detailed=None) -> dict:
    """The keys vllm bench serve --save-result writes (with --metric-percentiles 50,95)."""
    data = {
        "date": "20261202-001500",
        "backend": "openai",
        "model_id": "tiny",
        "num_prompts": completed + failed,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": (completed + failed) / (rate if rate != "inf" else 50.0),
        "completed": completed,
        "failed": failed,
        "total_input_tokens": 64 * completed,
        "total_output_tokens": 16 * completed,
        "request_throughput": completed / 10,
        "request_goodput": None,
        "output_throughput": 160.0,
        "mean_ttft_ms": p95_ttft_ms / 2,
        "median_ttft_ms": p95_ttft_ms / 2,
        "p50_ttft_ms": p95_ttft_ms / 2,
        "p95_ttft_ms": p95_ttft_ms,
        "median_tpot_ms": p95_tpot_ms * 0.9,
        "p50_tpot_ms": p95_tpot_ms * 0.9,
        "p95_tpot_ms": p95_tpot_ms,
        "p95_itl_ms": p95_tpot_ms * 1.1,
        "p50_e2el_ms": 500.0,
        "p95_e2el_ms": 900.0,
    }
    if detailed is not None:
        data.update(detailed)
    return data


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_a_sweep_of_vllm_results_gives_the_capacity_and_the_target_that_broke(tmp_path, capsys):
    files = [
        write(tmp_path, "r4.json", vllm_result(4.0, 200.0)),
        write(tmp_path, "r8.json", vllm_result(8.0, 450.0)),
        write(tmp_path, "r6.json", vllm_result(6.0, 300.0)),
        write(tmp_path, "r10.json", vllm_result(10.0, 1500.0)),
    ]
    db = tmp_path / "history.sqlite"
    assert main(["bench", "import", *files, "--plan", str(FAST_PLAN), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "capacity: 8.00 rps per replica on 100 requests (p95s within the targets" in out
    assert "p95 TTFT 1,500.0 ms over the 500.0 ms target" in out
    assert out.index("4.00") < out.index("6.00") < out.index("8.00") < out.index("10.00")  # by rate
    with sqlite3.connect(db) as history:
        ((kind, detail),) = history.execute("SELECT kind, detail FROM events").fetchall()
    assert kind == "bench_import" and json.loads(detail)["source"] == "vllm bench serve"
    # `capcon export --what events` reads it back, steps and all.
    assert (
        main(["export", "--what", "events", "--from", "-1h", "--to", "now", "--format", "jsonl", "--db", str(db)]) == 0
    )
    (line,) = capsys.readouterr().out.splitlines()
    exported = json.loads(line)
    assert (exported["kind"], exported["fleet"]) == ("bench_import", "fast-replica")
    assert [step["rate_rps"] for step in exported["detail"]["steps"]] == [4.0, 6.0, 8.0, 10.0]


def test_detailed_results_count_goodput_per_request_as_capcon_does(tmp_path):
    # 20 requests: 18 meet both targets, one is late to the first token, one decodes slowly.
    ttfts = [0.1] * 18 + [0.9, 0.1]
    latencies = [0.1 + 15 * 0.02] * 19 + [0.1 + 15 * 0.08]
    detailed = {
        "ttfts": ttfts,
        "itls": [[0.02] * 15] * 20,
        "latencies": latencies,
        "output_lens": [16] * 20,
        "errors": [""] * 20,
    }
    path = write(tmp_path, "d.json", vllm_result(5.0, 200.0, completed=20, detailed=detailed))
    tool, model, (step,) = import_steps(path, TARGETS)
    assert (tool, model) == ("vllm bench serve", "tiny")
    assert (step.sent, step.good, step.goodput_share) == (20, 18, 0.9)
    assert not step.holds  # 90 % < 95 %, although its p95s look fine


def guidellm_report() -> dict:
    """The shape GuideLLM writes: one benchmark per strategy, distributions per request status."""

    def distribution(median, p95):
        return {"successful": {"mean": median, "median": median, "percentiles": {"p50": median, "p95": p95}}}

    def benchmark(kind, rate, ttft_p95, tpot_p95, errored=0):
        return {
            "type_": "generative_benchmark",
            "config": {"strategy": {"type_": kind, "rate": rate}},
            "run_stats": {"start_time": 100.0, "end_time": 130.0},
            "metrics": {
                "request_totals": {"successful": 90, "errored": errored, "incomplete": 0, "total": 90 + errored},
                "requests_per_second": distribution(rate or 12.5, rate or 13.0),
                "time_to_first_token_ms": distribution(ttft_p95 / 2, ttft_p95),
                "time_per_output_token_ms": distribution(tpot_p95 * 0.9, tpot_p95),
                "inter_token_latency_ms": distribution(tpot_p95 * 0.9, tpot_p95),
                "request_latency": distribution(0.5, 0.9),
            },
        }

    return {
        "benchmarks": [
            benchmark("synchronous", None, 80.0, 20.0),
            benchmark("constant", 3.0, 150.0, 25.0),
            benchmark("poisson", 6.0, 400.0, 40.0),
            benchmark("constant", 9.0, 420.0, 60.0),  # TPOT breaks
            benchmark("throughput", None, 2500.0, 90.0, errored=5),
        ]
    }


def test_a_guidellm_report_maps_its_strategies_to_steps(tmp_path):
    path = write(tmp_path, "guidellm.json", guidellm_report())
    tool, _, steps = import_steps(path, TARGETS)
    assert tool == "guidellm"
    assert [round(s.rate, 2) for s in steps] == [12.5, 3.0, 6.0, 9.0, 12.5]
    assert [s.holds for s in steps] == [True, True, True, False, False]
    assert steps[1].ttft_p95 == pytest.approx(0.15) and steps[3].tpot_p95 == pytest.approx(0.06)
    assert steps[4].failed == 5 and steps[1].duration_seconds == 30.0
    # The synchronous run's 12.5 rps is above the 9 rps that broke: not the capacity.
    assert imported_capacity(steps) == (6.0, True)


def test_write_plan_from_an_import_names_the_tool(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(FAST_PLAN.read_text())
    files = [write(tmp_path, f"r{r}.json", vllm_result(float(r), ms)) for r, ms in ((4, 200.0), (7, 800.0))]
    assert main(["bench", "import", *files, "--plan", str(plan), "--write-plan", "--no-history"]) == 0
    capacity = load_plan(plan).capacity
    assert (capacity.rps_per_replica, capacity.source) == (4.0, "vllm bench serve")
    assert "100 requests at 4 rps" in capacity.note


@pytest.mark.parametrize(
    "content, expected",
    [
        ("not json", "bad.json:1: not JSON"),
        ("[1, 2]", "neither a vllm bench serve result"),
        ('{"completed": 3, "duration": 1, "p95_ttft_ms": "fast"}', 'p95_ttft_ms is "fast"'),
        ('{"completed": 3, "duration": -1, "p95_ttft_ms": 1}', "duration is -1"),
        ('{"completed": 3, "duration": 1}', "no p95_ttft_ms and no per-request figures"),
        ('{"benchmarks": []}', "no benchmarks"),
        ('{"benchmarks": [{"metrics": {}}]}', "benchmarks[0]: no request_totals"),
    ],
)
def test_files_that_are_no_benchmark_result_are_one_line(tmp_path, capsys, content, expected):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["bench", "import", str(path), "--ttft", "1", "--tpot", "1", "--no-history"]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and err.startswith("capcon bench: ")


def test_import_words_and_targets_are_checked(tmp_path, capsys):
    assert main(["bench", "import"]) == 2
    assert "import: no file" in capsys.readouterr().err
    assert main(["bench", "export", "x"]) == 2
    assert "'export': unknown word" in capsys.readouterr().err
    path = write(tmp_path, "r.json", vllm_result(1.0, 100.0))
    assert main(["bench", "import", path, "--no-history"]) == 2
    assert "no latency target for --ttft and --tpot" in capsys.readouterr().err


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["completed", "duration", "failed", "request_rate", "p95_ttft_ms", "p95_tpot_ms", "ttfts"]),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=5)
        | st.lists(st.integers(), max_size=3),
        max_size=7,
    )
)
def test_any_vllm_shaped_result_imports_or_fails_with_one_line(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("h") / "r.json"
    path.write_text(json.dumps(data))
    try:
        _, _, steps = import_steps(path, TARGETS)
    except UserError as error:
        assert "\n" not in str(error) and "expected" in str(error)
        return
    assert steps[0].sent >= steps[0].completed >= 0


def test_an_import_error_is_a_user_error():
    assert issubclass(BenchImportError, UserError)
