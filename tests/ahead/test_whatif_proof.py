"""The what-if's proof, against the simulator whose truth we control: predict a lever, pull it, measure it.

A fleet of three simulated replicas with the third down (a replica that could be started), a real
`capcon gateway` in front in mode pass, and this test's own clients sending streamed requests at a
low rate. `capcon whatif` reads that fleet (its TPOT for the correction, the gateway's mode) and
predicts a spike with +1 replica and another with a bounded queue. Then each lever is pulled on
the fleet (the third replica started; the gateway switched through its admin API), the spike is
sent by the clients, and what they saw (TTFT p95 to the first streamed token, the share refused with
429 or 503) is held against the prediction: TTFT p95 within 25 %, the refused share within 5 points.

The plan is a 70B model on a slow accelerator (about 125 ms a step), so a replica saturates at a
couple of requests a second: the spike costs this machine little CPU, and a few milliseconds of
event-loop jitter are small beside a step.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import sys
from dataclasses import dataclass, field

import aiohttp
import pytest

from console.plan.schema import load_plan
from console.sim.fleet import SimFleet
from console.sim.shape import replica_shape
from console.sim.traffic import LengthSampler
from tests.sim.running import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PLAN_TEXT = """\
name: whatif-proof
timezone: UTC
model: {name: llama-70b, parameters: 70B, layers: 80, kv_heads: 8, head_dim: 128,
        weight_precision: int8, kv_precision: fp16, max_model_len: 8192}
