"""Source `gateway`: a real gateway's /metrics read into its figures; anything else is a bad payload, never a crash."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.live.gateways import GatewayWatch
from console.metrics.figures import ReplicaState
from console.sources.gateway import GatewaySource, read_gateway_page
from console.targets import Target
from tests.gateway.conftest import completion, gateway, send, sim_fleet, switch


async def test_a_real_gateways_page_gives_its_counts_queue_and_the_policy_in_force():
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=1) as server:
        watch = GatewayWatch([server.url], window_seconds=30.0)
        try:
            first = await watch.poll()
            assert first.figures.answering == 1 and first.figures.admitted_per_second is None  # one sample: no rate
            async with aiohttp.ClientSession() as session:
                answers = await asyncio.gather(
                    *(send(session, server.url, completion(max_tokens=6)) for _ in range(12))
                )
                assert (
                    await switch(session, server, mode="pass", actor="alice", reason="spike", **{"for": "30m"})
                ).status == 200
            await asyncio.sleep(0.2)
            seen = (await watch.poll()).figures
        finally:
            await watch.aclose()
        served = sum(a.status == 200 for a in answers)
        refused = sum(a.status == 429 for a in answers)
        elapsed = seen.at - first.figures.at
        assert seen.admitted_per_second * elapsed == pytest.approx(served, abs=0.01)
        assert seen.rejected_per_second * elapsed == pytest.approx(refused, abs=0.01)
        assert seen.policy.mode == "pass" and seen.policy.actor == "alice" and not seen.policy.from_plan
        assert seen.policy.expires_at is not None and seen.policy.expires_at - seen.policy.set_at == 1800


async def test_a_gateway_not_answering_and_a_replica_given_as_a_gateway_are_said():
    async with sim_fleet(1) as fleet:
        watch = GatewayWatch([fleet.urls[0], "http://127.0.0.1:9"], window_seconds=30.0)
        try:
            seen = (await watch.poll()).figures
        finally:
            await watch.aclose()
    assert seen.answering == 0 and seen.gateways == 2
    assert "no capcon_gateway_ metrics" in seen.error and "cannot connect" in seen.error


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_page_is_read_or_refused_as_a_bad_payload(text):
    source = GatewaySource([Target("g", "http://127.0.0.1:9/metrics")])
    result = source.read_page(source.targets[0], None, text.encode("utf-8", "surrogatepass"), 1.0)
    assert result.state in (ReplicaState.UP, ReplicaState.BAD_PAYLOAD)
    if result.state is ReplicaState.BAD_PAYLOAD:
        assert result.error.startswith("page not read:")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60), st.floats(allow_nan=True))
def test_hostile_labels_and_values_in_a_gateway_family(label, value):
    escaped = label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    page = (
        "# TYPE capcon_gateway_policy_info gauge\n"
        f'capcon_gateway_policy_info{{mode="{escaped}",actor="{escaped}",set_at="{escaped}"}} 1.0\n'
        "# TYPE capcon_gateway_requests_total counter\n"
        f'capcon_gateway_requests_total{{outcome="local",class="interactive"}} {value!r}\n'
    )
    try:
        sample = read_gateway_page(page, 1.0)
    except ValueError:
        return  # refused whole: fine
    assert len(sample.policy.mode) <= 40 and len(sample.policy.actor) <= 100
    assert all(v == v for v in sample.outcomes.values())  # NaN or infinite is left out, never a count
