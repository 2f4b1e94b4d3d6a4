"""A fleet of 1,000 to 10,000 replicas through Prometheus: CPU and memory per refresh, queries and bytes.

    .venv/bin/python benchmarks/bench_fleet_scale.py [--sizes 1000,5000,10000] [--refreshes 6]
        [--console-seconds 20] [--no-console]
    .venv/bin/python benchmarks/bench_fleet_scale.py --serve 10000 [--flagged]   # the fake alone

A child process serves a fake Prometheus HTTP API on loopback: `/api/v1/query` answers
the console's own queries (`console.sources.promql`, recognised by their exact text)
from generated series in Prometheus's JSON shape (target labels on `up`, only the
grouping labels after `sum by`, values as strings), gzipped when the client accepts it,
as Prometheus does. Any other query gets Prometheus's 400 `bad_data` answer. The fake
counts the queries and the bytes it sends (`/stats`); its own CPU is not counted.

Each size is run twice: no flag active, and every replica flagged (every one has
requests waiting: a fleet at its peak, a saturation warning on each row). Two
measurements per case, each in its own process (so RSS is the case's own):

- pipeline: the console's refresh without the screen (Watcher -> PollFeed, as the
  console, `capcon record` and `watch --once` run it), CPU seconds of the whole
  process per refresh (the worker threads included) and peak RSS; the clock moves
  31 s per refresh so flags pass their minimum duration on the second one;
- console: the real `capcon watch --source prometheus --interval 2 --no-record` in
  tmux for `--console-seconds` (after the flags have had their 30 s), CPU from
  /proc per refresh counted by the fake (queries received / queries per refresh),
  RSS at the end, and the achieved period.

Last lines: `ratio_10k_vs_1k_unflagged: N` and `ratio_10k_vs_1k_flagged: N` (console CPU per
refresh, else the pipeline's): close to 10 means the cost grows with the fleet, not faster.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SELECTOR = 'job="vllm"'
WINDOW_SECONDS = 60.0
SCRAPE_INTERVAL = 15
TICKS = os.sysconf("SC_CLK_TCK")
REASONS = ("stop", "length", "abort")


# --- the fake Prometheus ------------------------------------------------------


def instance(i: int) -> str:
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}:8000"


class FakeFleet:
    """Per-replica figures of a generated fleet, and each refresh query's answer built from them."""

    def __init__(self, replicas: int, flagged: bool) -> None:
        self.replicas = replicas
        self.flagged = flagged
        self.instances = [instance(i) for i in range(replicas)]
        self.only: set[str] | None = None  # a detail query's instances: per_instance answers for these alone

    def figure(self, i: int, name: str) -> float:
        """A replica's value of one figure: varied per replica, the same at every query."""
        wobble = ((i * 7919) % 101) / 100.0  # 0..1
        return {
            "requests": 0.3 + 0.2 * wobble,
            "prompt_tokens": 600.0 + 400.0 * wobble,
            "generation_tokens": 120.0 + 80.0 * wobble,
            "preemptions": 0.0,
            "prefix_cache_queries": 500.0,
            "prefix_cache_hits": 200.0 * wobble,
            "admission_rejections": 0.0,
            "running": 4.0 + round(4 * wobble),
            "waiting": (3.0 + round(3 * wobble)) if self.flagged else 0.0,
            "kv_usage": 0.4 + 0.4 * wobble,
        }[name]

    def per_instance(self, figure: str, value, extra: dict | None = None) -> list[dict]:
        return [
            {"metric": {"capcon_figure": figure, "instance": name, **(extra or {})}, "value": [0, _text(value(i))]}
            for i, name in enumerate(self.instances)
            if self.only is None or name in self.only
        ]

    def answer(self, purpose: str, at: float) -> list[dict]:
        from console.metrics.window import QUANTILE_FIGURES
        from console.sources import promql

        if purpose == "up":
            rows = []
            for i, name in enumerate(self.instances):  # `max by (instance)`: no other target label
                rows.append({"metric": {"capcon_figure": "up", "instance": name}, "value": [at, "1"]})
                scraped = at - (i % SCRAPE_INTERVAL)
                rows.append(
                    {"metric": {"capcon_figure": "scraped_at", "instance": name}, "value": [at, _text(scraped)]}
                )
            return rows
        if purpose == "rates":
            rows = []
            for canonical in ("requests", "prompt_tokens", "generation_tokens", "preemptions"):
                rows += self.per_instance(canonical, lambda i, c=canonical: self.figure(i, c))
            for canonical in ("prefix_cache_queries", "prefix_cache_hits", "admission_rejections"):
                rows += self.per_instance(canonical, lambda i, c=canonical: self.figure(i, c))
            for share, reason in zip((0.9, 0.08, 0.02), REASONS, strict=True):
                rows += self.per_instance(
                    "requests_by_reason",
                    lambda i, s=share: s * self.figure(i, "requests"),
                    {"finished_reason": reason},
                )
            for _field, canonical in promql.MEAN_FIGURES:
                mean = 1500.0 if canonical == "prompt_length" else 300.0
                rows += self.per_instance(canonical + "_sum", lambda i, m=mean: m * self.figure(i, "requests"))
                rows += self.per_instance(canonical + "_count", lambda i: self.figure(i, "requests"))
            rows += self.per_instance("resets", lambda i: 0.0)
            return rows
        if purpose == "gauges":
            rows = self.per_instance("running", lambda i: self.figure(i, "running"))
            rows += self.per_instance("waiting", lambda i: self.figure(i, "waiting"))
            rows += self.per_instance("kv_usage", lambda i: self.figure(i, "kv_usage"), {"engine": "0"})
            return rows
        if purpose == "cache_config":
            labels = {"engine": "0", "kv_cache_size_tokens": "160000", "num_gpu_blocks": "10000", "block_size": "16"}
            return [{"metric": {"instance": name, **labels}, "value": [at, "1"]} for name in self.instances]
        if purpose == "quantiles":
            rows = []
            for name, canonical, q in QUANTILE_FIGURES:
                rows += self.per_instance(name, lambda i, c=canonical, q=q: _quantile(c, q, i))
            return rows
        if purpose == "flag_gauges":  # gauges, and preemptions and resets where not zero (none here)
            return self.answer("gauges", at)
        if purpose == "fleet":
            return self.fleet_answer(at)
        if purpose == "picks":
            return [
                {"metric": {"capcon_figure": "pick", "instance": name}, "value": [at, "1"]} for name in self.picks()
            ]
        if purpose == "fleet_quantiles":
            return [
                {"metric": {"capcon_figure": name}, "value": [at, _text(_quantile(canonical, q, 50))]}
                for name, canonical, q in QUANTILE_FIGURES
            ]
        raise KeyError(purpose)

    def fleet_answer(self, at: float) -> list[dict]:
        """The fleet's sums, as Prometheus' `sum(...)` gives them: no instance label."""
        from console.sources import promql

        totals = {c: sum(self.figure(i, c) for i in range(self.replicas)) for c in _COUNTERS}
        rows = [{"metric": {"capcon_figure": c}, "value": [at, _text(v)]} for c, v in totals.items()]
        for share, reason in zip((0.9, 0.08, 0.02), REASONS, strict=True):
            labels = {"capcon_figure": "requests_by_reason", "finished_reason": reason}
            rows.append({"metric": labels, "value": [at, _text(share * totals["requests"])]})
        for _field, canonical in promql.MEAN_FIGURES:
            mean = 1500.0 if canonical == "prompt_length" else 300.0
            rows.append(
                {"metric": {"capcon_figure": canonical + "_sum"}, "value": [at, _text(mean * totals["requests"])]}
            )
            rows.append({"metric": {"capcon_figure": canonical + "_count"}, "value": [at, _text(totals["requests"])]})
        return rows

    def picks(self) -> set[str]:
        """topk and bottomk of each figure the picks query ranks, as Prometheus would choose them."""
        from console.metrics.window import QUANTILE_FIGURES
        from console.sources import promql

        ranked = [lambda i, c=c: self.figure(i, c) for c in ("requests", "prompt_tokens", "generation_tokens")]
        ranked.append(lambda i: self.figure(i, "prefix_cache_hits") / self.figure(i, "prefix_cache_queries"))
        ranked += [lambda i, c=c, q=q: _quantile(c, q, i) for _n, c, q in QUANTILE_FIGURES]
        k, chosen = promql.DETAIL_PER_FIGURE, set()
        for value in ranked:
            order = sorted(range(self.replicas), key=value)
            chosen.update(self.instances[i] for i in order[:k] + order[-k:])
        return chosen


