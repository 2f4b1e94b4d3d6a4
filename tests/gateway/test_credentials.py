"""Credentials in an upstream's URL beside an Authorization header: every combination answers, and the one
header that goes is the documented one (console/gateway/credentials.py)."""

from __future__ import annotations

import base64
import logging
import socket

import pytest

from console.gateway import credentials
from console.overflow.policy import Policy

from .conftest import HOSTED_KEY, completion, gateway, send, state
from .fake_upstreams import scripted

pytestmark = pytest.mark.timeout(60)
CLIENT = "Bearer client-key-0123456789"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def with_credentials(url: str, userinfo: str) -> str:
    return url.replace("http://", f"http://{userinfo}@", 1)


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    "url, user, password",
    [
        ("http://h:8000", None, None),
        ("http://alice:s3cret@h:8000", "alice", "s3cret"),
        ("http://us%40er:p%3Ass%2Fword@h:8000", "us@er", "p:ss/word"),  # escaped, as a URL must hold them
        ("http://alice:pässwörd@h:8000", "alice", "pässwörd"),  # not Latin-1 only: sent as UTF-8
        ("http://token@h:8000", "token", ""),
    ],
)
def test_split_takes_the_credentials_out_of_the_url(url, user, password):
    bare, header = credentials.split(url)
    assert bare == "http://h:8000"
    assert header == (None if user is None else basic(user, password))


@pytest.mark.parametrize("target_has_credentials", [False, True])
@pytest.mark.parametrize("client_sends_authorization", [False, True])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_replica_gets_its_targets_credentials_else_the_clients_header(
    session, caplog, target_has_credentials, client_sends_authorization, stream
):
    caplog.set_level(logging.INFO)
    body = b"data: " + b'{"choices": [{"text": "x"}]}' + b"\n\ndata: [DONE]\n\n"
    answer = (200, "text/event-stream", body) if stream else None
    async with scripted(*([answer] if answer else [])) as replica:
        target = with_credentials(replica.url, "ops:pa%3Ass") if target_has_credentials else replica.url
        async with gateway([target]) as server:
            assert server.replicas[0].healthy  # the health checks get in with the same credentials
            headers = {"Authorization": CLIENT} if client_sends_authorization else {}
            got = await send(session, server.url, completion(stream=stream), headers=headers)
            assert got.status == 200 and (got.done if stream else got.body)
            async with session.get(server.url + "/v1/models", headers=headers) as models:
                assert models.status == 200
            seen = await state(session, server)
    # The target's own credentials win over the client's header; without them, the client's goes through.
    expected = basic("ops", "pa:ss") if target_has_credentials else CLIENT if client_sends_authorization else None
    generation = replica.authorizations[-2]  # the completion, then /v1/models through the gateway
    assert generation == expected
    if target_has_credentials:
        assert set(replica.authorizations) == {expected}  # health checks and the model list too
        assert "pa:ss" not in caplog.text and "pa%3Ass" not in str(seen)
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("url_has_credentials", [False, True])
@pytest.mark.parametrize("key", [None, HOSTED_KEY])
@pytest.mark.parametrize("client_sends_authorization", [False, True])
async def test_the_hosted_endpoint_gets_the_key_else_its_urls_credentials_never_the_clients(
    session, caplog, url_has_credentials, key, client_sends_authorization
):
    caplog.set_level(logging.INFO)
    async with scripted() as hosted:
        url = with_credentials(hosted.url, "acct:hosted%2Fpw") if url_has_credentials else hosted.url
        policy = Policy(mode="hosted", hosted_allowed=True, hosted_after_queue=0, reason="test")
        # The only replica refuses connections, so every request goes to the hosted endpoint.
        async with gateway([closed_port()], policy=policy, hosted_url=url + "/v1", hosted_key=key) as server:
            headers = {"Authorization": CLIENT} if client_sends_authorization else {}
            got = await send(session, server.url, completion(), headers=headers)
            assert got.status == 200 and got.headers["x-capcon-outcome"] == "hosted"
    # --hosted-key-env wins over the URL's user:password; the client's own header never leaves for the hosted API.
    expected = f"Bearer {key}" if key else basic("acct", "hosted/pw") if url_has_credentials else None
    assert hosted.authorizations == [expected]
    assert "hosted/pw" not in caplog.text and "Traceback" not in caplog.text


def test_the_command_takes_a_hosted_url_with_a_password_and_a_key(monkeypatch):
    import argparse

    from console.commands import gateway as verb
    from console.commands.gateway import build_config

    parser = argparse.ArgumentParser()
    verb.add_parser(parser.add_subparsers())
    monkeypatch.setenv("CAPCON_TEST_HOSTED_KEY", HOSTED_KEY)
    args = parser.parse_args(
        [
            "gateway",
            "--target",
            "http://ops:pw@127.0.0.1:8001",
            "--hosted-url",
            "https://acct:pw@api.example.com/v1",
            "--hosted-key-env",
            "CAPCON_TEST_HOSTED_KEY",
        ]
    )
    config = build_config(args)
    assert config.hosted_key == HOSTED_KEY and config.targets == ("http://ops:pw@127.0.0.1:8001",)
    assert "pw" not in repr(config)  # a password in a URL is as secret as the key
