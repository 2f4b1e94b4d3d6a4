"""`capcon bench` against a simulated replica (`capcon sim`, a real server on loopback), as a user runs it.

The proof of the sweep: the capacity it finds is within 10 % of where the same sweep,
run offline on the simulator's engine (same arrivals, same lengths, no HTTP), lands.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from console.bench.measure import targets_from
from console.bench.runner import StepSettings
from console.bench.simulated import simulated_sweep
from console.bench.sweep import Sweep
from console.plan.schema import load_plan
from console.sim.engine import Engine
from console.sim.server import count_chat_tokens
from console.sim.shape import replica_shape

from .conftest import ANSWER_TOKENS, FAST_PLAN, PROMPT_WORDS, REPO

pytestmark = pytest.mark.timeout(240)
SWEEP = ["--start-rate", "12", "--factor", "1.5", "--precision", "0.05", "--step-seconds", "2", "--min-requests", "20"]


def bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_one_fixed_rate_run_counts_what_the_replica_counted(sim_url, prompts_file, tmp_path):
    db = tmp_path / "history.sqlite"
    done = bench(
        "--target", sim_url, "--prompts", str(prompts_file), "--plan", str(FAST_PLAN), "--rate", "8",
        "--step-seconds", "3", "--min-requests", "20", "--ignore-eos", "--json", "--db", str(db),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (step,) = report["steps"]
    assert step["sent"] == step["completed"] == 24
    assert step["goodput_share"] == 1.0 and step["holds"]
    assert step["output_tokens"] == 24 * ANSWER_TOKENS
    # The replica's own counters saw exactly the requests the client counted.
    assert step["server"]["scrapes"] >= 2
    assert step["server"]["finished"] == 24
    assert step["server"]["generation_tokens"] == 24 * ANSWER_TOKENS
    # Client and server TTFT both shown; the client's includes HTTP, so it is not the smaller one by much.
    assert step["client"]["ttft_ms_p50"] > 0 and step["server"]["ttft_p50"] is not None
    assert report["capacity_rps"] == 8 and report["converged"] is False
    assert report["targets"] == {"ttft_seconds": 0.5, "tpot_seconds": 0.05, "e2e_seconds": None, "goodput_share": 0.95}
    with sqlite3.connect(db) as store:
        events = store.execute("SELECT kind, subject, detail FROM events").fetchall()
    assert [(kind, subject) for kind, subject, _ in events] == [("bench_run", sim_url)]
    assert json.loads(events[0][2])["steps"][0]["sent"] == 24


@pytest.fixture(scope="module")
def swept(sim_url, tmp_path_factory):
    from .conftest import write_prompts

    folder = tmp_path_factory.mktemp("sweep")
    plan = folder / "plan.yaml"
    plan.write_text(FAST_PLAN.read_text())
    prompts = write_prompts(folder / "prompts.jsonl", 400)
    db = folder / "history.sqlite"
    done = bench(
        "--target", sim_url, "--prompts", str(prompts), "--plan", str(plan), *SWEEP, "--ignore-eos",
        "--db", str(db), "--write-plan",
    )  # fmt: skip
    return done, plan, db


def offline_capacity() -> float:
    plan = load_plan(FAST_PLAN)
    settings = StepSettings(seconds=2, min_requests=20, burstiness=1.0, max_tokens=ANSWER_TOKENS, seed=0)
    sweep = Sweep(start=12, factor=1.5, precision=0.05)
    simulated_sweep(
        plan, [(PROMPT_WORDS, ANSWER_TOKENS, ANSWER_TOKENS)], targets_from(plan.workloads[0]), settings, sweep
    )
    assert sweep.converged
    return sweep.capacity


@pytest.mark.slow  # a whole sweep: a long run
def test_the_sweep_lands_within_ten_percent_of_the_simulators_offline_crossing(swept):
    done, _, _ = swept
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("capacity:"))
    found = float(line.split()[1])
    expected = offline_capacity()
    print(f"live sweep {found:.2f} rps, offline crossing {expected:.2f} rps")
    assert found == pytest.approx(expected, rel=0.10)
    # The batch cap of 8 is the limit: a queue with KV free.
    assert "limit hit: queueing" in done.stdout
    assert "8 running; max_num_seqs" in done.stdout
    # Every step says how many requests it measured and how noisy it was.
    rows = [line for line in done.stdout.splitlines() if line.rstrip().endswith(("holds", "falls"))]
    assert len(rows) >= 4 and all("%-" in row for row in rows)
    # Progress went to stderr as plain lines (not a terminal).
    assert "goodput so far" in done.stderr and "\r" not in done.stderr


@pytest.mark.slow  # on the sweep: a long run
def test_the_run_is_an_event_in_the_history_file_with_its_steps(swept):
    done, _, db = swept
    with sqlite3.connect(db) as store:
        ((kind, fleet_name, detail),) = store.execute(
            "SELECT e.kind, f.name, e.detail FROM events e LEFT JOIN fleets f ON f.id = e.fleet_id"
        ).fetchall()
    detail = json.loads(detail)
    assert (kind, fleet_name) == ("bench_run", "fast-replica")
    assert len(detail["steps"]) >= 4 and detail["limit"]["limit"] == "queueing"
    assert f"capacity: {detail['capacity_rps']:,.2f} rps" in done.stdout


@pytest.mark.slow  # on the sweep: a long run
def test_write_plan_puts_the_capacity_in_and_keeps_the_rest_of_the_file(swept):
    done, plan_path, db = swept
    with sqlite3.connect(db) as store:
        (detail,) = store.execute("SELECT detail FROM events").fetchone()
    capacity = json.loads(detail)["capacity_rps"]
    before, after = FAST_PLAN.read_text().splitlines(), plan_path.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 3, changed
    assert all(a.split(":")[0] == b.split(":")[0] for a, b in changed)  # the same keys, new values
    assert "# replaced by the tests' --write-plan" in plan_path.read_text()  # its comment kept
    plan = load_plan(plan_path)
    assert plan.capacity.rps_per_replica == pytest.approx(capacity, rel=1e-3)
    assert plan.capacity.source == "capcon bench"
    assert time.strftime("%Y-%m-%d", time.gmtime()) in plan.capacity.note
    assert "limit: queueing" in plan.capacity.note
    assert "wrote capacity" in done.stderr


def test_ctrl_c_stops_cleanly_and_keeps_what_was_measured(sim_url, prompts_file, tmp_path):
    db = tmp_path / "history.sqlite"
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "bench", "--target", sim_url, "--prompts", str(prompts_file)]
        + ["--plan", str(FAST_PLAN), "--start-rate", "5", "--step-seconds", "2", "--min-requests", "10"]
        + ["--ignore-eos", "--db", str(db)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith("step "):
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "stopped by Ctrl+C" in out and "Traceback" not in err
    assert any(row.strip().startswith("5.00") for row in out.splitlines())
    with sqlite3.connect(db) as store:
        (detail,) = store.execute("SELECT detail FROM events").fetchone()
    assert json.loads(detail)["interrupted"] is True


def test_not_an_openai_server_and_an_unreachable_one(sim_url, prompts_file):
    common = ["--prompts", str(prompts_file), "--ttft", "1", "--tpot", "0.1", "--no-history"]
    unreachable = bench("--target", "http://127.0.0.1:9", *common, timeout=60)
    assert unreachable.returncode == 1
    assert unreachable.stderr.strip().count("\n") == 0
    assert "cannot be reached" in unreachable.stderr
    not_openai = bench("--target", sim_url + "/metrics/nothing", *common, timeout=60)
    assert not_openai.returncode == 2, not_openai.stderr
    assert "expected an OpenAI-compatible server" in not_openai.stderr
    assert not_openai.stderr.strip().count("\n") == 0


@pytest.mark.parametrize(
    "content, args, expected",
    [
        ("", [], "no prompts (the file is empty)"),
        ('{"prompt": "ok"}\n{"prompt": \n', [], "prompts.jsonl:2: not JSON"),
        ('{"prompt": "ok"}\n', ["--no-plan"], "no latency target for --ttft and --tpot"),
        ('{"prompt": "ok"}\n', ["--write-plan-alone"], "--write-plan needs --plan PLAN"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, args, expected):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(content)
    words = ["--target", "http://127.0.0.1:9", "--prompts", str(prompts), "--no-history"]
    if "--no-plan" in args:
        pass
    elif "--write-plan-alone" in args:
        words += ["--ttft", "1", "--tpot", "1", "--write-plan"]
    else:
        words += ["--plan", str(FAST_PLAN)]
    done = bench(*words, timeout=60)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("capcon bench: ")


def test_throughput_mode_gives_the_replicas_tokens_per_second(sim_url, prompts_file, tmp_path):
    from console.bench.simulated import simulated_throughput

    db = tmp_path / "history.sqlite"
    plan = tmp_path / "plan.yaml"
    plan.write_text(FAST_PLAN.read_text())
    done = bench(
        "--target", sim_url, "--prompts", str(prompts_file), "--throughput", "--min-requests", "48",
        "--ignore-eos", "--json", "--db", str(db), "--plan", str(plan), "--write-plan",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "throughput"
    assert report["completed"] == 48 and report["output_tokens"] == 48 * ANSWER_TOKENS
    assert report["step"]["server"]["running_max"] <= 8  # the replica's batch cap, not the client, paced it
    expected = simulated_throughput(load_plan(FAST_PLAN), [(PROMPT_WORDS, ANSWER_TOKENS, ANSWER_TOKENS)] * 48)
    print(f"throughput: live {report['output_tokens_per_second']:.0f} tok/s, offline engine {expected:.0f} tok/s")
    assert report["output_tokens_per_second"] == pytest.approx(expected, rel=0.15)
    # --write-plan put it beside the capacity, where the planner sizes deferrable work with it.
    written = load_plan(plan).capacity
    assert written.throughput_tokens_per_second == pytest.approx(report["output_tokens_per_second"], rel=1e-3)
    assert written.throughput_source.startswith("capcon bench --throughput ") and "48 requests all at once" in (
        written.throughput_source
    )
    assert written.rps_per_replica == load_plan(FAST_PLAN).capacity.rps_per_replica  # the rest as it was
    assert "wrote throughput" in done.stderr
    with sqlite3.connect(db) as store:
        ((kind,),) = store.execute("SELECT kind FROM events").fetchall()
    assert kind == "bench_throughput"


def test_throughput_mode_refuses_latency_targets(tmp_path, prompts_file):
    done = bench("--target", "http://127.0.0.1:9", "--prompts", str(prompts_file), "--throughput", "--ttft", "1")
    assert done.returncode == 2 and "--ttft with --throughput" in done.stderr


def test_chat_prompts_stream_through_the_chat_endpoint(sim_url, tmp_path):
    """The chat endpoint's TTFT is the replica's prefill at least: the simulator sends the role chunk with the first
    token, and bench times the first chunk with content (it read about 2 ms when the role chunk came on arrival)."""
    prompts = tmp_path / "chat.jsonl"
    with prompts.open("w") as out:
        for i in range(12):
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"question {i} " * 20}]
            out.write(json.dumps({"messages": messages, "max_tokens": ANSWER_TOKENS}) + "\n")
    prompt = count_chat_tokens(messages)  # every prompt is as long
    prefill = Engine(replica_shape(load_plan(FAST_PLAN))).decode_step_seconds(prompt, prompt)
    done = bench(
        "--target", sim_url, "--prompts", str(prompts), "--ttft", "1", "--tpot", "0.1", "--rate", "6",
        "--min-requests", "12", "--step-seconds", "1", "--ignore-eos", "--json", "--no-history",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (step,) = json.loads(done.stdout)["steps"]
    assert step["completed"] == 12 and step["output_tokens"] == 12 * ANSWER_TOKENS
    assert step["server"]["finished"] == 12
    # Each request's first token comes a prefill step after its arrival at the soonest: no client reads it sooner.
    assert step["client"]["ttft_ms_p50"] >= prefill * 1000 > 10


def test_max_concurrency_caps_the_requests_in_flight(sim_url, prompts_file):
    done = bench(
        "--target", sim_url, "--prompts", str(prompts_file), "--throughput", "--max-concurrency", "2",
        "--min-requests", "12", "--scrape-every", "0.2", "--ignore-eos", "--json", "--no-history",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["completed"] == 12 and report["max_concurrency"] == 2
    server = report["step"]["server"]
    # At most 2 in flight: running, or waiting for the next engine step to schedule them.
    assert server["scrapes"] >= 3 and server["running_max"] == 2 and server["waiting_max"] <= 2
