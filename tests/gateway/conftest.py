"""Real parts for the gateway's tests: simulated replicas on loopback, a gateway in front, a hosted endpoint.

The hosted endpoint is a second simulator behind a small front that checks the bearer token
(and can be told to fail), as a hosted OpenAI-compatible API would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from console.gateway.config import GatewayConfig, policy_from_plan
from console.gateway.server import Gateway
from console.sim.fleet import SimFleet

from .plans import gateway_plan, with_model

TOKEN = "admin-token-0123456789abcdef"
HOSTED_KEY = "hosted-key-fedcba9876543210"
MODEL = "llama-70b"
HOSTED_MODEL = "hosted-big"
_ids = itertools.count()


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def completion(max_tokens: int = 8, stream: bool = False, model: str = MODEL, **more) -> dict:
    body = {
        "model": model,
        "prompt": "the queue holds at peak",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    body.update(more)
    return body


@dataclass
class Answer:
    request_id: str
    status: int
    headers: dict
    body: bytes
    chunks: int = 0  # SSE data events (streams)
    done: bool = False  # the stream ended with [DONE]
    sent_at: float = 0.0  # the event loop's clock, just before the request went out
    first_at: float | None = None  # the first SSE data event (streams)
    ended_at: float = 0.0  # the answer read whole, or the stream's end

    @property
    def ttft(self) -> float | None:
        return None if self.first_at is None else self.first_at - self.sent_at

    @property
    def error(self) -> dict | None:
        try:
            data = json.loads(self.body)
        except ValueError:
            return None
        return data.get("error") if isinstance(data, dict) else None


async def send(
    session: aiohttp.ClientSession, url: str, body: dict, headers: dict | None = None, path: str = "/v1/completions"
) -> Answer:
    """One request with its own x-request-id; never raises for a refused or broken answer."""
    rid = f"req-{next(_ids)}"
    head = {"x-request-id": rid, **(headers or {})}
    clock = asyncio.get_running_loop().time
    sent_at, first_at = clock(), None
    try:
        async with session.post(url + path, json=body, headers=head) as response:
            chunks, done, raw = 0, False, b""
            if response.status == 200 and body.get("stream"):
                async for line in response.content:
                    if line.startswith(b"data: [DONE]"):
                        done = True
                    elif line.startswith(b"data:"):
                        chunks += 1
                        first_at = first_at or clock()
            else:
                raw = await response.read()
            return Answer(rid, response.status, response.headers.copy(), raw, chunks, done, sent_at, first_at, clock())
    except (TimeoutError, aiohttp.ClientError) as error:
        return Answer(rid, -1, {}, str(error).encode(), sent_at=sent_at, ended_at=clock())


def metric_values(text: str) -> dict[tuple[str, tuple], float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def metric(values: dict, name: str, **labels) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


async def replica_requests(session: aiohttp.ClientSession, fleet: SimFleet) -> int:
    """Generation requests the replicas answered with 2xx, from their own /metrics."""
    total = 0
    for url in fleet.urls:
        async with session.get(url + "/metrics") as response:
            values = metric_values(await response.text())
        for handler in ("/v1/completions", "/v1/chat/completions"):
            total += metric(values, "http_requests_total", handler=handler, method="POST", status="2xx")
    return int(total)


def running(fleet: SimFleet) -> int:
    return sum(r.engine.num_running + r.engine.num_waiting for r in fleet.replicas if r.engine is not None)


async def until(condition, timeout: float = 10.0, step: float = 0.02) -> bool:
    """Poll `condition` until it holds (True) or `timeout` passes (False); never a timing assertion."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if condition():
            return True
        await asyncio.sleep(step)
    return bool(condition())


@pytest.fixture
async def session():
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=60), connector=aiohttp.TCPConnector(limit=0)
    ) as http:
        yield http


@contextlib.asynccontextmanager
async def sim_fleet(replicas: int = 2, plan=None):
    async with SimFleet(plan or gateway_plan(), replicas, traffic="off") as fleet:
        yield fleet


@contextlib.asynccontextmanager
async def gateway(targets, plan=None, replicas: int | None = None, **options):
    plan = plan or gateway_plan()
    policy = options.pop("policy", None) or policy_from_plan(plan, replicas or len(targets))
    config = GatewayConfig(
        targets=tuple(targets),
        plan_policy=policy,
        listen=("127.0.0.1", 0),
        admin=("127.0.0.1", 0),
        admin_token=TOKEN,
        **{"planned_cap": 2, "health_interval": 0.2, "health_timeout": 0.5, "drain_timeout": 5.0, **options},
    )
    server = Gateway(config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(drain_timeout=1.0)


async def switch(session, server: Gateway, **body) -> aiohttp.ClientResponse:
    body.setdefault("reason", "test")
    body.setdefault("actor", "pytest")
    async with session.put(server.admin_url + "/admin/policy", json=body, headers=auth()) as response:
        await response.read()
        return response


async def state(session, server: Gateway) -> dict:
    async with session.get(server.admin_url + "/admin/state", headers=auth()) as response:
        assert response.status == 200
        return await response.json()


@dataclass
class HostedEndpoint:
    """A simulated replica serving `hosted-big`, behind a front that checks `Authorization: Bearer HOSTED_KEY`."""

    fleet: SimFleet
    url: str = ""
    failing: bool = False  # answer 500 to everything
    requests: int = 0
    refused_tokens: int = 0
    seen_models: list = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        await self._session.close()
        await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {HOSTED_KEY}":
            self.refused_tokens += 1
            return web.json_response(
                {"error": {"message": "bad key", "type": "auth", "code": "invalid_api_key"}}, status=401
            )
        if self.failing:
            return web.json_response({"error": {"message": "down", "type": "server", "code": "down"}}, status=500)
        self.requests += 1
        body = await request.read()
        self.seen_models.append(json.loads(body).get("model"))
        async with self._session.post(
            self.fleet.urls[0] + request.path, data=body, headers={"Content-Type": "application/json"}
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status, headers={"Content-Type": upstream.headers["Content-Type"]}
            )
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


@contextlib.asynccontextmanager
async def hosted_endpoint():
    async with SimFleet(with_model(gateway_plan(), HOSTED_MODEL), 1, traffic="off") as fleet:
        endpoint = HostedEndpoint(fleet)
        await endpoint.start()
        try:
            yield endpoint
        finally:
            await endpoint.close()
