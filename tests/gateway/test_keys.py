"""The plan's overflow section configures the whole front door: the hosted key and price, and the clients'
API keys whose requests are deferrable. Keys come from the environment and never show."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import pytest

from console.commands import gateway as verb
from console.gateway.__main__ import main
from console.gateway.server import Gateway
from console.overflow.clients import key_digests

from .conftest import (
    HOSTED_KEY,
    auth,
    completion,
    gateway,
    hosted_endpoint,
    metric,
    metric_values,
    send,
    sim_fleet,
    state,
    switch,
    until,
)
from .test_queue import check_refusal

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
BASE = (REPO / "plans" / "internal-assistant-18rps.yaml").read_text()
BATCH_KEYS = ("batch-client-key-0123456789", "nightly-client-key-9876543210")
OTHER_KEY = "chat-client-key-5555555555"


def plan_file(tmp_path, hosted_url: str = "http://127.0.0.1:9/v1", mode: str = "bounded_queue", **keys) -> Path:
    """The shipped plan with prompts allowed out and an overflow section holding `keys`."""
    overflow = "".join(f"  {key}: {value}\n" for key, value in keys.items())
    text = BASE.replace("prompts_may_leave: false", "prompts_may_leave: true").replace(
        "overflow:\n  mode: bounded_queue\n",
        f"overflow:\n  mode: {mode}\n  hosted_url: {hosted_url}\n  hosted_model: hosted-big\n{overflow}",
    )
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def config_of(*argv: str):
    parser = argparse.ArgumentParser()
    verb.add_parser(parser.add_subparsers())
    return verb.build_config(parser.parse_args(["gateway", *argv]))


@pytest.fixture
def keys_env(monkeypatch):
    monkeypatch.setenv("CAPCON_TEST_HOSTED_KEY", HOSTED_KEY)
    monkeypatch.setenv("CAPCON_TEST_OTHER_HOSTED_KEY", "other-hosted-key-000000")
    monkeypatch.setenv("CAPCON_TEST_BATCH_KEYS", " , ".join(BATCH_KEYS))
    monkeypatch.setenv("CAPCON_TEST_ONE_BATCH_KEY", OTHER_KEY)
    monkeypatch.setenv("CAPCON_TEST_NO_KEYS", " , ,")
    monkeypatch.delenv("CAPCON_TEST_UNSET", raising=False)


def test_the_plan_names_the_variables_and_sets_the_price(tmp_path, keys_env):
    path = plan_file(
        tmp_path,
        hosted_key_env="CAPCON_TEST_HOSTED_KEY",
        hosted_price_per_million=2.5,
        deferrable_keys_env="CAPCON_TEST_BATCH_KEYS",
    )
    config = config_of(str(path), "--target", "127.0.0.1:8001")
    assert config.hosted_key == HOSTED_KEY and config.hosted_price_per_million == 2.5
    assert config.deferrable_keys == key_digests(",".join(BATCH_KEYS))
    shown = repr(config)
    assert HOSTED_KEY not in shown and not any(key in shown for key in BATCH_KEYS)


def test_the_options_win_over_the_plan(tmp_path, keys_env):
    path = plan_file(
        tmp_path,
        hosted_key_env="CAPCON_TEST_HOSTED_KEY",
        hosted_price_per_million=2.5,
        deferrable_keys_env="CAPCON_TEST_BATCH_KEYS",
    )
    config = config_of(
        str(path),
        "--target",
        "127.0.0.1:8001",
        "--hosted-key-env",
        "CAPCON_TEST_OTHER_HOSTED_KEY",
        "--hosted-price-per-million",
        "0.5",
        "--deferrable-keys-env",
        "CAPCON_TEST_ONE_BATCH_KEY",
    )
    assert config.hosted_key == "other-hosted-key-000000" and config.hosted_price_per_million == 0.5
    assert config.deferrable_keys == key_digests(OTHER_KEY)


def test_no_plan_keys_no_options_nothing_set(tmp_path, keys_env):
    config = config_of(str(plan_file(tmp_path)), "--target", "127.0.0.1:8001")
    assert config.hosted_key is None and config.hosted_price_per_million is None
    assert config.deferrable_keys == frozenset()
    without_plan = config_of("--target", "127.0.0.1:8001", "--deferrable-keys-env", "CAPCON_TEST_BATCH_KEYS")
    assert without_plan.deferrable_keys == key_digests(",".join(BATCH_KEYS))


@pytest.mark.parametrize(
    "keys, extra, words",
    [
        (
            {"deferrable_keys_env": "CAPCON_TEST_UNSET"},
            (),
            "the plan's overflow.deferrable_keys_env CAPCON_TEST_UNSET: the variable is not set or empty",
        ),
        (
            {"deferrable_keys_env": "CAPCON_TEST_NO_KEYS"},
            (),
            "the plan's overflow.deferrable_keys_env CAPCON_TEST_NO_KEYS: the variable lists no key",
        ),
        (
            {"hosted_key_env": "CAPCON_TEST_UNSET"},
            (),
            "the plan's overflow.hosted_key_env CAPCON_TEST_UNSET: the variable is not set or empty",
        ),
        ({}, ("--deferrable-keys-env", "CAPCON_TEST_UNSET"), "--deferrable-keys-env CAPCON_TEST_UNSET: the variable"),
        ({}, ("--deferrable-keys-env", "NOT-A-NAME"), "--deferrable-keys-env 'NOT-A-NAME': expected the name"),
    ],
)
def test_a_missing_or_empty_variable_stops_the_gateway_with_exit_2(tmp_path, capsys, keys_env, keys, extra, words):
    path = plan_file(tmp_path, **keys)
    code = main([str(path), "--target", "127.0.0.1:8001", *extra])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    assert " , ," not in err and OTHER_KEY not in err


async def test_a_listed_key_is_deferred_in_defer_mode_others_stay_interactive(session, caplog):
    caplog.set_level(logging.DEBUG)
    digests = key_digests(",".join(BATCH_KEYS))
    async with (
        sim_fleet(1) as fleet,
        gateway(fleet.urls, off_peak=lambda now: 3600.0, deferrable_keys=digests) as server,
    ):
        assert (await switch(session, server, mode="defer")).status == 200
        answers = {}
        for key in BATCH_KEYS:
            answers[key] = await send(session, server.url, completion(), headers={"Authorization": f"Bearer {key}"})
        # The operator's list decides, whatever the client says of itself.
        claimed = await send(
            session,
            server.url,
            completion(),
            headers={"Authorization": f"Bearer {BATCH_KEYS[0]}", "x-capcon-class": "interactive"},
        )
        other = await send(
            session, server.url, completion(max_tokens=2), headers={"Authorization": f"Bearer {OTHER_KEY}"}
        )
        anonymous = await send(session, server.url, completion(max_tokens=2))
        for deferred in (*answers.values(), claimed):
            assert deferred.status == 429 and deferred.error["code"] == "deferred"
            assert deferred.headers["Retry-After"] == "3600"
            check_refusal(deferred)
        assert other.status == 200 and other.headers["x-capcon-outcome"] == "local"
        assert anonymous.status == 200 and anonymous.headers["x-capcon-outcome"] == "local"
        counters = server.state()["counters"]
        assert counters["deferred"]["deferrable"] == 3 and counters["local"]["interactive"] == 2

        admin_state = await state(session, server)
        async with session.get(server.url + "/metrics") as response:
            metrics_text = await response.text()
        async with session.get(server.admin_url + "/admin/policy", headers=auth()) as response:
            policy_text = await response.text()
        values = metric_values(metrics_text)
        assert metric(values, "capcon_gateway_requests_total", outcome="deferred", **{"class": "deferrable"}) == 3
        seen = (
            repr(admin_state)
            + metrics_text
            + policy_text
            + caplog.text
            + b"".join(a.body for a in (*answers.values(), claimed, other, anonymous)).decode()
            + repr(server.config)
        )
        for key in (*BATCH_KEYS, OTHER_KEY):
            assert key not in seen


async def test_without_defer_mode_a_listed_key_is_served_and_counted_deferrable(session):
    async with sim_fleet(1) as fleet, gateway(fleet.urls, deferrable_keys=key_digests(BATCH_KEYS[0])) as server:
        answer = await send(
            session, server.url, completion(max_tokens=2), headers={"Authorization": f"Bearer {BATCH_KEYS[0]}"}
        )
        assert answer.status == 200
        assert server.state()["counters"]["local"]["deferrable"] == 1


async def test_the_hosted_key_and_price_of_the_plan_are_used(session, tmp_path, keys_env):
    async with hosted_endpoint() as endpoint, sim_fleet(1) as fleet:
        path = plan_file(
            tmp_path,
            hosted_url=endpoint.url,
            mode="hosted",
            hosted_key_env="CAPCON_TEST_HOSTED_KEY",
            hosted_price_per_million=3.0,
        )
        config = _hosted_config(str(path), fleet.urls[0])
        server = Gateway(config)
        await server.start()
        try:
            holder = asyncio.create_task(send(session, server.url, completion(max_tokens=60, stream=True)))
            assert await until(lambda: server.in_flight() == 1)
            answer = await send(session, server.url, completion(max_tokens=6))
            assert answer.status == 200 and answer.headers["x-capcon-outcome"] == "hosted"
            assert endpoint.requests == 1 and endpoint.refused_tokens == 0  # the key from the plan's variable
            usage = server.state()["hosted_usage"]
            async with session.get(server.url + "/metrics") as response:
                metrics_text = await response.text()
            total = usage["prompt_tokens"] + usage["completion_tokens"]
            cost = metric(metric_values(metrics_text), "capcon_gateway_hosted_cost_dollars_total")
            assert total > 0 and cost == pytest.approx(total * 3.0 / 1e6)
            assert HOSTED_KEY not in metrics_text + answer.body.decode()
            await holder
        finally:
            await server.stop(drain_timeout=1.0)


def _hosted_config(path: str, target: str):
    """No key or price option: they come from the plan."""
    return config_of(
        path, "--target", target, "--listen", "127.0.0.1:0", "--max-inflight", "1", "--hosted-after-queue", "0"
    )
