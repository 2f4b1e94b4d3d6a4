"""Every upstream answer read within bounds: size, JSON nesting, token counts; a hosted answer that is no
completion falls back instead of reaching the client."""

from __future__ import annotations

import asyncio
import json
import logging
import math

import pytest

from console.gateway import bounded_json
from console.gateway.history import SwitchHistory
from console.gateway.sse import EventRelay

from .conftest import HOSTED_KEY, completion, gateway, metric, metric_values, send, sim_fleet, state, switch, until
from .fake_upstreams import COMPLETION, scripted, sse
from .plans import gateway_plan

pytestmark = pytest.mark.timeout(60)
JSON = "application/json"
EVENTS = "text/event-stream"


def answer_with_usage(prompt: object, completion_tokens: object) -> bytes:
    data = json.loads(COMPLETION)
    data["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion_tokens}
    return json.dumps(data).encode()  # json.dumps writes NaN and Infinity as JSON's readers take them


# ---------------------------------------------------------------- the pieces


@pytest.mark.parametrize(
    "text, deep",
    [
        ("[" * 64 + "]" * 64, False),
        ("[" * 65 + "]" * 65, True),
        ("{" * 40 + "[" * 40, True),  # unbalanced: the depth reached is what counts
        ('{"a": "' + "[" * 500 + '"}', False),  # brackets inside a string are text
        ('["\\"' + "[" * 500 + '"]', False),  # an escaped quote does not end the string
        ("[]" * 10_000, False),  # many brackets, never deep
        ("[" * 60_000, True),
    ],
)
def test_the_depth_scan_counts_only_brackets_outside_strings(text, deep):
    assert bounded_json.too_deep(text) is deep
    if deep:
        with pytest.raises(ValueError, match="nested deeper than 64"):
            bounded_json.loads(text)


@pytest.mark.parametrize("data", [b"[" * 60_000, b"\xff\xfe", b"{not json", b"1" * 5000, "[" * 1000])
def test_untrusted_json_is_a_value_error_never_a_recursion_error(data):
    with pytest.raises(bounded_json.Unreadable):
        bounded_json.loads(data)


def test_a_sane_answer_reads_as_json():
    assert bounded_json.loads(COMPLETION)["choices"][0]["text"] == " whole"
    assert bounded_json.loads(json.dumps({"a": [[[[{"b": "]]]]"}]]]]}))["a"][0][0][0][0]["b"] == "]]]]"


@pytest.mark.parametrize(
    "value, count",
    [
        (0, 0),
        (17, 17),
        (10**12, 10**12),
        (12.0, 12),
        (10**12 + 1, None),
        (10**400, None),
        (-1, None),
        (True, None),
        (1.5, None),
        (math.nan, None),
        (math.inf, None),
        (1e300, None),
        ("17", None),
        (None, None),
        ([17], None),
    ],
)
def test_a_token_count_is_a_bounded_whole_number_or_unknown(value, count):
    assert bounded_json.token_count(value) == count


def test_the_event_relay_passes_whole_events_and_holds_back_a_half_one():
    relay = EventRelay(hold_limit=100)
    assert relay.feed(b"data: 1\n\ndata: 2\n") == b"data: 1\n\n"
    assert relay.feed(b"\ndata: 3") == b"data: 2\n\n"
    assert relay.feed(b"\r\n\r\n") == b"data: 3\r\n\r\n"
    assert relay.feed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n" and relay.done
    assert relay.before_error() == b""
    # An event that never ends is written through past the hold limit; an error after it starts a new event.
    assert relay.feed(b"data: " + b"x" * 200) == b"data: " + b"x" * 200
    assert not relay.done and relay.before_error() == b"\n\n"
    assert relay.rest() == b""


# ---------------------------------------------------------------- replicas


async def test_a_replica_error_of_60_kb_of_brackets_is_passed_on_as_an_error_not_a_crash(session, caplog):
    caplog.set_level(logging.INFO)
    async with (
        scripted((500, JSON, b"[" * 60_000), (200, JSON, COMPLETION)) as replica,
        gateway([replica.url]) as server,
    ):
        answer = await send(session, server.url, completion())
        assert answer.status == 500 and answer.error["code"] == "upstream_500"
        assert "Server got itself in trouble" not in answer.body.decode()
        assert (await send(session, server.url, completion())).status == 200
    assert "Traceback" not in caplog.text


async def test_a_model_list_nested_too_deep_makes_the_replica_skipped_not_the_checks_crash(session, caplog):
    caplog.set_level(logging.INFO)
    async with scripted(models=b"[" * 60_000) as replica, gateway([replica.url]) as server:
        assert not server.replicas[0].healthy and "nested deeper" in server.replicas[0].problem
        seen = await state(session, server)
        assert seen["replicas"][0]["healthy"] is False
    assert "Traceback" not in caplog.text and "health check round failed" not in caplog.text


@pytest.mark.parametrize("listing", [b'{"data": 7}', b'{"data": "llama"}', b"[1, 2]", b'{"data": [7, {"id": 3}]}'])
async def test_a_model_list_of_the_wrong_shape_is_no_models_not_a_crash(session, caplog, listing):
    caplog.set_level(logging.INFO)
    async with scripted(models=listing) as replica, gateway([replica.url]) as server:
        assert server.replicas[0].healthy and server.replicas[0].models == frozenset()
        assert (await send(session, server.url, completion())).status == 200
    assert "Traceback" not in caplog.text


async def test_a_whole_answer_past_max_response_bytes_is_a_502(session, caplog):
    caplog.set_level(logging.INFO)
    big = json.dumps({"choices": [{"text": "x" * 5000}]}).encode()
    async with (
        scripted((200, JSON, big), (200, JSON, COMPLETION)) as replica,
        gateway([replica.url], max_response_bytes=4096) as server,
    ):
        answer = await send(session, server.url, completion())
        assert answer.status == 502 and answer.error["code"] == "upstream_error"
        assert "4096 bytes" in answer.error["message"]
        assert (await send(session, server.url, completion())).status == 200
        assert server.state()["totals"]["upstream_error"] == 1
    assert "Traceback" not in caplog.text


# ---------------------------------------------------------------- the hosted endpoint


def hosted_options(url: str, **more) -> dict:
    return {
        "plan": gateway_plan(prompts_may_leave=True),
        "hosted_url": url + "/v1",
        "hosted_key": HOSTED_KEY,
        "planned_cap": 1,
        **more,
    }


async def hosted_mode(session, server) -> asyncio.Task:
    """Hosted past an empty queue, the only slot held by a stream: the next request goes to the hosted endpoint."""
    response = await switch(session, server, mode="hosted", hosted_after_queue=0, max_queue=4, max_wait_seconds=30)
    assert response.status == 200
    holder = asyncio.create_task(send(session, server.url, completion(max_tokens=20, stream=True)))
    assert await until(lambda: server.in_flight() == 1)
    return holder


async def test_absurd_usage_figures_are_unknown_and_every_later_switch_still_applies(session, caplog, tmp_path):
    caplog.set_level(logging.INFO)
    history = SwitchHistory(str(tmp_path / "history.sqlite"), "gateway-test", tally_seconds=0.2)
    history.open()
    absurd = [(10**400, -5), (1e300, True), (math.nan, math.inf), ("12", [3]), (10**12 + 1, 2.5), (7, 3)]
    async with (
        scripted(*[(200, JSON, answer_with_usage(p, c)) for p, c in absurd]) as hosted,
        sim_fleet(1) as fleet,
        gateway(fleet.urls, history=history, hosted_price_per_million=2.0, **hosted_options(hosted.url)) as server,
    ):
        holder = await hosted_mode(session, server)
        for _ in absurd:
            answer = await send(session, server.url, completion())
            assert answer.status == 200 and answer.headers["x-capcon-outcome"] == "hosted"
        await holder
        seen = await state(session, server)
        assert seen["hosted_usage"] == {"prompt_tokens": 7, "completion_tokens": 3}  # only the sane figures
        async with session.get(server.url + "/metrics") as response:
            values = metric_values(await response.text())
        assert metric(values, "capcon_gateway_hosted_tokens_total", kind="prompt") == 7
        assert metric(values, "capcon_gateway_hosted_cost_dollars_total") == pytest.approx(10 * 2.0 / 1e6)
        await asyncio.sleep(0.3)  # a tally period closes with the figures in it
        for mode in ("pass", "bounded_queue", "pass"):
            assert (await switch(session, server, mode=mode)).status == 200
        assert server.policy().mode == "pass" and server.switches == 4
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    "stream, answer",
    [
        (False, (200, JSON, b"this is not json")),
        (False, (200, JSON, b'{"id": "cmpl-1", "object": "text_completion"}')),  # no choices
        (False, (200, JSON, b'{"choices": "none"}')),
        (False, (200, JSON, b"[" * 60_000)),
        (False, (200, "text/html", b"<html>a login page</html>")),
        (True, (200, EVENTS, sse({"error": {"message": "overloaded"}}))),  # an error as the first event
        (True, (200, EVENTS, b"data: not json\n\ndata: [DONE]\n\n")),
        (True, (200, EVENTS, sse())),  # [DONE] alone: nothing was generated
        (True, (200, JSON, COMPLETION)),  # a whole answer where a stream was asked for
        (True, (200, EVENTS, b"data: " + b"[" * 60_000 + b"\n\n")),
    ],
)
async def test_a_hosted_200_that_is_no_completion_falls_back_to_the_bounded_queue(session, caplog, stream, answer):
    caplog.set_level(logging.INFO)
    async with (
        scripted(answer) as hosted,
        sim_fleet(1) as fleet,
        gateway(fleet.urls, **hosted_options(hosted.url)) as server,
    ):
        holder = await hosted_mode(session, server)
        got = await send(session, server.url, completion(max_tokens=3, stream=stream))
        assert got.status == 200 and got.headers["x-capcon-outcome"] == "local"  # waited, then served whole
        assert got.done if stream else json.loads(got.body)["choices"]
        assert hosted.posts == 1
        await holder
        assert server.state()["totals"]["hosted"] == 0
    assert "Traceback" not in caplog.text
    assert any("falls back to the bounded queue" in r.getMessage() for r in caplog.records)