gpu: {memory_gb: 80, bandwidth_tb_s: 0.4, tflops_bf16: 200, price_per_hour: 1.0}
replica: {tensor_parallel: 2, max_num_seqs: 16}
workloads:
  - name: assistant
    kind: interactive
    arrivals: {weekday: [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0,
                         2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
               weekend: [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0,
                         2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]}
    tokens: {input_mean: 200, input_p95: 400, output_mean: 60, output_max: 120}
    targets: {ttft_p95_seconds: 1.5, tpot_p95_seconds: 0.25}
capacity: {rps_per_replica: 1.0, source: manual}
redundancy: 0
data: {prompts_may_leave: false}
overflow: {mode: bounded_queue, max_queue: 4, max_wait_seconds: 2}
"""
TOKEN = "whatif-proof-admin-token-0123456789"
BASE_RPS = 0.6  # before the spike: the fleet is read at this load
# The spike each lever meets: one that three replicas hold (+1 replica), and twice what two replicas hold
# behind the gateway's in-flight cap (the bounded queue), where the refused share is large and steady.
MORE_RPS, MORE_SECONDS = 3.3, 30.0
QUEUE_RPS, QUEUE_SECONDS = 4.5, 60.0
MAX_QUEUE = 8
MAX_WAIT = 2.0


@dataclass
class Seen:
    """What the test's clients saw: each answered request's TTFT, and the count refused."""

    ttfts: list[float] = field(default_factory=list)
    refused: int = 0
    other: int = 0
    sent: int = 0

    def ttft_p95(self) -> float:
        ordered = sorted(self.ttfts)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]

    @property
    def refused_share(self) -> float:
        return self.refused / max(1, self.sent)


async def one_request(session, url: str, body: dict, seen: Seen) -> None:
    clock = asyncio.get_running_loop().time
    sent = clock()
    seen.sent += 1
    try:
        async with session.post(url + "/v1/completions", json=body) as response:
            if response.status in (429, 503):
                seen.refused += 1
                await response.read()
                return
            if response.status != 200:
                seen.other += 1
                return
            first = None
            async for line in response.content:
                if first is None and line.startswith(b"data:") and not line.startswith(b"data: [DONE]"):
                    first = clock()
                    seen.ttfts.append(first - sent)
    except (TimeoutError, aiohttp.ClientError):
        seen.other += 1


async def offer(session, url: str, rps: float, seconds: float, sampler: LengthSampler, seed: int) -> Seen:
    """Poisson arrivals at `rps` for `seconds`, every request streamed; waits for the answers."""
    rng = random.Random(seed)
    seen = Seen()
    tasks = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    at = 0.0
    while True:
        at += rng.expovariate(rps)
        if at >= seconds:
            break
        await asyncio.sleep(max(0.0, start + at - loop.time()))
        prompt, _answer, max_tokens = sampler.draw(rng)
        body = {"model": "llama-70b", "prompt": [1] * prompt, "max_tokens": max_tokens, "stream": True}
        tasks.append(asyncio.create_task(one_request(session, url, body, seen)))
    await asyncio.gather(*tasks)
    return seen


async def start_gateway(plan_path, targets: list[str]) -> tuple[asyncio.subprocess.Process, str, str]:
    args = [sys.executable, "-m", "console", "gateway", str(plan_path), "--listen", "127.0.0.1:0"]
    args += ["--admin", "127.0.0.1:0", "--admin-token-env", "WHATIF_PROOF_TOKEN", "--mode", "pass"]
    args += ["--health-interval", "0.3"]
    for target in targets:
        args += ["--target", target]
    process = await asyncio.create_subprocess_exec(
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "WHATIF_PROOF_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"},
    )
    url = admin = None
    while url is None or admin is None:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line, "capcon gateway did not start"
        if match := re.search(r"listening on (http://\S+)", line):
            url = match[1]
        if match := re.search(r"admin API on (http://[^\s:]+:\d+)", line):
            admin = match[1]

    async def drain() -> None:
        while await process.stdout.readline():
            pass

    asyncio.get_running_loop().create_task(drain())
    return process, url, admin


async def healthy_replicas(session, url: str) -> int:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    return sum(
        1 for line in text.splitlines() if line.startswith("capcon_gateway_replica_healthy{") and line.endswith(" 1.0")
    )


async def until_healthy(session, url: str, count: int) -> None:
    for _ in range(200):
        if await healthy_replicas(session, url) == count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the gateway never saw {count} healthy replicas")


async def whatif(plan_path, targets: list[str], gateway: str, rps: float, *lever: str) -> dict:
    args = [sys.executable, "-m", "console", "whatif", str(plan_path), "--gateway", gateway, "--interval", "3"]
    for target in targets:
        args += ["--target", target]
    args += ["--rps", str(rps), "--minutes", "1", *lever, "--json"]
    process = await asyncio.create_subprocess_exec(
        *args, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def test_the_what_if_predicts_what_pulling_the_lever_then_does(tmp_path):
    plan_path = tmp_path / "proof.yaml"
    plan_path.write_text(PLAN_TEXT)
    plan = load_plan(str(plan_path), None)
    shape = replica_shape(plan)
    sampler = LengthSampler(plan.workloads[0].tokens, min(shape.max_model_len, shape.kv_capacity_tokens))
    timeout = aiohttp.ClientTimeout(total=120)
    async with (
        SimFleet(plan, 3, traffic="off", gpu_pages=False, seed=3) as fleet,
        aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        await fleet.fault(2, "down")  # the replica the lever starts
        gateway, url, admin = await start_gateway(plan_path, fleet.urls)
        try:
            await until_healthy(session, url, 2)
            base = asyncio.create_task(offer(session, url, BASE_RPS, 20.0, sampler, seed=1))
            await asyncio.sleep(3.0)
            # The replica is started at once below (a warm standby): no model load to wait for.
            predicted = await whatif(plan_path, fleet.urls, url, MORE_RPS, "--replicas", "+1", "--lead-time", "0")
            queue_lever = ["--mode", "bounded_queue", "--max-queue", str(MAX_QUEUE), "--max-wait", str(MAX_WAIT)]
            predicted_queue = await whatif(plan_path, fleet.urls, url, QUEUE_RPS, *queue_lever)
            await base
            assert predicted["observed"]["replicas"] == 2
            now, more = predicted["scenarios"][:2]
            bounded = predicted_queue["scenarios"][1]
            assert now["mode"] == "pass" and more["mode"] == "pass" and more["replicas"] == 3
            assert bounded["name"] == f"bounded queue {MAX_QUEUE}"

            # Lever 1: the third replica started; the spike sent.
            await fleet.clear_fault(2, "down")
            await until_healthy(session, url, 3)
            with_more = await offer(session, url, MORE_RPS, MORE_SECONDS, sampler, seed=2)

            # Lever 2: back to two replicas, a bounded queue switched on; the same spike.
            await fleet.fault(2, "down")
            await until_healthy(session, url, 2)
            body = {"mode": "bounded_queue", "max_queue": MAX_QUEUE, "max_wait_seconds": MAX_WAIT, "reason": "proof"}
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with session.put(admin + "/admin/policy", json=body, headers=headers) as response:
                assert response.status == 200, await response.text()
            with_queue = await offer(session, url, QUEUE_RPS, QUEUE_SECONDS, sampler, seed=4)
        finally:
            gateway.terminate()
            await gateway.wait()
    figures = {
        "+1 replica": (more["ttft_p95_seconds"], with_more.ttft_p95(), more["refused_share"], with_more.refused_share),
        "bounded queue": (
            bounded["ttft_p95_seconds"],
            with_queue.ttft_p95(),
            bounded["refused_share"],
            with_queue.refused_share,
        ),
    }
    print(json.dumps({"observed": predicted["observed"], "correction": predicted["correction"], "figures": figures}))
    assert with_more.other == with_queue.other == 0
    for name, (ttft_said, ttft_seen, refused_said, refused_seen) in figures.items():
        assert ttft_seen == pytest.approx(ttft_said, rel=0.25), name
        assert refused_seen == pytest.approx(refused_said, abs=0.05), name
    assert with_queue.refused_share > 0.05  # the bounded queue did refuse: the spike was past two replicas