_COUNTERS = (
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "admission_rejections",
)
RESTRICTED = ") and on (instance) max by (instance) (up{"


def restriction(query: str) -> tuple[str, set[str] | None]:
    """A detail query's own text and the instances it is restricted to (None: not restricted)."""
    if not query.startswith("(") or RESTRICTED not in query:
        return query, None
    base, tail = query[1:].rsplit(RESTRICTED, 1)
    literal = tail[tail.index('instance=~"') + len('instance=~"') : tail.rindex('"')]
    # The bench's instance names hold only digits, dots and a colon: unquoting is dropping backslashes.
    return base, set(literal.replace("\\", "").split("|"))


def _quantile(canonical: str, q: float, i: int) -> float:
    base = {"ttft": 0.4, "itl": 0.03, "tpot": 0.03, "e2e": 6.0, "queue": 0.05}[canonical]
    return base * (1 + q) * (1 + ((i * 31) % 17) / 40.0)


def _text(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def purposes() -> dict[str, str]:
    """Each query the console sends, by its exact text: what the fake recognises."""
    from console.sources import promql

    matchers = promql.selector_matchers(SELECTOR)
    known = {text: purpose for purpose, text in promql.refresh_queries(matchers, WINDOW_SECONDS).items()}
    for purpose, text in promql.overview_queries(matchers, WINDOW_SECONDS).items():
        known.setdefault(text, "flag_gauges" if purpose == "gauges" else purpose)
    return known


def serve(replicas: int, flagged: bool) -> None:
    """Serve the fake until killed; prints the port first."""
    import asyncio

    from aiohttp import web

    fleet = FakeFleet(replicas, flagged)
    known = purposes()
    stats = {"queries": 0, "bytes_sent": 0, "bytes_decompressed": 0, "refresh_starts": []}
    cached: dict[str, tuple[bytes, bytes]] = {}  # answers that do not depend on the time: built once

    def body(purpose: str, at: float, only: set[str] | None = None) -> tuple[bytes, bytes]:
        if only is None and purpose in cached:
            return cached[purpose]
        fleet.only = only
        try:
            result = fleet.answer(purpose, at)
        finally:
            fleet.only = None
        raw = json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": result}}, separators=(",", ":")
        ).encode()
        made = (raw, gzip.compress(raw, compresslevel=6))
        if purpose != "up" and only is None:  # `up` carries scrape times relative to the query's time
            cached[purpose] = made
        return made

    async def query(request: web.Request) -> web.Response:
        params = dict(request.query)
        if request.method == "POST":
            params.update({k: v[0] for k, v in parse_qs((await request.read()).decode()).items()})
        text, at = params.get("query", ""), float(params.get("time") or time.time())
        stats["queries"] += 1
        text, only = restriction(text)
        purpose = known.get(text)
        if purpose == "up":  # every refresh asks it once, first: when refreshes start
            stats["refresh_starts"] = [*stats["refresh_starts"][-200:], time.monotonic()]
        if purpose is None:
            error = {"status": "error", "errorType": "bad_data", "error": "the fake knows only the console's queries"}
            return web.json_response(error, status=400)
        raw, zipped = body(purpose, at, only)  # in the loop: one answer at a time (`fleet.only` is shared)
        stats["bytes_decompressed"] += len(raw)
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            stats["bytes_sent"] += len(zipped)
            return web.Response(body=zipped, content_type="application/json", headers={"Content-Encoding": "gzip"})
        stats["bytes_sent"] += len(raw)
        return web.Response(body=raw, content_type="application/json")

    async def stats_page(_request: web.Request) -> web.Response:
        return web.json_response(stats)

    async def main() -> None:
        for purpose in set(known.values()) - {"up"}:
            body(purpose, time.time())  # warm: the first refresh is not slowed by the fake
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/v1/query", query)
        app.router.add_get("/stats", stats_page)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # aiohttp names no public getter for the port
        print(port, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class Fake:
    """The fake Prometheus in a child process."""

    def __init__(self, replicas: int, flagged: bool) -> None:
        command = [sys.executable, __file__, "--serve", str(replicas)] + (["--flagged"] if flagged else [])
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"the fake Prometheus did not start (said {line!r})")
        self.url = f"http://127.0.0.1:{int(line)}"

    def stats(self) -> dict:
        import urllib.request

        with urllib.request.urlopen(self.url + "/stats", timeout=10) as answer:
            return json.loads(answer.read())

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


