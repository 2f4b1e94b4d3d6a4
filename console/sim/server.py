"""One simulated replica as a real HTTP server on loopback (aiohttp), speaking vLLM's API.

Routes: `/v1/completions` and `/v1/chat/completions` (streaming as SSE, one
chunk per token at the simulated pace, a chat's role chunk written with the
first token once prefill is done, as vLLM sends it; or one JSON answer, both
with `usage`),
`/v1/models` (with `max_model_len`), `/health`, `/version` and `/metrics`
(vLLM 0.32's exposition). Many replicas share one event loop, each on its own
port. The engine runs in wall time: a pump wakes at the end of each engine step.

Tokens: a prompt given as a list of token ids counts one token per id; a text
prompt counts one token per whitespace-separated word; a chat adds a few tokens
per message for the template. Answers are words from a small vocabulary, one per
token. Unless the client sets `ignore_eos`, the answer length is drawn from the
plan's output distribution and capped by `max_tokens`.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
import uuid
from collections.abc import Callable

from aiohttp import web

from console.sim.engine import Engine, SimRequest
from console.sim.faults import DEFAULT_SLOW_FACTOR, GARBAGE_PAGE, METRICS_FAULTS, check_kind
from console.sim.gpu import CONTENT_TYPE as GPU_CONTENT_TYPE
from console.sim.gpu import NAMESPACE as GPU_NAMESPACE
from console.sim.gpu import GpuWindow, pod_name, render_page
from console.sim.metrics import VLLM_VERSION, VllmMetrics
from console.sim.shape import ReplicaShape
from console.sim.traffic import LengthSampler, Target

HOST = "127.0.0.1"
CHAT_TOKENS_PER_MESSAGE = 4
WORDS = (
    " the",
    " plan",
    " holds",
    " at",
    " peak",
    " with",
    " one",
    " replica",
    " spare",
    " and",
    " cache",
    " to",
    " fit",
    " every",
    " request",
    " on",
    " time",
)
HANG_LIMIT_SECONDS = 3600.0
# Without streaming clients, the pump need not wake at every step: a tick this long is enough
# for /metrics and keeps the demo's CPU low.
IDLE_TICK_SECONDS = 0.05
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Engine work one wake of the pump (or one scrape) may do: a step counts one plus the requests
# it schedules. An engine further behind catches up over several wakes, so a replica under any
# load leaves the event loop to the others, to /metrics and to Ctrl+C / SIGTERM.
MAX_WORK_PER_WAKE = 4096
# Requests waiting for a place in the batch: past this a replica refuses new ones (in-process
# traffic counts them refused; HTTP answers 503), so an overload grows a queue of bounded memory.
MAX_WAITING = 1024


class BadRequest(Exception):
    pass


def _no_work(now: float) -> tuple[float, float, float]:
    return (0.0, 0.0, 0.0)


async def _listen(app: web.Application, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app` on HOST:port (0: a free port); the runner and the port it got."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as error:
        sock.close()
        await runner.cleanup()
        raise OSError(f"cannot listen on {HOST}:{port}: {error.strerror}") from error
    await web.SockSite(runner, sock).start()
    return runner, sock.getsockname()[1]


def _error(message: str, status: int = 400) -> web.Response:
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def count_prompt_tokens(prompt: object) -> int:
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        return count_prompt_tokens(prompt[0])
    raise BadRequest("prompt must be a string, a list of token ids, or a list holding one of these")


def count_chat_tokens(messages: object) -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    total = 0
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise BadRequest("each message needs a role and content")
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += len(str(content).split()) + CHAT_TOKENS_PER_MESSAGE
    return total


class ReplicaServer(Target):
    """A replica: engine + metrics + HTTP server. Restartable on the same port."""

    def __init__(
        self,
        shape: ReplicaShape,
        index: int = 0,
        port: int = 0,
        seed: int = 0,
        answer_sampler: LengthSampler | None = None,
        kv_dtype: str = "auto",
        clock: Callable[[], float] | None = None,
        gpu_port: int | None = None,
        gpu_name: str = "simulated GPU",
    ):
        self.shape = shape
        self.index = index
        self.port = port
        self.model_name = shape.model_name
        self.rng = random.Random(seed)
        self.answer_sampler = answer_sampler
        self.kv_dtype = kv_dtype
        self._clock = clock
        self.engine: Engine | None = None
        self.metrics: VllmMetrics | None = None
        self.started_at = 0.0
        self.metrics_fault: str | None = None
        self.slow_factor = 1.0
        self.down = False
        self.streams = 0  # streaming clients being served now
        self._runner: web.AppRunner | None = None
        self._pump: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._unhang = asyncio.Event()
        self._waiters: set[asyncio.Event] = set()
        self._ids = 0
        # The replica's GPUs as dcgm-exporter shows them, on a port of their own (None: not served). Like the
        # real exporter, a process of its own: it keeps answering while the replica is down or restarting.
        self.gpu_port = gpu_port
        self.gpu_name = gpu_name
        self.gpu_window = GpuWindow(shape)
        self._seed = seed
        self._gpu_runner: web.AppRunner | None = None

    # ---- life cycle ----

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def gpu_url(self) -> str | None:
        """The replica's dcgm-exporter page, once served."""
        return f"http://{HOST}:{self.gpu_port}/metrics" if self._gpu_runner is not None else None

    def now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    def _started_engine(self) -> Engine:
        """The engine, made by the first `start` (kept after a stop, so its last state still shows)."""
        if self.engine is None:
            raise RuntimeError(f"replica {self.index} has not started")
        return self.engine

    def _started_metrics(self) -> VllmMetrics:
        if self.metrics is None:
            raise RuntimeError(f"replica {self.index} has not started")
        return self.metrics

    async def start(self) -> None:
        """Start as a fresh process would: new engine, counters at zero, a new start time."""
        self.started_at = time.time()
        max_model_len = min(self.shape.max_model_len, self.shape.kv_capacity_tokens)
        self.metrics = VllmMetrics(self.model_name, self.shape, max_model_len, self.started_at, kv_dtype=self.kv_dtype)
        self.engine = Engine(self.shape, observer=self.metrics)
        self.engine.clock = self.now()
        self.engine.slowdown = self.slow_factor
        self.gpu_window.shares(self.engine.clock, self.engine.gpu_work, self.engine)  # the GPU counters start here
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/metrics/", self._metrics)
        self._runner, self.port = await _listen(app, self.port)
        if self.gpu_port is not None and self._gpu_runner is None:
            gpu_app = web.Application()
            gpu_app.router.add_get("/metrics", self._gpu_metrics)
            self._gpu_runner, self.gpu_port = await _listen(gpu_app, self.gpu_port)
        self._unhang.clear()
        self._pump = asyncio.create_task(self._run_pump(), name=f"sim-replica-{self.index}-pump")
        self.down = False

    async def stop_gpu_page(self) -> None:
        """Stop serving the GPU page (the fleet closing; `stop` alone leaves it up, as a dead vLLM leaves dcgm-exporter)."""
        if self._gpu_runner is not None:
            await self._gpu_runner.cleanup()
            self._gpu_runner = None

    def halt(self) -> None:
        """At once, without waiting: no more engine steps, every waiting client woken (then `stop`)."""
        self.down = True
        self._unhang.set()
        if self._pump is not None:
            self._pump.cancel()
        for waiter in list(self._waiters):
            waiter.set()

    async def stop(self) -> None:
        """Stop listening and drop every request in flight (a killed process)."""
        self.halt()
        if self._pump is not None:
            try:
                await self._pump
            except asyncio.CancelledError:
                pass
            self._pump = None
        for waiter in list(self._waiters):
            waiter.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    # ---- faults ----

    async def apply_fault(self, kind: str, factor: float = DEFAULT_SLOW_FACTOR) -> None:
        check_kind(kind)
        if kind == "down":
            if not self.down:
                await self.stop()
        elif kind == "restart":
            await self.restart()
        elif kind == "slow":
            self.slow_factor = factor
            if self.engine is not None:
                self.engine.slowdown = factor
        else:
            self.metrics_fault = kind
            self._unhang.clear()

    async def clear_fault(self, kind: str) -> None:
        check_kind(kind)
        if kind in ("down", "restart"):
            if self.down:
                await self.start()
        elif kind == "slow":
            self.slow_factor = 1.0
            if self.engine is not None:
                self.engine.slowdown = 1.0
        elif self.metrics_fault == kind:
            self.metrics_fault = None
            self._unhang.set()

    # ---- the engine pump ----

    async def _run_pump(self) -> None:
        engine = self._started_engine()
        while True:
            self._catch_up()
            following = engine.next_event_time()
            if following is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            delay = following - self.now()
            if not self.streams:
                delay = max(delay, IDLE_TICK_SECONDS)
            await asyncio.sleep(max(0.0, delay))

    def _catch_up(self) -> None:
        """Run the engine to now and wake the clients whose requests moved."""
        for request in self._started_engine().advance(self.now(), max_work=MAX_WORK_PER_WAKE):
            waiter = request.tag
            if isinstance(waiter, asyncio.Event):  # None for in-process traffic: nobody waits
                waiter.set()

    def _submit(self, prompt: int, answer: int, max_tokens: int, kind: str, waiter: asyncio.Event | None) -> SimRequest:
        self._ids += 1
        request = SimRequest(f"{self.index}-{self._ids}", prompt, answer, max_tokens, self.now(), kind=kind, tag=waiter)
        self._started_engine().submit(request)
        self._wake.set()
        return request

    # ---- Target (in-process traffic) ----

    def up(self) -> bool:
        return not self.down and self.engine is not None

    def load(self) -> float:
        return self.engine.num_running + self.engine.num_waiting if self.engine else 0.0

    def queue_full(self) -> bool:
        return self.engine is not None and self.engine.num_waiting >= MAX_WAITING

    def send(self, prompt: int, answer: int, max_tokens: int, kind: str) -> bool:
        if not self.up() or self.queue_full() or self._started_engine().validate(prompt, max_tokens):
            return False
        self._submit(prompt, answer, max_tokens, kind, None)
        return True

    # ---- HTTP ----

    def _count(self, handler: str, method: str, status: int) -> None:
        self._started_metrics().count_http(handler, method, status, time.time())

    def _answer_length(self, body: dict, max_tokens: int) -> int:
        if body.get("ignore_eos"):
            return max_tokens
        if self.answer_sampler is None:
            natural = max_tokens
        else:
            natural = self.answer_sampler.draw(self.rng)[1]
        return max(int(body.get("min_tokens") or 0), min(natural, max_tokens))

    async def _completions(self, http: web.Request) -> web.StreamResponse:
        return await self._generate(http, chat=False)

    async def _chat(self, http: web.Request) -> web.StreamResponse:
        return await self._generate(http, chat=True)

    async def _generate(self, http: web.Request, chat: bool) -> web.StreamResponse:
        handler = "/v1/chat/completions" if chat else "/v1/completions"
        try:
            body = await http.json()
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            prompt = count_chat_tokens(body.get("messages")) if chat else count_prompt_tokens(body.get("prompt"))
            if int(body.get("n") or 1) != 1:
                raise BadRequest("only n=1 is simulated")
            limit = body.get("max_completion_tokens") if chat else None
            limit = limit or body.get("max_tokens")
            engine = self._started_engine()
            max_tokens = int(limit) if limit is not None else engine.max_model_len - prompt
            problem = engine.validate(prompt, max_tokens)
            if problem:
                raise BadRequest(problem)
        except (BadRequest, ValueError, TypeError) as error:
            self._count(handler, "POST", 400)
            return _error(str(error) or "the request body is not valid JSON")
        if self.queue_full():
            self._count(handler, "POST", 503)
            return _error(f"the simulated replica has {MAX_WAITING} requests waiting already; try again later", 503)
        answer = self._answer_length(body, max_tokens)
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        request = self._submit(prompt, answer, max_tokens, str(body.get("user") or "interactive"), waiter)
        try:
            if body.get("stream"):
                usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))
                return await self._stream(http, request, waiter, chat, usage_wanted, handler)
            return await self._whole(request, waiter, chat, handler)
        finally:
            self._waiters.discard(waiter)
            if not request.finished and self.engine is not None and not self.down:
                self.engine.abort(request, self.now())

    def _usage(self, request: SimRequest) -> dict:
        return {
            "prompt_tokens": request.prompt_tokens,
            "total_tokens": request.prompt_tokens + request.generated,
            "completion_tokens": request.generated,
            "prompt_tokens_details": None,
        }

    @staticmethod
    def _text(start: int, end: int) -> str:
        return "".join(WORDS[i % len(WORDS)] for i in range(start, end))

    async def _whole(self, request: SimRequest, waiter: asyncio.Event, chat: bool, handler: str) -> web.Response:
        while not request.finished:
            await waiter.wait()
            waiter.clear()
            if self.down:
                return _error("the replica stopped", 503)
        text = self._text(0, request.generated)
        reason = request.finished_reason
        created = int(time.time())
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            body = {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": created,
                "model": self.model_name,
                "choices": [choice],
                "usage": self._usage(request),
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            body = {
                "id": f"cmpl-{uuid.uuid4().hex}",
                "object": "text_completion",
                "created": created,
                "model": self.model_name,
                "choices": [choice],
                "usage": self._usage(request),
            }
        self._count(handler, "POST", 200)
        return web.json_response(body)

    async def _stream(
        self,
        http: web.Request,
        request: SimRequest,
        waiter: asyncio.Event,
        chat: bool,
        usage_wanted: bool,
        handler: str,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(http)
        self._count(handler, "POST", 200)
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(choices: list, usage: dict | None = None) -> bytes:
            chunk = {"id": ident, "object": kind, "created": created, "model": self.model_name, "choices": choices}
            if usage_wanted:
                chunk["usage"] = usage
            return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()

        def choice(text: str, reason: str | None) -> dict:
            if chat:
                return {
                    "index": 0,
                    "delta": {"content": text},
                    "logprobs": None,
                    "finish_reason": reason,
                    "stop_reason": None,
                }
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}

        self.streams += 1
        try:
            await self._send_stream(request, waiter, chat, usage_wanted, event, choice, response)
        except ConnectionResetError:
            pass  # the client left; the caller aborts the request
        finally:
            self.streams -= 1
        return response

    async def _send_stream(
        self,
        request: SimRequest,
        waiter: asyncio.Event,
        chat: bool,
        usage_wanted: bool,
        event: Callable[[list[dict], dict | None], bytes],
        choice: Callable[[str, str | None], dict],
        response: web.StreamResponse,
    ) -> None:
        # As vLLM does, a chat's role chunk goes out with the first token, once prefill is done, not on arrival:
        # a client that timed it would otherwise read the time to accept the request as its TTFT.
        role = b""
        if chat:
            role = event(
                [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
                None,
            )
        sent = 0
        while True:
            await waiter.wait()
            waiter.clear()
            if self.down:
                return  # a killed server ends the stream without [DONE]
            while sent < request.generated:
                last = request.finished and sent == request.generated - 1
                token = event([choice(self._text(sent, sent + 1), request.finished_reason if last else None)], None)
                await response.write(role + token if sent == 0 else token)
                sent += 1
            if request.finished:
                break
        if usage_wanted:
            await response.write(event([], self._usage(request)))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()

    async def _models(self, http: web.Request) -> web.Response:
        self._count("/v1/models", "GET", 200)
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(self.started_at),
            "owned_by": "vllm",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self._started_engine().max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": int(self.started_at),
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def _health(self, http: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, http: web.Request) -> web.Response:
        body: dict = {"version": VLLM_VERSION}
        if self.gpu_url is not None:
            # Where this replica's GPU page is, for `capcon bench --diagnose` (a real vLLM says nothing here).
            # Its GPUs carry pod="capcon-sim-N": a console pairs them with this replica by that pod.
            body["capcon_sim"] = {"gpu_page": self.gpu_url, "pod": pod_name(self.index), "namespace": GPU_NAMESPACE}
        return web.json_response(body)

    async def _metrics(self, http: web.Request) -> web.Response:
        fault = self.metrics_fault
        if fault == "metrics_error":
            return web.Response(status=500, text="Internal Server Error")
        if fault == "metrics_hang":
            try:
                await asyncio.wait_for(self._unhang.wait(), HANG_LIMIT_SECONDS)
            except TimeoutError:
                pass
            if self.down:
                return web.Response(status=503, text="stopping")
        if fault == "metrics_garbage":
            return web.Response(status=200, text=GARBAGE_PAGE, content_type="text/plain")
        self._catch_up()  # the pump may be between ticks: show the state as of this scrape
        text = self._started_metrics().render(self._started_engine())
        return web.Response(body=text.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    def gpu_page(self) -> str:
        """The dcgm-exporter page of this replica's GPUs as of now."""
        engine = self.engine
        if engine is not None and not self.down:
            self._catch_up()
        shares = self.gpu_window.shares(self.now(), engine.gpu_work if engine else _no_work, engine)
        return render_page(self.shape, self.index, shares, self.gpu_name, self._seed)

    async def _gpu_metrics(self, http: web.Request) -> web.Response:
        return web.Response(body=self.gpu_page().encode(), headers={"Content-Type": GPU_CONTENT_TYPE})

    def snapshot(self) -> dict:
        """Ground truth for tests and the demo's status line."""
        engine = self.engine
        return {
            "url": self.url,
            "up": self.up(),
            "running": engine.num_running if engine else 0,
            "waiting": engine.num_waiting if engine else 0,
            "kv_usage": engine.kv_usage if engine else 0.0,
            "preemptions": engine.preemptions if engine else 0,
            "slow_factor": self.slow_factor,
            "metrics_fault": self.metrics_fault,
        }


__all__ = ["METRICS_FAULTS", "ReplicaServer", "count_chat_tokens", "count_prompt_tokens"]
