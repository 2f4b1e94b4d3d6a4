"""`capcon bench --diagnose` against a simulated replica (`capcon sim`, its own process), as a user runs it.

The memory-bound plan (long contexts, a small KV budget) at a rate it holds: the reruns read the
replica's /metrics and its GPU page (which the simulator names in /version), the report names
memory with the evidence table, in text and JSON, and the history holds the reruns beside the run.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from console.bench.diagnosis import GpuFigures
from console.bench.gpu_watch import gpu_step, sim_gpu_page
from console.fleet.gpus import ReplicaGpu
from tests.sim.running import start_sim

from .conftest import REPO

FIXTURES = Path(__file__).resolve().parent / "fixtures"
pytestmark = pytest.mark.timeout(240)


def bench(*args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def write_prompts(path: Path, words: int, max_tokens: int, count: int = 200) -> Path:
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps({"prompt": " ".join(f"w{i}x{j}" for j in range(words)), "max_tokens": max_tokens}))
            out.write("\n")
    return path


def simulated(plan: str):
    process, urls, _ = start_sim(str(FIXTURES / plan), "--replicas", "1", "--traffic", "off", "--status-every", "0")
    return process, urls[0]


def stopped(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.mark.slow  # about 15 s: six steps in wall time; the same reruns in simulated time are in the default lane
def test_a_memory_bound_replica_is_named_memory_with_its_gpu_counters(tmp_path):
    process, url = simulated("memory-bound.yaml")
    try:
        prompts = write_prompts(tmp_path / "long.jsonl", 3000, 64)
        db = tmp_path / "history.sqlite"
        done = bench(
            "--target", url, "--prompts", str(prompts), "--plan", str(FIXTURES / "memory-bound.yaml"),
            "--rate", "15", "--step-seconds", "1", "--min-requests", "24", "--ignore-eos", "--diagnose",
            "--json", "--db", str(db),
        )  # fmt: skip
    finally:
        stopped(process)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    diagnosis = report["diagnose"]
    assert diagnosis["limit"] == "memory", diagnosis["reasons"]
    rows = {r["change"]: r for r in diagnosis["reruns"]}
    assert list(rows) == ["baseline", "concurrency_half", "concurrency_batch", "lengths_half", "lengths_double"]
    assert "lengths_double" in diagnosis["moved_by"]
    assert rows["lengths_double"]["preemptions"] > 0 and rows["lengths_double"]["kv_usage_max"] >= 0.9
    assert rows["concurrency_batch"]["what"] == "at most 64 in flight (batch size)"
    # The GPU's own counters came from the simulator's dcgm-exporter page, read beside /metrics.
    gpu = rows["baseline"]["gpu"]
    assert gpu["readings"] >= 1 and 0 < gpu["dram_active"] <= 1 and gpu["sm_active"] > 0
    assert report["steps"][0]["gpu"]["readings"] >= 1
    with sqlite3.connect(db) as store:
        events = store.execute("SELECT kind, detail FROM events ORDER BY id").fetchall()
    assert [kind for kind, _ in events] == ["bench_run", "bench_diagnose"]
    assert json.loads(events[1][1])["limit"] == "memory"


@pytest.mark.slow  # about two minutes: a sweep at 2 rps of 4,000-word prompts, then the reruns
def test_a_compute_bound_replica_is_named_compute_after_a_sweep(tmp_path):
    process, url = simulated("compute-bound.yaml")
    try:
        prompts = write_prompts(tmp_path / "long.jsonl", 4000, 16)
        done = bench(
            "--target", url, "--prompts", str(prompts), "--plan", str(FIXTURES / "compute-bound.yaml"),
            "--start-rate", "1", "--factor", "1.5", "--precision", "0.1", "--step-seconds", "8",
            "--min-requests", "16", "--ignore-eos", "--diagnose", "--no-history",
        )  # fmt: skip
    finally:
        stopped(process)
    assert done.returncode == 0, done.stderr
    assert "limit: compute" in done.stdout, done.stdout
    assert "prompts and outputs at double length" in done.stdout


def test_diagnose_needs_a_sweep_not_the_throughput_mode():
    done = bench("--target", "http://127.0.0.1:9", "--throughput", "--diagnose", "--no-history")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--diagnose with --throughput" in done.stderr


def test_a_bad_dcgm_address_is_refused_in_one_line():
    done = bench("--target", "http://127.0.0.1:9", "--ttft", "1", "--tpot", "0.1", "--dcgm", "ftp://x/metrics")
    assert done.returncode != 0 and "Traceback" not in done.stderr


def test_the_simulators_gpu_page_is_taken_only_on_the_replicas_own_host():
    base = "http://127.0.0.1:8000"
    assert sim_gpu_page({"capcon_sim": {"gpu_page": "http://127.0.0.1:9400/metrics"}}, base) == (
        "http://127.0.0.1:9400/metrics"
    )
    for said in (
        {"version": "0.32.0"},
        {"capcon_sim": {"gpu_page": "http://169.254.169.254/latest"}},
        {"capcon_sim": "x"},
        ["not", "a", "dict"],
        {"capcon_sim": {"gpu_page": "file:///etc/passwd"}},
    ):
        assert sim_gpu_page(said, base) is None


def test_a_steps_gpu_figures_are_means_and_unknown_stays_unknown():
    readings = [
        ReplicaGpu(0.8, 0.2, 0.6, 1e9, gpus=1, how="host h"),
        ReplicaGpu(0.6, None, 0.4, 1e9, gpus=1, how="host h"),
    ]
    figures = gpu_step(readings)
    assert figures.sm_active == pytest.approx(0.7) and figures.tensor_active is None and figures.readings == 2
    assert gpu_step([ReplicaGpu(how="no GPU of host h on the dcgm-exporter pages")]) == GpuFigures(
        note="no GPU of host h on the dcgm-exporter pages"
    )
