"""benchmarks/bench_history.py in its --quick mode: it runs, and its sizes hang together (no time is asserted)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.metrics.pages import REPO, SAMPLES, V032_SMALL_KV

pytestmark = pytest.mark.timeout(120)


def figure(output: str, key: str) -> float:
    found = re.search(rf"^{key}: ([0-9.]+)", output, re.MULTILINE)
    assert found, f"{key} missing from the benchmark's output:\n{output}"
    return float(found.group(1))


def test_the_quick_benchmark_runs_and_reports_every_figure():
    page = SAMPLES / V032_SMALL_KV
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_history.py"), str(page), "--quick"],
        check=False,
        capture_output=True,
        text=True,
        timeout=100,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    every_second, every_fifth = figure(out, "bytes_per_replica_day_1s"), figure(out, "bytes_per_replica_day_5s")
    rollups = figure(out, "bytes_per_replica_day_rollups")
    assert 4.0 < every_second / every_fifth < 6.0, "five times the samples take about five times the room"
    assert rollups < every_fifth
    assert float(re.search(r"histogram bytes per sample: .*ratio_vs_json ([0-9.]+)", out)[1]) < 1.0
    assert figure(out, "write_cpu_per_sample") > 0 and figure(out, "open_seconds") > 0
    assert "index 180 polls" in out, "the open measure indexes every recorded poll"


def test_a_missing_page_is_a_one_line_error(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_history.py"), str(tmp_path / "none.txt"), "--quick"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no such page" in done.stderr
