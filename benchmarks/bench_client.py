"""What measuring costs: CPU seconds per 1,000 streamed tokens of `capcon bench` and of `vllm bench serve`.

On a 2-core machine a benchmark client that burns a core measures itself. One run, one
simulated replica (`capcon sim --traffic off`, the fast plan of tests/bench), the same
prompts (a ShareGPT-style file both read), the same rate and answer length (ignore_eos).
While a client runs, its process's CPU (user + system, /proc/PID/stat) and the replica's
`vllm:generation_tokens_total` are sampled every 50 ms; the cost is the CPU spent between
the first and the last sample that saw tokens stream, over the tokens streamed between
them: neither tool's start-up (vllm imports torch, seconds of CPU that vary by more than
the whole load costs) nor its report is counted. Rounds alternate the two clients so drift
hits both alike.

    .venv/bin/python benchmarks/bench_client.py [--rate 20] [--requests 300] [--rounds 2]

`vllm bench serve` comes from the real-vLLM lane's environment (tests/real/vllm_harness.py
installs it); without it only capcon's figure is printed. Its tokenizer is the lane's tiny
model, made once into a scratch folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.sim.running import start_sim as sim_process

PLAN = REPO / "tests" / "bench" / "fixtures" / "fast-replica.yaml"
ANSWER = 16
BENCH_SERVE = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def start_sim() -> tuple[subprocess.Popen, str]:
    try:
        process, urls, _ = sim_process(
            str(PLAN), "--replicas", "1", "--traffic", "off", "--status-every", "0", stderr=subprocess.DEVNULL
        )
    except AssertionError:
        raise SystemExit("capcon sim did not start") from None
    if not urls:
        process.kill()
        raise SystemExit("capcon sim did not start")
    return process, urls[0]


TICKS = os.sysconf("SC_CLK_TCK")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the replica is on loopback


def process_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def streamed_tokens(url: str) -> float:
    with NO_PROXY.open(url + "/metrics", timeout=5) as answer:
        page = answer.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", page, re.M))


def cpu_per_thousand(command: list[str], url: str, env: dict | None = None) -> float:
    """CPU seconds per 1,000 tokens the client streamed, over the part of its run that streamed."""
    base = streamed_tokens(url)
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
        samples: list[tuple[float, float]] = []
        while process.poll() is None:
            cpu = process_cpu(process.pid)
            if cpu is not None:
                samples.append((cpu, streamed_tokens(url) - base))
            time.sleep(0.05)
        if process.returncode != 0:
            out.seek(0)
            raise SystemExit(f"{command[:3]} failed: {out.read()[-2000:].decode(errors='replace')}")
    final = max(tokens for _, tokens in samples)
    # From the first sample past a warm-up request's worth (vllm bench serve sends one first) to the first at the end.
    start = next(i for i, (_, tokens) in enumerate(samples) if tokens > 2 * ANSWER)
    end = next(i for i, (_, tokens) in enumerate(samples) if tokens >= final)
    (cpu_start, tokens_start), (cpu_end, tokens_end) = samples[start], samples[end]
    return (cpu_end - cpu_start) / (tokens_end - tokens_start) * 1000


def capcon(url: str, prompts: Path, rate: float, requests: int) -> float:
    command = [sys.executable, "-m", "console", "bench", "--target", url, "--prompts", str(prompts)]
    command += ["--rate", str(rate), "--min-requests", str(requests), "--step-seconds", "1", "--ignore-eos"]
    command += ["--ttft", "60", "--tpot", "10", "--no-history", "--json"]
    return cpu_per_thousand(command, url)


def vllm(python: Path, tokenizer: Path, url: str, prompts: Path, rate: float, requests: int, out: Path) -> float:
    command = [
        str(python), "-c", BENCH_SERVE,
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", "tiny-8b", "--tokenizer", str(tokenizer),
        "--dataset-name", "sharegpt", "--dataset-path", str(prompts), "--disable-shuffle",
        "--sharegpt-output-len", str(ANSWER), "--ignore-eos", "--num-prompts", str(requests),
        "--request-rate", str(rate), "--seed", "0", "--disable-tqdm",
        "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    env.pop("PYTHONPATH", None)
    return cpu_per_thousand(command, url, env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second (default 20)")
    parser.add_argument("--requests", type=int, default=300, help="requests per run (default 300)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="capcon-bench-client-"))
    prompts = scratch / "prompts.json"
    conversations = [
        {"conversations": [{"from": "human", "value": " ".join(f"w{i}x{j}" for j in range(64))},
                           {"from": "gpt", "value": " ".join(["answer"] * ANSWER)}]}
        for i in range(args.requests)
    ]  # fmt: skip
    prompts.write_text(json.dumps(conversations))
    from tests.real.vllm_harness import make_model, venv_dir

    python = venv_dir() / "bin" / "python"
    tokenizer = None
    if python.exists():
        tokenizer = make_model(python, scratch, scratch / "model.log")
    else:
        print(f"vllm bench serve: not installed ({venv_dir()}); capcon's figure alone")
    sim, url = start_sim()
    figures: dict[str, list[float]] = {"capcon bench": [], "vllm bench serve": []}
    try:
        for round_number in range(args.rounds):
            figures["capcon bench"].append(capcon(url, prompts, args.rate, args.requests))
            if tokenizer is not None:
                result = scratch / "result.json"
                figures["vllm bench serve"].append(
                    vllm(python, tokenizer, url, prompts, args.rate, args.requests, result)
                )
            print(f"round {round_number + 1}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in figures.items() if v))
    finally:
        sim.send_signal(signal.SIGINT)
        sim.wait(30)
    print(f"\nCPU seconds per 1,000 streamed tokens at {args.rate:g} rps, {ANSWER}-token answers (best of rounds):")
    for name, values in figures.items():
        if values:
            print(f"  {name:18} {min(values):.3f}")
    if figures["vllm bench serve"]:
        ratio = min(figures["capcon bench"]) / min(figures["vllm bench serve"])
        print(f"  capcon / vllm      {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
