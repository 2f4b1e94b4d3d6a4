"""benchmarks/bench_fleet_scale.py on a small fleet past the top-k limit: it runs through real HTTP (gzip, the
long detail queries as POST) and reports every figure; no time is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def test_the_benchmark_reports_queries_bytes_and_flags_for_each_case():
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_fleet_scale.py"), "--sizes", "600,1200", "--no-console"]
        + ["--refreshes", "1"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"^\s+\d+\s+(yes|no)\s", line)]
    assert [(r[0], r[1]) for r in rows] == [("600", "no"), ("600", "yes"), ("1200", "no"), ("1200", "yes")]
    for replicas, flagged, cpu, rss, queries, kb_sent, mb_json, flags in rows:
        assert queries == "8", "past the limit a refresh is the overview (6) and the detail (2)"
        assert float(cpu) > 0 and float(rss) > 0 and float(kb_sent) > 0 and float(mb_json) > 0
        assert int(flags) == (int(replicas) if flagged == "yes" else 0)  # every replica waiting: a flag each
    ratios = re.findall(r"^ratio_1.2k_vs_0.6k_(unflagged|flagged): ([0-9.]+)", done.stdout, re.MULTILINE)
    assert [kind for kind, _ratio in ratios] == ["unflagged", "flagged"] and all(float(r) > 0 for _k, r in ratios)
