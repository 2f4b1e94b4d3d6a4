"""What the gateway adds: 200 concurrent streams straight to the simulated replicas, then through `capcon gateway`.

One run, three processes: the simulated fleet (`capcon sim --traffic off`), the gateway
(`python -m console.gateway`) and this script as the client (aiohttp, a closed loop of
`--streams` workers, each sending streamed completions of `--tokens` tokens with
`ignore_eos`). Rounds alternate direct / gateway in pass mode / gateway in bounded_queue
mode (cap high enough that nothing waits: the policy decision and the lease are the
extra work), so drift on a noisy machine hits all three alike. Per path it prints TTFT
p50 and p99, the p99 gap between chunks, and CPU seconds per 1,000 streamed tokens of the
process in the middle (the gateway; for the direct path, the simulated fleet itself, as
the baseline), with the added milliseconds and the ratios against the direct path. Last,
what one admission decision costs in-process.

    .venv/bin/python benchmarks/bench_gateway.py [--streams 200] [--tokens 32] [--rounds 3] [--uvloop] [--vllm-router]
        [--workers N]

`--workers N` adds the gateway in pass with N worker processes on one port; its CPU is the supervisor's and the
workers' together.

Targets (issue 13): p99 added TTFT under 5 ms. `--vllm-router` also tries vllm-router 0.1.17
(installed from PyPI into a venv under ~/.cache/capcon-bench), skipped with the reason if it
cannot be installed or started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
from peer_venv import installed_peer

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
# A short prompt: the simulated prefill stays small, so TTFT shows the path rather than the replica's batch.
PROMPT = "capacity queue token latency"
ROUTER_VERSION = "0.1.17"


def cpu_seconds(pid: int) -> float:
    """CPU of `pid` and of the processes it started (a gateway's --workers), living ones read from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / TICKS
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return own + sum(cpu_seconds(int(child)) for child in children)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def start(argv: list[str], ready: str, env: dict | None = None) -> tuple[subprocess.Popen, list[str]]:
    process = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip())
        if line.startswith(ready):
            return process, lines
    raise RuntimeError(f"{argv[:4]} ended before it was ready: {lines[-3:]}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


class Round:
    def __init__(self) -> None:
        self.ttft: list[float] = []
        self.gaps: list[float] = []
        self.tokens = 0
        self.failed = 0
        self.cpu = 0.0  # the process in the middle (the gateway; the fleet for the direct path)
        self.fleet_cpu = 0.0
        self.client_cpu = 0.0
        self.wall = 0.0

    def merge(self, other: Round) -> None:
        self.ttft += other.ttft
        self.gaps += other.gaps
        self.tokens += other.tokens
        self.failed += other.failed
        self.cpu += other.cpu
        self.fleet_cpu += other.fleet_cpu
        self.client_cpu += other.client_cpu
        self.wall += other.wall


async def drive(url: str, model: str, streams: int, per_worker: int, tokens: int) -> Round:
    result = Round()
    body = {"model": model, "prompt": PROMPT, "max_tokens": tokens, "ignore_eos": True, "stream": True}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:

        async def worker(index: int) -> None:
            await asyncio.sleep(index * 0.5 / streams)  # spread the first arrivals over half a second
            for _ in range(per_worker):
                sent = time.perf_counter()
                last = None
                try:
                    async with session.post(url + "/v1/completions", json=body) as response:
                        if response.status != 200:
                            await response.read()
                            result.failed += 1
                            continue
                        async for line in response.content:
                            if not line.startswith(b"data: {"):
                                continue
                            now = time.perf_counter()
                            if last is None:
                                result.ttft.append(now - sent)
                            else:
                                result.gaps.append(now - last)
                            last = now
                            result.tokens += 1
                except (TimeoutError, aiohttp.ClientError):
                    result.failed += 1

        await asyncio.gather(*(worker(i) for i in range(streams)))
    return result


def measure(url: str, pid: int, model: str, args, fleet_pid: int, run=None) -> Round:
    before, fleet_before, client_before, wall_before = (
        cpu_seconds(pid),
        cpu_seconds(fleet_pid),
        _own_cpu(),
        time.monotonic(),
    )
    result = asyncio.run(run() if run else drive(url, model, args.streams, args.per_worker, args.tokens))
    result.cpu = cpu_seconds(pid) - before
    result.fleet_cpu = cpu_seconds(fleet_pid) - fleet_before
    result.client_cpu = _own_cpu() - client_before
    result.wall = time.monotonic() - wall_before
    return result


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def decision_cost() -> list[tuple[int, float]]:
    """Microseconds per admission decision (the Load built as the gateway builds it, then admit)."""
    from console.overflow.admission import Load, ReplicaLoad, admit
    from console.overflow.policy import Policy

    policy = Policy(mode="bounded_queue", max_queue=64, max_inflight_per_replica=256)
    out = []
    for replicas in (2, 10, 100):
        names = [f"10.0.0.{i}:8000" for i in range(replicas)]
        flights = [i % 7 for i in range(replicas)]
        count = 20_000 if replicas < 100 else 4_000
        started = time.perf_counter()
        for _ in range(count):
            load = Load(tuple(ReplicaLoad(n, f, True) for n, f in zip(names, flights)), completions_per_second=5.0)
            admit(policy, load, "interactive", 0.0, None)
        out.append((replicas, (time.perf_counter() - started) / count * 1e6))
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vllm_router(urls: list[str], args) -> tuple[subprocess.Popen | None, str]:
    """Install vllm-router into its own venv and start it in front of `urls`: (process, url) or (None, reason)."""
    binary, why = installed_peer("vllm-router", ROUTER_VERSION, "vllm-router")
    if binary is None:
        return None, why
    port = free_port()
    process = subprocess.Popen(
        [str(binary), "--worker-urls", *urls, "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None, f"vllm-router exited with {process.returncode} at start"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    return None, "vllm-router did not listen within 30 s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", default=str(REPO / "plans" / "assistant-70b.yaml"))
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--streams", type=int, default=200, help="concurrent streams (default 200)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per stream (default 32)")
    parser.add_argument("--per-worker", type=int, default=3, help="streams each worker sends per round (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each path, alternated (default 3)")
    parser.add_argument(
        "--uvloop", action="store_true", help="also the gateway on uvloop (--loop uvloop), if uvloop is importable"
    )
    parser.add_argument(
        "--vllm-router", action="store_true", help=f"also vllm-router {ROUTER_VERSION} (installed from PyPI)"
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="also the gateway in pass with this many --workers (default: not run)"
    )
    args = parser.parse_args()

    sim, lines = start(
        [
            sys.executable,
            "-m",
            "console",
            "sim",
            args.plan,
            "--replicas",
            str(args.replicas),
            "--traffic",
            "off",
            "--time-scale",
            "1",
            "--status-every",
            "0",
        ],
        "Ctrl+C",
    )
    processes = [sim]
    try:
        urls = [m.group(1) for m in (re.match(r"\s+(http://127\.0\.0\.1:\d+)$", x) for x in lines) if m]
        model = re.search(r"replica\(s\) of (\S+) on", "\n".join(lines))[1]
        targets = [x for url in urls for x in ("--target", url)]
        paths: dict[str, tuple[str, int]] = {"direct": ("", sim.pid)}
        gateway_argv = [sys.executable, "-m", "console.gateway", *targets, "--listen", "127.0.0.1:0"]
        for name, extra in (
            ("gateway pass", ["--mode", "pass", "--loop", "asyncio"]),
            ("gateway bounded_queue", ["--mode", "bounded_queue", "--max-inflight", "512", "--loop", "asyncio"]),
        ):
            process, out = start(gateway_argv + extra, "Ctrl+C")
            processes.append(process)
            paths[name] = (re.search(r"listening on (http://\S+)", "\n".join(out))[1], process.pid)
        skipped = []
        if args.workers > 1:
            name = f"gateway pass, {args.workers} workers"
            process, out = start(
                gateway_argv + ["--mode", "pass", "--loop", "asyncio", "--workers", str(args.workers)], "Ctrl+C"
            )
            processes.append(process)
            paths[name] = (re.search(r"listening on (http://\S+)", "\n".join(out))[1], process.pid)
        if args.uvloop:
            try:
                import uvloop  # noqa: F401 - only whether it imports
            except ImportError:
                skipped.append("gateway pass on uvloop: skipped (uvloop is not importable)")
            else:
                process, out = start(gateway_argv + ["--mode", "pass", "--loop", "uvloop"], "Ctrl+C")
                processes.append(process)
                paths["gateway pass on uvloop"] = (
                    re.search(r"listening on (http://\S+)", "\n".join(out))[1],
                    process.pid,
                )
        if args.vllm_router:
            router, found = vllm_router(urls, args)
            if router is None:
                skipped.append(f"vllm-router {ROUTER_VERSION}: skipped ({found})")
            else:
                processes.append(router)
                paths[f"vllm-router {ROUTER_VERSION}"] = (found, router.pid)
        # Direct: round robin over the replicas by sending each worker group to one; the sim's own CPU is the baseline.
        results = {name: Round() for name in paths}
        for _ in range(args.rounds):
            for name, (url, pid) in paths.items():
                # Warm the path at full concurrency first, as a gateway under load keeps its upstream connections.
                for u in [url] if url else urls:
                    asyncio.run(drive(u, model, args.streams // (1 if url else len(urls)), 1, 2))
                if name == "direct":  # each replica gets its share of the workers; the fleet's own CPU is the baseline

                    async def all_replicas():
                        parts = await asyncio.gather(
                            *(drive(u, model, args.streams // len(urls), args.per_worker, args.tokens) for u in urls)
                        )
                        merged = Round()
                        for part in parts:
                            merged.merge(part)
                        return merged

                    result = measure("", pid, model, args, sim.pid, run=all_replicas)
                else:
                    result = measure(url, pid, model, args, sim.pid)
                results[name].merge(result)
    finally:
        for process in reversed(processes):
            stop(process)

    base = results["direct"]
    print(
        f"plan {Path(args.plan).name}, {args.replicas} simulated replicas, {args.streams} concurrent streams of "
        f"{args.tokens} tokens, {args.rounds} rounds of {args.streams * args.per_worker} streams per path, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{'path':<24} {'TTFT p50':>10} {'TTFT p99':>10} {'gap p99':>10} {'CPU s/1k tok':>13} {'failed':>7}"
        f"   cores used: middle / fleet / client"
    )
    for name, r in results.items():
        wall = max(r.wall, 1e-9)
        middle = r.cpu / wall if name != "direct" else 0.0
        print(
            f"{name:<24} {percentile(r.ttft, 0.5) * 1e3:>8.2f}ms {percentile(r.ttft, 0.99) * 1e3:>8.2f}ms "
            f"{percentile(r.gaps, 0.99) * 1e3:>8.2f}ms {r.cpu / max(r.tokens, 1) * 1e3:>13.4f} {r.failed:>7}"
            f"   {middle:.2f} / {r.fleet_cpu / wall:.2f} / {r.client_cpu / wall:.2f}"
        )
    for name, r in results.items():
        if name == "direct":
            continue
        added50 = (percentile(r.ttft, 0.5) - percentile(base.ttft, 0.5)) * 1e3
        added99 = (percentile(r.ttft, 0.99) - percentile(base.ttft, 0.99)) * 1e3
        print(
            f"{name}: added TTFT p50 {added50:+.2f} ms (x{percentile(r.ttft, 0.5) / percentile(base.ttft, 0.5):.3f}), "
            f"p99 {added99:+.2f} ms (x{percentile(r.ttft, 0.99) / percentile(base.ttft, 0.99):.3f}); "
            f"inter-chunk p99 x{percentile(r.gaps, 0.99) / percentile(base.gaps, 0.99):.3f}; "
            f"CPU per 1k tokens x{(r.cpu / max(r.tokens, 1)) / (base.cpu / max(base.tokens, 1)):.3f} "
            f"the simulated fleet's own"
        )
    router = results.get(f"vllm-router {ROUTER_VERSION}")
    if router is not None:
        for name, r in results.items():
            if name.startswith("gateway"):
                print(
                    f"{name} against vllm-router: TTFT p50 x{percentile(r.ttft, 0.5) / percentile(router.ttft, 0.5):.3f}, "
                    f"p99 x{percentile(r.ttft, 0.99) / percentile(router.ttft, 0.99):.3f}; inter-chunk p99 "
                    f"x{percentile(r.gaps, 0.99) / percentile(router.gaps, 0.99):.3f}; CPU per 1k tokens "
                    f"x{(r.cpu / max(r.tokens, 1)) / (router.cpu / max(router.tokens, 1)):.3f}"
                )
    for line in skipped:
        print(line)
    costs = ", ".join(f"{n} replicas {us:.1f} us" for n, us in decision_cost())
    print(f"one admission decision (Load built + admit), in-process: {costs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
