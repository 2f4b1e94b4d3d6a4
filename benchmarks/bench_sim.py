"""CPU share of the demo fleet: 5 simulated replicas at the plan's peak, scraped once a second.

Runs `capcon sim` in its own process (in-process traffic, as the demo uses),
scrapes every replica's /metrics once a second from this process as the console
would, and reads the fleet process's CPU time from /proc. Prints the share of
one core it used (CPU seconds per wall second), beside the same fleet with no
traffic measured in the same run (the floor: idle servers and scrapes).

    .venv/bin/python benchmarks/bench_sim.py [--plan PLAN] [--seconds 20] [--replicas 5] [--traffic http]

Target: under 0.30 of one core.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def measure(plan: str, replicas: int, seconds: float, traffic: str) -> tuple[float, float, float]:
    """(CPU share of one core, generated tokens/s, requests/s finished) of one fleet run."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "console",
            "sim",
            plan,
            "--replicas",
            str(replicas),
            "--traffic",
            traffic,
            "--time-scale",
            "1",
            "--start",
            "mon 10:00",
            "--status-every",
            "0",
            "--seed",
            "7",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        urls = []
        for line in process.stdout:
            match = re.match(r"\s+(http://127\.0\.0\.1:\d+)$", line.rstrip())
            if match:
                urls.append(match.group(1))
            if line.startswith("Ctrl+C"):
                break
        with httpx.Client(timeout=5) as client:
            time.sleep(3.0)  # let the batch fill
            tokens0 = _total(client, urls, "vllm:generation_tokens_total")
            done0 = _total(client, urls, "vllm:request_success_total")
            cpu0, wall0 = cpu_seconds(process.pid), time.monotonic()
            while time.monotonic() - wall0 < seconds:
                time.sleep(1.0)
                for url in urls:
                    client.get(f"{url}/metrics")
            cpu1, wall1 = cpu_seconds(process.pid), time.monotonic()
            tokens1 = _total(client, urls, "vllm:generation_tokens_total")
            done1 = _total(client, urls, "vllm:request_success_total")
        wall = wall1 - wall0
        return (cpu1 - cpu0) / wall, (tokens1 - tokens0) / wall, (done1 - done0) / wall
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def _total(client: httpx.Client, urls: list[str], name: str) -> float:
    total = 0.0
    for url in urls:
        page = client.get(f"{url}/metrics").text
        total += sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)", page, re.M))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", default=str(REPO / "plans" / "internal-assistant-18rps.yaml"))
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--traffic",
        choices=("inprocess", "http"),
        default="inprocess",
        help="inprocess (what the demo uses) or http (every request a real API call)",
    )
    args = parser.parse_args()
    idle, _, _ = measure(args.plan, args.replicas, args.seconds, "off")
    busy, tokens, requests = measure(args.plan, args.replicas, args.seconds, args.traffic)
    print(
        f"plan {Path(args.plan).name}, {args.replicas} replicas at the Monday 10:00 peak, scraped every 1 s, "
        f"{args.seconds:g} s, traffic {args.traffic}"
    )
    print(f"  simulated load: {requests:.1f} requests/s finished, {tokens:,.0f} generated tokens/s")
    print(f"  fleet CPU, no traffic (baseline): {idle:.3f} of one core")
    print(
        f"  fleet CPU, demo load:             {busy:.3f} of one core (target < 0.30); "
        f"{busy / max(idle, 1e-3):.1f}x the idle fleet"
    )
    return 0 if busy < 0.30 else 1


if __name__ == "__main__":
    sys.exit(main())
