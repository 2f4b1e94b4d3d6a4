"""`capcon bench --diagnose` against the real vLLM on CPU: no GPU and no dcgm-exporter page, so every rerun's GPU
counters are unknown (null, never 0), and the diagnosis is made from the reruns alone.

Kept short for the lane's time: one step at a rate the tiny model carries on CPU, then its four reruns, 16
requests each (about a minute on 2 cores)."""

from __future__ import annotations

import json

import pytest

from .test_real_bench import capcon_bench, write_prompts

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(900)]

LIMITS = ("memory", "compute", "scheduler", "queueing", "unknown")
CHANGES = ["baseline", "concurrency_half", "concurrency_batch", "lengths_half", "lengths_double"]


def test_diagnose_on_cpu_vllm_shows_the_gpu_unknown_and_concludes_from_the_reruns(vllm_server, tmp_path, report):
    count, rate = 16, 2.0
    prompts = write_prompts(tmp_path / "prompts.json", 200, words=20)
    done = capcon_bench(vllm_server.base_url, prompts, rate, count, "--diagnose", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    diagnosis = answer["diagnose"]
    assert diagnosis is not None, done.stderr[-2000:]
    rows = {r["change"]: r for r in diagnosis["reruns"]}
    assert list(rows) == CHANGES
    assert diagnosis["limit"] in LIMITS and diagnosis["reasons"]
    for row in rows.values():
        gpu = row["gpu"]
        # A real vLLM names no GPU page: unknown, never 0, and no reading of one.
        assert (gpu["sm_active"], gpu["tensor_active"], gpu["dram_active"], gpu["fb_used_bytes"]) == (None,) * 4
        assert gpu["readings"] == 0
    baseline = rows["baseline"]
    assert baseline["sent"] >= count and baseline["good"] > 0  # the reruns were really run against vLLM
    assert all(step["gpu"]["sm_active"] is None for step in answer["steps"])
    # The conclusion rests on the reruns' own figures, not on a GPU counter, and says the counters are unknown.
    assert any("GPU counters unknown" in reason for reason in diagnosis["reasons"]), diagnosis["reasons"]
    assert not any("DRAM active" in reason or "tensor active" in reason for reason in diagnosis["reasons"])
    report(
        f"real vLLM on CPU, --diagnose at {rate:g} rps: limit {diagnosis['limit']} "
        f"(moved by {', '.join(diagnosis['moved_by']) or 'nothing'}); {' '.join(diagnosis['reasons'])}"
    )
