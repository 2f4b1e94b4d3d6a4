"""The replicas of a Prometheus-sourced fleet: asked of a fake Prometheus on loopback, in front of simulated replicas.

Joining and leaving at run time (a leaver's stream finishes, it takes nothing new), a Prometheus that fails
or talks nonsense (the list is kept, /admin/state says why, the log says so once), a gateway that starts
before Prometheus answers (503 with Retry-After, then serving), and the Prometheus password kept out of
every log line, state and error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path

import pytest
from aiohttp import web

from console.errors import UserError
from console.gateway.config import GatewayConfig, policy_from_plan
from console.gateway.server import Gateway

from .conftest import TOKEN, completion, send, sim_fleet, state, until
from .plans import gateway_plan

pytestmark = pytest.mark.timeout(60)

PASSWORD = "prom-pass-5ecret-9f3a"
REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"


class FakePrometheus:
    """/api/v1/query answering `up` for the instances listed; `mode` makes it fail as a Prometheus may."""

    def __init__(self) -> None:
        self.instances: list[str] = []
        self.mode = "ok"  # ok, 500, garbage, empty, hang
        self.queries: list[str] = []
        self.authorizations: set[str] = set()
        self.url = ""
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v1/query", self._query)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://capcon:{PASSWORD}@127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        self._release.set()
        await self._runner.cleanup()

    async def _query(self, request: web.Request) -> web.StreamResponse:
        self.queries.append(request.query.get("query", ""))
        self.authorizations.add(request.headers.get("Authorization", ""))
        if self.mode == "500":
            body = {"status": "error", "errorType": "internal", "error": "storage is on fire"}
            return web.json_response(body, status=500)
        if self.mode == "garbage":
            return web.Response(text="<html>\x1b[31mnot prometheus</html>", content_type="text/html")
        if self.mode == "hang":
            await self._release.wait()
        now = time.time()
        result = [
            {"metric": {"__name__": "up", "instance": i, "job": "vllm"}, "value": [now, "1"]}
            for i in (self.instances if self.mode != "empty" else [])
        ]
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def count(self, words: str) -> int:
        return sum(words in line for line in self.lines)


@pytest.fixture
def log_lines():
    handler = Lines()
    logger = logging.getLogger("capcon.gateway")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextlib.asynccontextmanager
async def fake_prometheus(instances=(), mode: str = "ok"):
    prom = FakePrometheus()
    prom.instances, prom.mode = list(instances), mode
    await prom.start()
    try:
        yield prom
    finally:
        await prom.close()


@contextlib.asynccontextmanager
async def discovering_gateway(prom: FakePrometheus, **options):
    config = GatewayConfig(
        targets=(),
        plan_policy=policy_from_plan(gateway_plan(), 2),
        listen=("127.0.0.1", 0),
        admin=("127.0.0.1", 0),
        admin_token=TOKEN,
        planned_cap=2,
        health_interval=0.2,
        health_timeout=0.5,
        drain_timeout=5.0,
        prometheus_url=prom.url,
        selector='job="vllm"',
        discover_every=0.1,
        discovery_timeout=0.5,
        **options,
    )
    server = Gateway(config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(drain_timeout=1.0)


def instance(url: str) -> str:
    return url.split("://", 1)[1]


def urls(server: Gateway) -> list[str]:
    return [r.url for r in server.replicas]


def no_password(*texts) -> None:
    for text in texts:
        assert PASSWORD not in (text if isinstance(text, str) else json.dumps(text))


async def test_instances_join_and_leave_and_a_leaver_finishes_its_stream(session, log_lines):
    async with (
        sim_fleet(2) as fleet,
        fake_prometheus([instance(fleet.urls[0])]) as prom,
        discovering_gateway(prom) as server,
    ):
        assert urls(server) == [fleet.urls[0]]
        assert (await send(session, server.url, completion())).status == 200
        assert prom.queries[0] == 'up{job="vllm"}'
        assert len(prom.authorizations) == 1 and next(iter(prom.authorizations)).startswith("Basic ")

        prom.instances.append(instance(fleet.urls[1]))
        assert await until(lambda: len(server.replicas) == 2)
        assert log_lines.count(f"joined from Prometheus: {instance(fleet.urls[1])}") == 1

        stream = asyncio.create_task(send(session, server.url, completion(max_tokens=60, stream=True)))
        assert await until(lambda: server.in_flight() == 1)
        holder = next(r for r in server.replicas if r.in_flight)
        other = next(r for r in server.replicas if r is not holder)
        prom.instances = [instance(other.url)]
        assert await until(lambda: holder not in server.replicas)
        shown = await state(session, server)
        assert shown["retiring"] == [{"name": holder.name, "in_flight": 1}]
        assert [r["name"] for r in shown["replicas"]] == [other.name]
        assert shown["discovery"]["replicas"] == 1 and shown["discovery"]["last_error"] == ""

        answered = holder.answered
        answers = await asyncio.gather(*(send(session, server.url, completion()) for _ in range(4)))
        assert [a.status for a in answers] == [200] * 4
        assert holder.answered == answered and other.answered >= 4

        finished = await stream
        assert finished.status == 200 and finished.done and finished.chunks >= 60
        assert await until(lambda: not server.retiring)
        assert holder.name not in server._by_name
        assert f'replica="{holder.name}"' not in server.telemetry.render().decode()
        # The same instance back: a fresh replica, under its old name, in the rotation again.
        prom.instances.append(instance(holder.url))
        assert await until(lambda: len(server.replicas) == 2)
        assert sorted(urls(server)) == sorted(fleet.urls)
        no_password(*log_lines.lines, await state(session, server))


@pytest.mark.parametrize(
    "mode, words",
    [
        ("500", "storage is on fire"),
        ("garbage", "not JSON"),
        ("hang", "no answer within"),
        ("empty", "no series"),
    ],
)
async def test_a_failing_prometheus_keeps_the_list_and_says_why(session, log_lines, mode, words):
    async with (
        sim_fleet(1) as fleet,
        fake_prometheus([instance(fleet.urls[0])]) as prom,
        discovering_gateway(prom) as server,
    ):
        first = (await state(session, server))["discovery"]
        assert first["replicas"] == 1 and first["last_success"] is not None
        assert first["source"].startswith("Prometheus at http://capcon:***@127.0.0.1:")

        prom.mode = mode
        asked = len(prom.queries)
        assert await until(lambda: bool(server.discovery.state.last_error))
        assert await until(lambda: len(prom.queries) >= asked + 3, timeout=15)
        shown = await state(session, server)
        assert words in shown["discovery"]["last_error"], shown["discovery"]
        assert shown["discovery"]["last_success"] == first["last_success"]
        assert shown["discovery"]["replicas"] == 1
        assert urls(server) == [fleet.urls[0]]
        assert (await send(session, server.url, completion())).status == 200
        assert log_lines.count("replica discovery failed") == 1  # once, however many rounds fail
        assert "\x1b" not in shown["discovery"]["last_error"] and not any("\x1b" in x for x in log_lines.lines)

        prom.mode = "ok"
        assert await until(lambda: not server.discovery.state.last_error, timeout=15)
        assert log_lines.count("answers again") == 1
        no_password(*log_lines.lines, shown, await state(session, server))


async def test_a_gateway_started_before_prometheus_answers_503_until_it_does(session, log_lines):
    async with (
        sim_fleet(1) as fleet,
        fake_prometheus([instance(fleet.urls[0])], mode="500") as prom,
        discovering_gateway(prom) as server,
    ):
        assert server.replicas == []
        assert log_lines.count("waiting for Prometheus to name the fleet's replicas") == 1
        assert log_lines.count("Prometheus at http://capcon:***@127.0.0.1:") == 1
        answer = await send(session, server.url, completion())
        assert answer.status == 503 and int(answer.headers["Retry-After"]) >= 1
        assert answer.error["code"] == "no_replica_available" and "waiting for" in answer.error["message"]
        async with session.get(server.url + "/health") as health:
            assert health.status == 503
        shown = await state(session, server)
        assert shown["discovery"]["last_success"] is None and "storage is on fire" in shown["discovery"]["last_error"]

        prom.mode = "ok"
        assert await until(lambda: urls(server) == [fleet.urls[0]], timeout=15)
        assert (await send(session, server.url, completion())).status == 200
        no_password(*log_lines.lines, answer.body.decode(), shown)


def test_a_prometheus_plan_gives_a_discovering_config(tmp_path, monkeypatch, capsys):
    from console.commands import gateway as verb
    from console.commands.gateway import build_config

    parser = argparse.ArgumentParser()
    verb.add_parser(parser.add_subparsers())
    plan = tmp_path / "plan.yaml"
    fleet = f"fleet: {{prometheus_url: 'http://capcon:{PASSWORD}@prom:9090', selector: 'job=\"vllm\"'}}\n"
    plan.write_text(PLAN.read_text() + "\n" + fleet)
    config = build_config(parser.parse_args(["gateway", str(plan), "--discover-every", "30"]))
    assert config.targets == () and config.selector == 'job="vllm"' and config.discover_every == 30
    assert config.prometheus_url == f"http://capcon:{PASSWORD}@prom:9090"
    assert PASSWORD not in repr(config)
    assert config.plan_policy.max_queue >= 1
    assert build_config(parser.parse_args(["gateway", str(plan)])).discover_every == 15

    plan.write_text(PLAN.read_text() + "\n" + fleet.replace('job="vllm"', "job=="))
    with pytest.raises(UserError) as refused:
        build_config(parser.parse_args(["gateway", str(plan)]))
    assert "fleet.selector" in str(refused.value) and PASSWORD not in str(refused.value)
