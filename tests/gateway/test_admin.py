"""The admin API: a bearer token or nothing changes, bodies checked field by field, expiry, the record of switches."""

from __future__ import annotations

import logging

import pytest

from console.gateway.history import EVENT_KIND, SwitchHistory
from console.store.database import Store

from .conftest import TOKEN, auth, completion, gateway, metric, metric_values, send, sim_fleet, state, switch, until

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ],
)
async def test_a_missing_or_wrong_token_is_refused_and_nothing_changes(session, headers, caplog):
    caplog.set_level(logging.INFO, logger="capcon.gateway")
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        for method, path in (
            ("GET", "/admin/policy"),
            ("PUT", "/admin/policy"),
            ("GET", "/admin/state"),
            ("GET", "/admin/nothing"),
        ):
            async with session.request(
                method, server.admin_url + path, headers=headers, json={"mode": "pass", "reason": "x"}
            ) as response:
                assert response.status == 401
                assert response.headers["WWW-Authenticate"] == "Bearer"
                text = await response.text()
                assert (await response.json())["error"]["code"] == "unauthorized"
                assert TOKEN not in text
        assert server.policy().mode == "bounded_queue" and server.switches == 0
        assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    "body, field",
    [
        (b"{not json", "body"),
        (b"[]", "body"),
        (b'{"reason": "x"}', "mode"),
        (b'{"mode": "fast", "reason": "x"}', "mode"),
        (b'{"mode": "pass"}', "reason"),
        (b'{"mode": "pass", "reason": "x", "colour": "red"}', "colour"),
        (b'{"mode": "bounded_queue", "reason": "x", "max_queue": -1}', "max_queue"),
        (b'{"mode": "bounded_queue", "reason": "x", "max_wait_seconds": "soon"}', "max_wait_seconds"),
        (b'{"mode": "pass", "reason": "x", "for": "forever"}', "for"),
        (b'{"mode": "hosted", "reason": "x"}', "mode"),
    ],
)
async def test_a_bad_body_gets_400_naming_the_field_and_nothing_changes(session, body, field):
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        async with session.put(
            server.admin_url + "/admin/policy", data=body, headers={**auth(), "Content-Type": "application/json"}
        ) as response:
            assert response.status == 400
            error = (await response.json())["error"]
            assert error["param"] == field and error["message"]
        assert server.policy() == server.plan_policy and server.switches == 0


async def test_a_queueing_mode_without_any_cap_is_refused():
    async with sim_fleet(1) as fleet, gateway(fleet.urls, planned_cap=None) as server:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            response = await switch(session, server, mode="bounded_queue")
            assert response.status == 400
            assert (await switch(session, server, mode="bounded_queue", max_inflight_per_replica=3)).status == 200


async def test_policy_and_state_read_back(session):
    async with sim_fleet(2) as fleet, gateway(fleet.urls) as server:
        async with session.get(server.admin_url + "/admin/policy", headers=auth()) as response:
            seen = await response.json()
        assert seen["policy"]["mode"] == "bounded_queue" and seen["plan_policy"]["actor"] == "plan"
        async with session.put(
            server.admin_url + "/admin/policy",
            headers=auth(),
            json={"mode": "pass", "reason": "capacity is coming", "actor": "alice"},
        ) as response:
            assert response.status == 200
            answer = await response.json()
        assert answer["previous"]["mode"] == "bounded_queue" and answer["policy"]["mode"] == "pass"
        assert answer["policy"]["actor"] == "alice"
        assert (await send(session, server.url, completion(max_tokens=2))).status == 200
        now = await state(session, server)
        assert now["policy"]["mode"] == "pass" and now["queue"]["interactive"] == 0
        assert [r["in_flight"] for r in now["replicas"]] == [0, 0]
        assert now["counters"]["local"]["interactive"] == 1 and now["switches"] == 1


async def test_an_expired_switch_returns_to_the_plans_policy_by_itself(session, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="capcon.gateway")
    db = tmp_path / "history.sqlite"
    history = SwitchHistory(str(db), "gateway-test")
    history.open()
    async with sim_fleet(1) as fleet, gateway(fleet.urls, history=history) as server:
        response = await switch(
            session, server, mode="pass", reason="spike: let it all through", actor="bob", **{"for": 0.5}
        )
        assert response.status == 200
        assert server.policy().mode == "pass" and server.policy().expires_at is not None
        # No request arrives: the gateway's own timer switches back.
        assert await until(lambda: server.current.mode == "bounded_queue", timeout=10)
        assert server.current.from_plan
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())
        assert metric(values, "capcon_gateway_mode", mode="bounded_queue") == 1.0
        assert metric(values, "capcon_gateway_policy_switches_total") == 2
    lines = [r.getMessage() for r in caplog.records if "overflow switch" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith("overflow switch by bob at ") and "bounded_queue -> pass" in lines[0]
    assert "reason: spike: let it all through" in lines[0] and "until " in lines[0] and "max_queue=" in lines[0]
    assert lines[1].startswith("overflow switch by gateway") and "pass -> bounded_queue" in lines[1]
    store = Store.open(db, read_only=True)
    try:
        events = [e for e in store.events() if e.kind == EVENT_KIND]
    finally:
        store.close()
    assert len(events) == 2
    first, second = events
    assert first.fleet == "gateway-test" and first.subject == "bounded_queue -> pass"
    assert first.detail["actor"] == "bob" and first.detail["reason"] == "spike: let it all through"
    assert first.detail["from"] == "bounded_queue" and first.detail["to"] == "pass"
    assert "max_queue" in first.detail["parameters"] and first.detail["expires_at"] > first.at
    assert second.detail["expired"] is True and second.detail["to"] == "bounded_queue"
    assert TOKEN.encode() not in db.read_bytes()


async def test_the_state_never_shows_a_replica_urls_credentials(session):
    async with sim_fleet(1) as fleet:
        secret = "hunter2-replica-password"
        with_secret = [url.replace("http://", f"http://ops:{secret}@") + f"?token={secret}" for url in fleet.urls]
        async with gateway(with_secret) as server:
            shown = await state(session, server)
    assert len(shown["replicas"]) == 1
    assert secret not in str(shown)  # neither the password nor the token, in names or URLs


@pytest.mark.parametrize("field", ["reason", "actor"])
async def test_control_characters_alone_are_no_reason_and_no_actor(session, field):
    async with sim_fleet(1) as fleet, gateway(fleet.urls) as server:
        before = server.policy()
        body = {"mode": "pass", "reason": "spike", "actor": "alice", field: "\x1b\x07\t\x00\x7f"}
        async with session.put(server.admin_url + "/admin/policy", json=body, headers=auth()) as response:
            assert response.status == 400
            assert (await response.json())["error"]["param"] == field
        assert server.policy() == before
