"""`capcon gateway --workers N`: N processes serving one port (SO_REUSEPORT), each enforcing its share.

One event loop holds one core; a fleet whose traffic needs more gets N worker processes, each a whole
Gateway listening on the same address with SO_REUSEPORT, so the kernel spreads new connections between
them. Each enforces 1/N of the gateway's limits (the queue, the in-flight cap per replica, as
--instances shares them between gateways), so the bounds hold across all of them.

The supervisor (this process) forks the workers before any event loop runs, then keeps:
- the one admin API (--admin): a switch is checked by the first worker and, once it applied it, sent
  to the others, its limits shared out (worker_merge.py); GET /admin/state sums the workers' states.
  One address, because the console and runbooks name a gateway by one admin URL.
- the merged /metrics: a scrape of the shared port lands on any worker, and each answers the merged
  page it reads from here (each worker's own page is behind its private admin listener), so counters
  never jump between workers' values.
- the workers' lives: Ctrl+C or SIGTERM stops them all (a second one stops their drains); a worker
  that exits on its own stops the gateway (exit 1) rather than serving on with a share of its limits gone.

Workers' admin listeners are on loopback ports of their own, behind a token made here for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import aiohttp
from aiohttp import web

from console.gateway import answers, bounded_json
from console.gateway.admin_api import ADMIN_MAX_BODY, bearer_authorized, no_route, read_switch_body, unauthorized
from console.gateway.config import GatewayConfig
from console.gateway.telemetry import CONTENT_TYPE
from console.gateway.worker_merge import merge_pages, merge_states, shared_switch

log = logging.getLogger("capcon.gateway")

READY_SECONDS = 60.0  # a worker says where it listens (or why it cannot) within this
ASK_SECONDS = 5.0  # the supervisor's questions to a worker
MAX_WORKERS = 256


class WorkerFailed(Exception):
    """A worker could not start (the reason in words) or did not say so in time."""


@dataclass
class Worker:
    pid: int
    pipe: int  # read end: the worker's one line saying where it listens
    url: str = ""
    admin_url: str = ""


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound (not listening) with SO_REUSEPORT: port 0 becomes one port for every worker to share."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def start_workers(
    config: GatewayConfig, count: int, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None
) -> tuple[list[Worker], socket.socket, str]:
    """Fork `count` workers (before any event loop runs here) and wait until each listens.

    Returns the workers, the supervisor's own listening socket for the merged /metrics, and the workers'
    private admin token. OSError if the port cannot be had; WorkerFailed if a worker could not start.
    """
    host, port = config.listen
    reserved = reserve_port(host, port)
    port = reserved.getsockname()[1]
    merged = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    merged.bind(("127.0.0.1", 0))
    merged.listen(64)
    metrics_url = f"http://127.0.0.1:{merged.getsockname()[1]}/metrics"
    token = secrets.token_urlsafe(24)
    worker_config = replace(config, listen=(host, port), admin=("127.0.0.1", 0), admin_token=token, history=None)
    workers: list[Worker] = []
    try:
        for number in range(count):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: nothing of the supervisor's but its configuration
                os.close(read_end)
                for other in workers:
                    os.close(other.pipe)
                reserved.close()
                merged.close()
                os._exit(_worker_process(worker_config, number, write_end, metrics_url, loop_factory))
            os.close(write_end)
            workers.append(Worker(pid, read_end))
        deadline = time.monotonic() + READY_SECONDS
        for worker in workers:
            said = _read_line(worker.pipe, deadline)
            if "error" in said or "url" not in said:
                raise WorkerFailed(str(said.get("error") or "it stopped before listening"))
            worker.url, worker.admin_url = said["url"], said["admin_url"]
    except BaseException:
        for worker in workers:
            _signal(worker.pid, signal.SIGKILL)
            _reap(worker.pid)
        merged.close()
        raise
    finally:
        reserved.close()  # every worker listens on the port now (or none will)
        for worker in workers:
            os.close(worker.pipe)
    return workers, merged, token


def _read_line(fd: int, deadline: float) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise WorkerFailed(f"a worker did not say it listens within {READY_SECONDS:g} s")
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        said = json.loads(data or b"{}")
    except ValueError:
        return {"error": "a worker said something unreadable"}
    return said if isinstance(said, dict) else {}


def _worker_process(
    config: GatewayConfig,
    number: int,
    pipe: int,
    metrics_url: str,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None,
) -> int:
    """A worker's whole life, in the forked process; its exit status."""
    # Ctrl+C reaches the whole process group: the supervisor alone decides when the workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for handler in logging.getLogger("capcon.gateway").handlers:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s capcon gateway worker {number}: %(message)s", "%Y-%m-%dT%H:%M:%S%z")
        )
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(_worker(config, pipe, metrics_url))
    except BaseException as error:  # noqa: BLE001 - said to the supervisor, which says it once
        _say(pipe, {"error": f"{type(error).__name__}: {error}"})
        return 1