async def test_a_hosted_answer_past_max_response_bytes_falls_back(session):
    big = json.dumps({"choices": [{"text": "x" * 5000}]}).encode()
    async with (
        scripted((200, JSON, big)) as hosted,
        sim_fleet(1) as fleet,
        gateway(fleet.urls, max_response_bytes=4096, **hosted_options(hosted.url)) as server,
    ):
        holder = await hosted_mode(session, server)
        got = await send(session, server.url, completion(max_tokens=3))
        assert got.status == 200 and got.headers["x-capcon-outcome"] == "local"
        await holder


def test_max_response_bytes_is_an_option_with_a_bound(capsys):
    import argparse

    from console.commands import gateway as verb
    from console.commands.gateway import build_config
    from console.gateway.__main__ import main

    parser = argparse.ArgumentParser()
    verb.add_parser(parser.add_subparsers())
    default = build_config(parser.parse_args(["gateway", "--target", "127.0.0.1:8001"]))
    assert default.max_response_bytes == bounded_json.DEFAULT_MAX_RESPONSE_BYTES == 64 * 1024 * 1024
    given = build_config(parser.parse_args(["gateway", "--target", "127.0.0.1:8001", "--max-response-bytes", "4096"]))
    assert given.max_response_bytes == 4096
    with pytest.raises(SystemExit) as stop:
        main(["--target", "127.0.0.1:8001", "--max-response-bytes", "10"])
    assert stop.value.code == 2 and "--max-response-bytes" in capsys.readouterr().err
