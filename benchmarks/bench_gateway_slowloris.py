"""A slowloris against the gateway: are real requests still answered, and how soon are the slow connections closed?

One run, two gateways in turn, each its own process under an open-files limit of 1024 (soft and hard, the
common default): first with its protection as shipped (header and idle timeouts, the connection cap), then
with it off (`--header-timeout 0 --idle-timeout 0 --max-connections 0`: what aiohttp does alone). Against
each, `--slow` connections (1,100) send a request's head at one byte every `--byte-every` seconds (5),
opening another at the next tick when one is closed (as slowloris tools do), while one real client sends a whole request on a new connection
every 50 ms. The upstream is a small aiohttp app in this process that answers at once.

    .venv/bin/python benchmarks/bench_gateway_slowloris.py [--slow 1100] [--seconds 30] [--byte-every 5]

Prints, per gateway: real requests answered out of sent and their latency (p50, p99, max); slow
connections opened, closed by the gateway, and the seconds from open to close (median, p95); then the
answered share with protection against without.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
OPEN_FILES = 1024
HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n" + b"X-Slow: 1\r\n" * 40
COMPLETION = b'{"id":"c","object":"text_completion","choices":[{"index":0,"text":" ok","finish_reason":"length"}]}'


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def upstream() -> tuple[web.AppRunner, str]:
    async def health(request: web.Request) -> web.Response:
        if request.path == "/v1/models":
            return web.json_response({"data": [{"id": "m"}]})
        return web.json_response({})

    async def generate(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=COMPLETION, content_type="application/json")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", health)
    app.router.add_post("/v1/completions", generate)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"127.0.0.1:{runner.addresses[0][1]}"


def limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def start_gateway(target: str, protected: bool) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "console.gateway", "--target", target, "--listen", "127.0.0.1:0"]
    if not protected:
        argv += ["--header-timeout", "0", "--idle-timeout", "0", "--max-connections", "0"]
    process = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=limit_open_files,
    )
    for line in process.stdout:
        if line.startswith("capcon gateway: listening on "):
            url = line.split("listening on ", 1)[1].split()[0]
            break
    else:
        raise RuntimeError("the gateway ended before it was listening")
    for line in process.stdout:  # the rest of its banner
        if line.startswith("Ctrl+C"):
            break
    return process, url


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


class Tally:
    def __init__(self) -> None:
        self.sent = self.answered = 0
        self.latency: list[float] = []
        self.opened = self.closed = self.connect_failed = 0
        self.time_to_close: list[float] = []


async def slow_connection(host: str, port: int, stop: asyncio.Event, byte_every: float, tally: Tally) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        except (OSError, TimeoutError):
            tally.connect_failed += 1
            await asyncio.sleep(byte_every)
            continue
        opened = loop.time()
        tally.opened += 1
        gone = asyncio.ensure_future(reader.read(65536))
        for byte in HEAD:
            done, _ = await asyncio.wait({gone}, timeout=byte_every)
            if done or stop.is_set():
                break
            try:
                writer.write(bytes([byte]))
            except (ConnectionError, RuntimeError):
                break
        if gone.done():
            tally.closed += 1
            tally.time_to_close.append(loop.time() - opened)
        gone.cancel()
        writer.transport.abort()
        if not stop.is_set():  # another at its next tick, as slowloris tools do, not a flood of connects
            await asyncio.sleep(byte_every)


async def real_client(url: str, stop: asyncio.Event, tally: Tally) -> None:
    loop = asyncio.get_running_loop()
    body = {"model": "m", "prompt": "hello", "max_tokens": 1}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True), timeout=aiohttp.ClientTimeout(total=5)
    ) as session:
        while not stop.is_set():
            tally.sent += 1
            began = loop.time()
            try:
                async with session.post(url + "/v1/completions", json=body) as response:
                    await response.read()
                    if response.status == 200:
                        tally.answered += 1
                        tally.latency.append(loop.time() - began)
            except (aiohttp.ClientError, TimeoutError, OSError):
                pass
            await asyncio.sleep(0.05)


async def attack(target: str, protected: bool, args) -> Tally:
    process, url = await asyncio.to_thread(start_gateway, target, protected)
    tally = Tally()
    try:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        stop_event = asyncio.Event()
        slow = [
            asyncio.create_task(slow_connection(host, int(port), stop_event, args.byte_every, tally))
            for _ in range(args.slow)
        ]
        await asyncio.sleep(1.0)  # the attack is on before the first real request
        real = asyncio.create_task(real_client(url, stop_event, tally))
        await asyncio.sleep(args.seconds)
        stop_event.set()
        await asyncio.gather(real, *slow)
    finally:
        await asyncio.to_thread(stop, process)
    return tally


def report(name: str, tally: Tally) -> None:
    share = tally.answered / tally.sent if tally.sent else 0.0
    latency = tally.latency
    print(
        f"{name:<22} real requests answered {tally.answered}/{tally.sent} ({share:.0%}); latency p50 "
        f"{percentile(latency, 0.5) * 1e3:.1f} ms, p99 {percentile(latency, 0.99) * 1e3:.1f} ms, max "
        f"{max(latency, default=float('nan')) * 1e3:.1f} ms"
    )
    print(
        f"{'':<22} slow connections opened {tally.opened}, closed by the gateway {tally.closed} "
        f"(open to close: median {percentile(tally.time_to_close, 0.5):.1f} s, p95 "
        f"{percentile(tally.time_to_close, 0.95):.1f} s), connects failed {tally.connect_failed}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=1100)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--byte-every", type=float, default=5.0)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process holds every slow connection
    runner, target = await upstream()
    print(
        f"{args.slow} slow connections (a byte every {args.byte_every:g} s), {args.seconds:g} s each, the gateway "
        f"under an open-files limit of {OPEN_FILES}; load average {os.getloadavg()[0]:.2f}"
    )
    try:
        protected = await attack(target, True, args)
        report("with protection", protected)
        unprotected = await attack(target, False, args)
        report("without", unprotected)
    finally:
        await runner.cleanup()
    with_share = protected.answered / max(1, protected.sent)
    without_share = unprotected.answered / max(1, unprotected.sent)
    ratio = f"{with_share / without_share:.2f}x" if without_share else f"{with_share:.0%} against none"
    print(f"answered share with protection / without: {ratio}; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