# --- the pipeline, in its own process -------------------------------------------


def pipeline(url: str, refreshes: int) -> dict:
    """The console's refresh without the screen; prints one JSON line of figures."""
    import asyncio

    from console.live.feed import PollFeed
    from console.live.handle import FleetHandle
    from console.live.watcher import Watcher
    from console.sources.prometheus import PrometheusSource

    clock = {"now": time.time()}

    def now() -> float:
        return clock["now"]

    source = PrometheusSource(url, SELECTOR, WINDOW_SECONDS, timeout=60.0)
    watcher = Watcher(source, WINDOW_SECONDS, 2.0, clock=now)
    feed = PollFeed(FleetHandle("bench", None, watcher))

    def stats() -> dict:
        import urllib.request

        with urllib.request.urlopen(url + "/stats", timeout=10) as answer:
            return json.loads(answer.read())

    async def run() -> dict:
        cpu, flags, rows, before = [], 0, 0, {}
        for k in range(refreshes + 2):
            if k == 2:
                before = stats()
            clock["now"] += 31.0  # past the flags' minimum duration from the second refresh on
            started = time.process_time()
            poll = await watcher.poll()
            view = feed.add(poll, now())
            if view.figures.source_error:
                raise RuntimeError(view.figures.source_error)
            if k >= 2:
                cpu.append(time.process_time() - started)
            flags, rows = len(view.flags), len(view.rows)
        after = stats()
        await watcher.aclose()
        per = {key: (after[key] - before[key]) / refreshes for key in ("queries", "bytes_sent", "bytes_decompressed")}
        return {"cpu": sorted(cpu)[len(cpu) // 2], "flags": flags, "rows": rows, "top_k": source.top_k_view, **per}

    found = asyncio.run(run())
    found["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return found


def run_pipeline(fake: Fake, refreshes: int) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--pipeline", fake.url, "--refreshes", str(refreshes)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pipeline failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the real console in tmux ----------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _console_pid(session: str) -> int:
    shell = subprocess.run(
        ["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    for _ in range(100):
        if "console" in Path(f"/proc/{shell}/cmdline").read_bytes().decode(errors="replace"):
            return int(shell)  # the shell exec'd the console
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", shell], capture_output=True, text=True).stdout.split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise RuntimeError("the console did not start")


def run_console(fake: Fake, seconds: float, warm: float, queries_per_refresh: float) -> dict:
    session = f"capcon-bench-{uuid.uuid4().hex[:8]}"
    home = tempfile.mkdtemp(prefix="capcon-bench-")
    command = (
        f"{sys.executable} -m console watch --source prometheus --prometheus {fake.url} "
        f"--selector '{SELECTOR}' --interval 2 --window {WINDOW_SECONDS:g} --no-record"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-e", f"XDG_DATA_HOME={home}", "-x", "120", "-y", "40"]
        + ["-c", str(REPO), command],
        check=True,
    )
    try:
        pid = _console_pid(session)
        time.sleep(warm)
        cpu0, stats0, t0 = _cpu_seconds(pid), fake.stats(), time.monotonic()
        time.sleep(seconds)
        cpu1, stats1, t1 = _cpu_seconds(pid), fake.stats(), time.monotonic()
        rss = _rss_mb(pid)
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    refreshes = (stats1["queries"] - stats0["queries"]) / queries_per_refresh
    # CLOCK_MONOTONIC is the machine's: the fake's refresh starts compare with this process's t0 and t1.
    starts = [at for at in stats1["refresh_starts"] if t0 <= at <= t1]
    gaps = sorted(b - a for a, b in itertools.pairwise(starts))
    return {
        "cpu": (cpu1 - cpu0) / refreshes if refreshes else float("inf"),
        "rss_mb": rss,
        "period": gaps[len(gaps) // 2] if gaps else float("inf"),  # start to start, the median
        "refreshes": refreshes,
        "no_answer": "no answer" in screen,
    }


# --- the report ------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--refreshes", type=int, default=6)
    parser.add_argument("--console-seconds", type=float, default=20.0)
    parser.add_argument("--no-console", action="store_true", help="the pipeline only (no tmux)")
    parser.add_argument("--console-sizes", default="", help="sizes that get the console run too (default: every size)")
    parser.add_argument(
        "--console-warm",
        type=float,
        default=0.0,
        help="seconds before the console is measured (default 36 flagged, 8 not)",
    )
    parser.add_argument("--serve", type=int, metavar="REPLICAS", help=argparse.SUPPRESS)
    parser.add_argument("--flagged", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.flagged)
        return 0
    if args.pipeline:
        print(json.dumps(pipeline(args.pipeline, args.refreshes)))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    console = not args.no_console and shutil.which("tmux") is not None
    results: dict[tuple[int, bool], dict] = {}
    print(
        f"{'replicas':>8} {'flagged':>7} {'pipe cpu s':>10} {'pipe MB':>8} {'queries':>7} {'KB sent':>8} "
        f"{'MB json':>7} {'flags':>6}" + (f" {'console cpu s':>13} {'MB':>6} {'period s':>8}" if console else "")
    )
    for size in sizes:
        for flagged in (False, True):
            fake = Fake(size, flagged)
            try:
                found = run_pipeline(fake, args.refreshes)
                if console and (not args.console_sizes or str(size) in args.console_sizes.split(",")):
                    warm = args.console_warm or (36.0 if flagged else 8.0)  # flags need their 30 s minimum duration
                    found["console"] = run_console(fake, args.console_seconds, warm, found["queries"])
            finally:
                fake.close()
            results[(size, flagged)] = found
            line = (
                f"{size:>8} {'yes' if flagged else 'no':>7} {found['cpu']:>10.3f} {found['rss_mb']:>8.0f} "
                f"{found['queries']:>7.0f} {found['bytes_sent'] / 1024:>8.0f} {found['bytes_decompressed'] / 1e6:>7.1f} "
                f"{found['flags']:>6}"
            )
            if "console" in found:
                c = found["console"]
                line += f" {c['cpu']:>13.3f} {c['rss_mb']:>6.0f} {c['period']:>8.2f}"
                line += " (polls ended 'no answer')" if c["no_answer"] else ""
            print(line, flush=True)
    small, large = min(sizes), max(sizes)
    for flagged in (False, True):
        if (small, flagged) in results and (large, flagged) in results and small != large:
            a, b = results[(small, flagged)], results[(large, flagged)]
            pick = "console" if "console" in a and "console" in b else None
            ratio = (b[pick]["cpu"] / a[pick]["cpu"]) if pick else b["cpu"] / a["cpu"]
            label = f"ratio_{large / 1000:g}k_vs_{small / 1000:g}k_{'flagged' if flagged else 'unflagged'}"
            print(f"{label}: {ratio:.1f}  (the fleet grew {large / small:g} times)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
