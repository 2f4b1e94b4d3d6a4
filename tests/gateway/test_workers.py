"""`capcon gateway --workers N`: processes sharing one port, each enforcing its share; one admin API, one page.

The merging on its own (console/gateway/worker_merge.py), then the real command with 2 workers in front of a
simulated replica: a switch reaches both, the bounded queue's cap and the in-flight cap hold across both,
/metrics on the shared port is their sum, SIGTERM stops them all.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from console.gateway.telemetry import Telemetry
from console.gateway.worker_merge import merge_pages, merge_states, share, shared_switch
from console.overflow.policy import Policy

from .conftest import TOKEN, auth, completion, metric, metric_values, running, send, sim_fleet, until

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]


def page(local: int, waiting: int, mode: str = "pass") -> str:
    telemetry = Telemetry(["r1"], queue_length=lambda q: waiting, in_flight=lambda n: 1, healthy=lambda n: True)
    telemetry.policy(Policy(mode=mode))
    for _ in range(local):
        telemetry.answered("local", "interactive")
    telemetry.queued("interactive", waiting)
    return telemetry.render().decode()


def test_pages_merge_counts_summed_and_the_policy_once():
    merged = merge_pages([page(3, 2), page(4, 1)])
    values = metric_values(merged)
    assert metric(values, "capcon_gateway_requests_total", outcome="local", **{"class": "interactive"}) == 7
    assert metric(values, "capcon_gateway_queue_length", queue="interactive") == 3
    assert metric(values, "capcon_gateway_queue_length_max", queue="interactive") == 3
    assert metric(values, "capcon_gateway_in_flight", replica="r1") == 2
    assert metric(values, "capcon_gateway_mode", mode="pass") == 1  # held alike: said once, not summed
    assert metric(values, "capcon_gateway_replica_healthy", replica="r1") == 1
    names = {f.name for f in text_string_to_metric_families(merged)}
    assert {"capcon_gateway_requests", "capcon_gateway_client_ttft_seconds", "capcon_gateway_policy_info"} <= names


def test_states_merge_and_a_switch_is_shared_out():
    one = {
        "policy": {"mode": "bounded_queue"},
        "queue": {"interactive": 2, "batch": 0, "max_queue": 2, "max_batch_queue": 500, "peak": {"interactive": 2}},
        "in_flight": 1,
        "cap_per_replica": 1,
        "replicas": [{"name": "r1", "healthy": True, "in_flight": 1, "answered": 5, "refused_connections": 0}],
        "counters": {"local": {"interactive": 5, "deferrable": 0}},
        "totals": {"local": 5, "rejected": 1},
        "completions_per_second": 1.5,
        "hosted_usage": {"prompt_tokens": 0, "completion_tokens": 0},
        "stopping": False,
    }
    two = {**one, "in_flight": 0, "totals": {"local": 2, "rejected": 3}, "completions_per_second": None}
    merged = merge_states([one, two])
    assert merged["queue"]["max_queue"] == 4 and merged["queue"]["peak"] == {"interactive": 4}
    assert merged["in_flight"] == 1 and merged["cap_per_replica"] == 2
    assert merged["totals"] == {"local": 7, "rejected": 4} and merged["counters"]["local"]["interactive"] == 10
    assert merged["replicas"][0]["answered"] == 10 and merged["completions_per_second"] is None
    assert merged["policy"] == one["policy"] and len(merged["workers"]) == 2
    body = {"mode": "bounded_queue", "max_queue": 5, "max_inflight_per_replica": 3, "hosted_after_queue": 0}
    assert shared_switch(body, 2) == {**body, "max_queue": 3, "max_inflight_per_replica": 2}
    wrong = {"mode": "bounded_queue", "max_queue": "many", "max_batch_queue": True}
    assert shared_switch(wrong, 2) == wrong  # left for the worker to refuse in its own words
    assert share(1, 4) == 1 and share(0, 4, least=0) == 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
SWITCH = st.dictionaries(st.sampled_from(["mode", "max_queue", "max_batch_queue", "hosted_after_queue", "x"]), JSON)


@given(body=JSON | SWITCH, workers=st.integers(1, 64))
def test_sharing_out_any_json_body_never_fails_and_never_grows_a_limit(body, workers):
    shared = shared_switch(body, workers)
    if isinstance(body, dict):
        for name, value in body.items():
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                assert 0 < shared[name] <= value


async def read_until_ready(process) -> tuple[str, str, list[int]]:
    url = admin = None
    pids: list[int] = []
    while not (url and admin):
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line, f"the gateway ended: {(await process.stderr.read()).decode()}"
        if match := re.search(r"listening on (http://\S+) with 2 workers \(SO_REUSEPORT\), pids ([\d ]+)", line):
            url, pids = match[1], [int(p) for p in match[2].split()]
        if match := re.match(r"admin API on (http://\S+):", line):
            admin = match[1]
    return url, admin, pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_two_workers_share_the_port_a_switch_reaches_both_and_the_caps_hold_across_both(session):
    async with sim_fleet(1) as fleet:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "CAPCON_TEST_TOKEN": TOKEN}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "console.gateway",
            "--target",
            fleet.urls[0],
            "--workers",
            "2",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--admin-token-env",
            "CAPCON_TEST_TOKEN",
            "--health-interval",
            "0.5",
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            url, admin, pids = await read_until_ready(process)
            assert len(pids) == 2 and all(alive(p) for p in pids)
            # One switch through the one admin API: the whole gateway's limits, each worker its half.
            body = {
                "mode": "bounded_queue",
                "max_queue": 4,
                "max_inflight_per_replica": 2,
                "max_wait_seconds": 60,
                "reason": "two workers",
                "actor": "pytest",
            }
            async with session.put(admin + "/admin/policy", json=body, headers=auth()) as answer:
                switched = await answer.json()
            assert answer.status == 200 and switched["workers"] == 2 and switched["policy"]["max_queue"] == 2
            async with session.get(admin + "/admin/state", headers=auth()) as answer:
                state = await answer.json()
            assert [w["policy"]["mode"] for w in state["workers"]] == ["bounded_queue", "bounded_queue"]
            assert [w["policy"]["reason"] for w in state["workers"]] == ["two workers", "two workers"]
            assert state["queue"]["max_queue"] == 4 and state["cap_per_replica"] == 2

            # 16 streams at once, each on its own connection: the kernel spreads them over the two workers.
            streams = [
                asyncio.create_task(send(session, url, completion(max_tokens=30, stream=True))) for _ in range(16)
            ]
            most_running = 0

            def watch() -> bool:
                nonlocal most_running
                most_running = max(most_running, running(fleet))
                return all(s.done() for s in streams)

            assert await until(watch, timeout=90, step=0.01)
            answers = [s.result() for s in streams]
            statuses = sorted(a.status for a in answers)
            assert set(statuses) <= {200, 429} and statuses.count(200) <= 6  # 2 in flight + 4 waiting, at most
            assert all(a.done for a in answers if a.status == 200)
            assert most_running <= 2  # the in-flight cap held across both workers
            async with session.get(admin + "/admin/state", headers=auth()) as answer:
                state = await answer.json()
            peaks = [w["queue"]["peak"]["interactive"] for w in state["workers"]]
            assert all(p <= 2 for p in peaks) and sum(peaks) <= 4  # the queue's bound held across both
            served = [sum(w["totals"].values()) for w in state["workers"]]
            assert all(n > 0 for n in served) and sum(served) == 16  # both took connections
            # /metrics on the shared port, whichever worker answers: the sum of both.
            for _ in range(3):
                async with session.get(url + "/metrics") as answer:
                    values = metric_values(await answer.text())
                total = sum(v for (name, _), v in values.items() if name == "capcon_gateway_requests_total")
                assert total == 16
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 30) == 0
            assert "stopped." in (await process.stdout.read()).decode()
            assert not any(alive(p) for p in pids)  # the workers stopped with it
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        err = (await process.stderr.read()).decode()
        assert "Traceback" not in err and TOKEN not in err
