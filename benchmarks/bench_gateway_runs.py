"""The gateway's cost over several runs of benchmarks/bench_gateway.py: min, median and max, with the load beside.

One run of bench_gateway.py alternates its paths (direct, the gateway, vllm-router) in the same rounds, so drift
hits them alike; a second run on the same machine can still differ by a factor when something else wakes up.
This runs it `--runs` times and prints each figure's spread, and the machine's 1-minute load average before each
run, so a figure in the README can be checked against a rerun.

    .venv/bin/python benchmarks/bench_gateway_runs.py [--runs 3] [--vllm-router] [--uvloop] [-- bench_gateway args]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# "<path>: added TTFT p50 +1.90 ms (x1.050), p99 +3.40 ms (x1.020); ... CPU per 1k tokens x1.230 the ..."
ADDED = re.compile(
    r"^(?P<path>.+?): added TTFT p50 (?P<p50>[-+\d.]+) ms .*?p99 (?P<p99>[-+\d.]+) ms .*?CPU per 1k tokens x(?P<cpu>[\d.]+)"
)
# "<path> against vllm-router: TTFT p50 x1.0, p99 x1.16; inter-chunk p99 x1.0; CPU per 1k tokens x1.66"
AGAINST = re.compile(
    r"^(?P<path>.+?) against vllm-router: .*?p99 x(?P<p99>[\d.]+);.*?CPU per 1k tokens x(?P<cpu>[\d.]+)"
)


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--vllm-router", action="store_true")
    parser.add_argument("--uvloop", action="store_true")
    args, rest = parser.parse_known_args()
    extra = [a for a in rest if a != "--"]
    if args.vllm_router:
        extra.append("--vllm-router")
    if args.uvloop:
        extra.append("--uvloop")
    added: dict[str, dict[str, list[float]]] = {}
    against: dict[str, dict[str, list[float]]] = {}
    loads = []
    for run in range(args.runs):
        loads.append(os.getloadavg()[0])
        out = subprocess.run(
            [sys.executable, str(HERE / "bench_gateway.py"), *extra], capture_output=True, text=True, check=True
        ).stdout
        print(f"run {run + 1} of {args.runs} (1-minute load {loads[-1]:.2f} before it)")
        for line in out.splitlines():
            if m := ADDED.match(line):
                figures = added.setdefault(m["path"], {"p50": [], "p99": [], "cpu": []})
                for key in ("p50", "p99", "cpu"):
                    figures[key].append(float(m[key]))
                print("  " + line)
            elif m := AGAINST.match(line):
                figures = against.setdefault(m["path"], {"p99": [], "cpu": []})
                for key in ("p99", "cpu"):
                    figures[key].append(float(m[key]))
                print("  " + line)
    print(f"\n{args.runs} runs, 1-minute load before each: {', '.join(f'{x:.2f}' for x in loads)}")
    print("min / median / max:")
    for path, figures in added.items():
        print(
            f"  {path}: added TTFT p50 {spread(figures['p50'])} ms, p99 {spread(figures['p99'])} ms; "
            f"CPU per 1k tokens x{spread(figures['cpu'])} the fleet's own"
        )
    for path, figures in against.items():
        print(
            f"  {path} against vllm-router: TTFT p99 x{spread(figures['p99'])}; CPU per 1k tokens x{spread(figures['cpu'])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
