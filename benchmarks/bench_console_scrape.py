"""The whole console scraping N replicas directly: CPU seconds per refresh, in tmux, against vllm-htop.

    .venv/bin/python benchmarks/bench_console_scrape.py [--targets 200] [--seconds 30] [--warm 10]
        [--page PAGE] [--rounds 1] [--no-peer]

A child process serves a real vLLM /metrics page (default: the project's vLLM 0.32
capture) on N loopback ports, gzipped when the client asks, as vLLM does (the way
`bench_scrape.py` serves it), and counts the GETs it answers per client (User-Agent).
The real `capcon watch --target ... --interval 2 --no-record` then runs in a 120x40
tmux pane for `--seconds` after `--warm`; its CPU (user + system, every thread) is
read from /proc, and its refreshes are the GETs it sent divided by N. The server's
CPU is not counted.

The peer, in the same run against the same targets: vllm-htop (PyPI 0.5.0, an
htop-style vLLM monitor), installed into its own venv under the benchmark's cache
folder (`$XDG_CACHE_HOME/capcon-bench`), run in the same pane size with
`--table --interval 2`, measured the same way. Without it (no install possible,
`--no-peer`) the ratio line says there is no peer.

Last lines: `cpu_seconds_per_refresh: N` (capcon) and `ratio_vs_vllm_htop: N`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from peer_venv import installed_peer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_PAGE = REPO / "tests" / "fixtures" / "vllm" / "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"
PEER_VERSION = "0.5.0"
TICKS = os.sysconf("SC_CLK_TCK")


# --- the targets ------------------------------------------------------------------


async def serve(page: Path, count: int) -> None:
    """N loopback ports serving `page`, and /stats on the first line's last port; until stdin closes."""
    from aiohttp import web

    body = page.read_bytes()  # noqa: ASYNC240 - once, before the server starts serving
    gzipped = gzip.compress(body)  # once: compressing is server CPU, not the console's
    gets: dict[str, int] = {}

    async def metrics(request: web.Request) -> web.Response:
        agent = request.headers.get("User-Agent", "").split("/")[0] or "?"
        gets[agent] = gets.get(agent, 0) + 1
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=gzipped, content_type="text/plain", headers={"Content-Encoding": "gzip"})
        return web.Response(body=body, content_type="text/plain")

    async def stats(_request: web.Request) -> web.Response:
        return web.json_response(gets)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ports = []
    for _ in range(count + 1):  # the last one is asked for /stats only
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        ports.append(site._server.sockets[0].getsockname()[1])  # aiohttp names no public getter for the port
    print(" ".join(map(str, ports)), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    await runner.cleanup()


class Targets:
    def __init__(self, page: Path, count: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(count), "--page", str(page)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        ports = [int(p) for p in line.split()]
        if len(ports) != count + 1:
            self.close()
            raise RuntimeError(f"the targets did not start (said {line!r})")
        self.ports, self._stats = ports[:-1], ports[-1]

    def gets(self, agent: str) -> int:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self._stats}/stats", timeout=10) as answer:
            return int(json.loads(answer.read()).get(agent, 0))

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- a monitor in tmux ------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime, all threads


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _pane_pid(session: str, word: str) -> int:
    shell = subprocess.run(
        ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    for _ in range(100):
        if word in Path(f"/proc/{shell}/cmdline").read_bytes().decode(errors="replace"):
            return int(shell)  # the shell exec'd the monitor
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", shell], capture_output=True, text=True).stdout.split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise RuntimeError(f"{word} did not start")


def run_in_tmux(command: list[str], word: str, agent: str, targets: Targets, warm: float, seconds: float) -> dict:
    """Run `command` in a 120x40 pane; its CPU per refresh, RSS, refreshes counted and the last screen."""
    session = f"capcon-bench-{uuid.uuid4().hex[:8]}"
    home = tempfile.mkdtemp(prefix="capcon-bench-")
    script = Path(home) / "run.sh"  # 200 URLs make a long command line: tmux takes a script's name instead
    script.write_text("exec " + " ".join(f"'{part}'" for part in command) + "\n")
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-e", f"XDG_DATA_HOME={home}", "-x", "120", "-y", "40"]
        + ["-c", str(REPO), f"sh {script}"],
        check=True,
    )
    try:
        pid = _pane_pid(session, word)
        time.sleep(warm)
        cpu0, gets0 = _cpu_seconds(pid), targets.gets(agent)
        time.sleep(seconds)
        cpu1, gets1 = _cpu_seconds(pid), targets.gets(agent)
        rss = _rss_mb(pid)
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    refreshes = (gets1 - gets0) / len(targets.ports)
    return {
        "cpu": (cpu1 - cpu0) / refreshes if refreshes else float("inf"),
        "refreshes": refreshes,
        "period": seconds / refreshes if refreshes else float("inf"),
        "rss_mb": rss,
        "screen": screen,
    }


def capcon(targets: Targets, warm: float, seconds: float) -> dict:
    command = [sys.executable, "-m", "console", "watch", "--interval", "2", "--no-record"]
    for port in targets.ports:
        command += ["--target", f"http://127.0.0.1:{port}/metrics"]
    return run_in_tmux(command, "console", "capcon", targets, warm, seconds)


def peer_binary() -> tuple[Path | None, str]:
    """vllm-htop in its own venv under the cache folder, installed on first use: (its command, "") or (None, why)."""
    return installed_peer("vllm-htop", PEER_VERSION, "vllm-htop")


def peer(binary: Path, targets: Targets, warm: float, seconds: float) -> dict:
    command = [str(binary), "--table", "--interval", "2", "--no-gpu-detect", "--url"]
    command += [f"http://127.0.0.1:{port}" for port in targets.ports]
    return run_in_tmux(command, "vllm-htop", "Python-urllib", targets, warm, seconds)


# --- the report -------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds each monitor is measured (default 30)")
    parser.add_argument("--warm", type=float, default=10.0, help="seconds before measuring (default 10)")
    parser.add_argument("--rounds", type=int, default=1, help="measure each monitor this many times, alternated")
    parser.add_argument("--page", default=str(DEFAULT_PAGE), help="the /metrics page every target serves")
    parser.add_argument("--no-peer", action="store_true", help="measure capcon only")
    parser.add_argument("--serve", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args()
    page = Path(args.page)
    if args.serve:
        asyncio.run(serve(page, args.serve))
        return 0
    if shutil.which("tmux") is None:
        print("tmux is not installed: the console is measured in a real terminal", file=sys.stderr)
        return 2
    binary, why = (None, "--no-peer") if args.no_peer else peer_binary()
    targets = Targets(page, args.targets)
    ours, theirs = [], []
    try:
        for _ in range(args.rounds):
            ours.append(capcon(targets, args.warm, args.seconds))
            if binary is not None:
                theirs.append(peer(binary, targets, args.warm, args.seconds))
    finally:
        targets.close()
    print(f"{args.targets} loopback targets, {page.stat().st_size} bytes each (gzipped when asked), tmux 120x40")
    print(f"{'monitor':>10} {'cpu s/refresh':>13} {'refreshes':>9} {'period s':>8} {'RSS MB':>7}")
    for label, runs in (("capcon", ours), ("vllm-htop", theirs)):
        for run in runs:
            print(
                f"{label:>10} {run['cpu']:>13.3f} {run['refreshes']:>9.1f} {run['period']:>8.2f} {run['rss_mb']:>7.0f}"
            )
    if ours and "no answer" in ours[-1]["screen"]:
        print("warning: the console's last screen says 'no answer'")
    mine = sorted(run["cpu"] for run in ours)[len(ours) // 2]
    print(f"cpu_seconds_per_refresh: {mine:.3f}")
    if theirs:
        other = sorted(run["cpu"] for run in theirs)[len(theirs) // 2]
        print(f"vllm_htop_cpu_seconds_per_refresh: {other:.3f}")
        print(f"ratio_vs_vllm_htop: {mine / other:.2f}")
    else:
        print(f"ratio_vs_vllm_htop: none (no peer: {why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