def _say(pipe: int, what: dict) -> None:
    with contextlib.suppress(OSError):
        os.write(pipe, json.dumps(what).encode() + b"\n")
        os.close(pipe)


async def _worker(config: GatewayConfig, pipe: int, metrics_url: str) -> int:
    from console.gateway.server import Gateway  # noqa: PLC0415 - the server room, in the worker only

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    gateway = Gateway(config, reuse_port=True, metrics_from=metrics_url)

    def on_term() -> None:
        if stop.is_set():
            gateway.hurry()
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    try:
        await gateway.start()
    except OSError as error:
        _say(pipe, {"error": f"cannot listen: {error.strerror or error}"})
        return 1
    _say(pipe, {"url": gateway.url, "admin_url": gateway.admin_url, "pid": os.getpid()})
    await stop.wait()
    await gateway.stop()
    return 0


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _reap(pid: int) -> int:
    """Wait for `pid`; its exit status (1 if it died of a signal)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 0
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


class Supervisor:
    """The workers' one admin API and merged /metrics, and their stop (run in the supervisor's event loop)."""

    def __init__(self, config: GatewayConfig, workers: list[Worker], merged: socket.socket, token: str) -> None:
        self.config = config
        self.workers = workers
        self._merged = merged
        self._token = token  # the workers' private admin token
        self._session: aiohttp.ClientSession | None = None
        self._runners: list[web.AppRunner] = []
        self.admin_url = ""
        self.stopping = False

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ASK_SECONDS))
        metrics = web.Application()
        metrics.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(metrics, access_log=None, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, self._merged).start()
        self._runners.append(runner)
        if self.config.admin is not None:
            admin = web.Application(client_max_size=ADMIN_MAX_BODY)
            admin.router.add_get("/admin/policy", self._policy)
            admin.router.add_put("/admin/policy", self._switch)
            admin.router.add_get("/admin/state", self._state)
            admin.router.add_get("/admin/metrics", self._admin_metrics)
            admin.router.add_route("*", "/{tail:.*}", self._unknown)
            runner = web.AppRunner(admin, access_log=None, handle_signals=False, shutdown_timeout=1.0)
            await runner.setup()
            host, port = self.config.admin
            await web.TCPSite(runner, host, port, reuse_address=True).start()
            self._runners.append(runner)
            address = runner.addresses[0]
            shown = f"[{address[0]}]" if ":" in address[0] else address[0]
            self.admin_url = f"http://{shown}:{address[1]}"

    async def close(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def stop_workers(self) -> None:
        """SIGTERM to every worker: the first stops them, a second stops their drains."""
        self.stopping = True
        for worker in self.workers:
            _signal(worker.pid, signal.SIGTERM)

    async def wait(self) -> int:
        """Until every worker has exited; 1 if one exited on its own (the others are stopped then)."""
        loop = asyncio.get_running_loop()
        waits = {loop.run_in_executor(None, _reap, w.pid): w for w in self.workers}
        status = 0
        while waits:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                worker = waits.pop(finished)
                code = finished.result()
                if not self.stopping:
                    log.warning("worker %d exited by itself (status %d): stopping the gateway", worker.pid, code)
                    status = 1
                    self.stop_workers()
                elif code != 0:
                    status = 1
        return status

    # --- asking the workers -----------------------------------------------------------

    async def _ask(self, worker: Worker, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self._session is None:
            raise RuntimeError("the supervisor asked a worker before it started")
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}
        async with self._session.request(method, worker.admin_url + path, data=body, headers=headers) as answer:
            return answer.status, await bounded_json.read_body(answer, 64 * 1024 * 1024)

    async def _ask_all(self, method: str, path: str, body: bytes | None = None) -> list[tuple[int, bytes]]:
        return list(await asyncio.gather(*(self._ask(w, method, path, body) for w in self.workers)))

    async def _metrics(self, request: web.Request) -> web.Response:
        try:
            pages = await self._ask_all("GET", "/admin/metrics")
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            return _unavailable(error)
        if any(status != 200 for status, _ in pages):
            return answers.error(503, "a worker's /metrics could not be read", "metrics_unavailable", retry_after=5)
        merged = merge_pages([body.decode("utf-8", "replace") for _, body in pages])
        return web.Response(body=merged.encode(), headers={"Content-Type": CONTENT_TYPE})

    # --- the admin API ----------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return bearer_authorized(request, self.config.admin_token)

    @staticmethod
    def _unauthorized() -> web.Response:
        return unauthorized()

    async def _policy(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        try:
            status, body = await self._ask(self.workers[0], "GET", "/admin/policy")
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            return _unavailable(error)
        return _with_workers(status, body, len(self.workers))

    async def _switch(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        body, refused = await read_switch_body(request)
        if refused is not None:
            return refused
        if self.stopping:
            return answers.error(503, "the gateway is shutting down", "shutting_down", retry_after=None)
        shared = json.dumps(shared_switch(body, len(self.workers))).encode()
        first, *others = self.workers
        try:
            # The first worker checks it as every one would: refused there, it is refused everywhere, unapplied.
            status, answer = await self._ask(first, "PUT", "/admin/policy", shared)
            if status != 200:
                return _with_workers(status, answer, len(self.workers))
            results = await asyncio.gather(
                *(self._ask(w, "PUT", "/admin/policy", shared) for w in others), return_exceptions=True
            )
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            return _unavailable(error)
        failed = [r for r in results if isinstance(r, BaseException) or r[0] != 200]
        if failed:
            applied = len(self.workers) - len(failed)
            log.warning("a switch reached %d of %d workers", applied, len(self.workers))
            return answers.error(
                502,
                f"the switch was applied by {applied} of {len(self.workers)} workers; send it again",
                "partly_applied",
                retry_after=None,
            )
        return _with_workers(status, answer, len(self.workers))

    async def _state(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        try:
            read = await self._ask_all("GET", "/admin/state")
            states = [json.loads(body) for status, body in read if status == 200]
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            return _unavailable(error)
        if len(states) != len(self.workers):
            return answers.error(503, "a worker's state could not be read", "state_unavailable", retry_after=5)
        return web.json_response(merge_states(states))

    async def _admin_metrics(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return await self._metrics(request)

    async def _unknown(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return no_route(request)


def _with_workers(status: int, body: bytes, workers: int) -> web.Response:
    """A worker's answer passed on; a JSON object says how many workers there are."""
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "error" not in answer:
        answer["workers"] = workers
        return web.json_response(answer, status=status)
    return web.Response(status=status, body=body, content_type="application/json")


def _unavailable(error: BaseException) -> web.Response:
    return answers.error(503, f"a worker did not answer ({type(error).__name__})", "worker_unavailable", retry_after=5)
