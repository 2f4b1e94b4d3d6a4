"""The switch's HTTP requests on the standard library: bounded, never redirected, failures in words."""

from __future__ import annotations

import base64
import contextlib
import socket

import pytest
from aiohttp import web

from console.live.admin_http import HttpFailure, failure_words, http_request

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def server(handler):
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_an_answer_is_read_up_to_its_limit_and_a_redirect_is_not_followed():
    seen = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path, request.headers.get("Authorization"), await request.read()))
        if request.path == "/moved":
            raise web.HTTPFound("http://127.0.0.1:9/elsewhere")
        return web.Response(body=b"x" * 10_000)

    async with server(handler) as address:
        answer = await http_request("PUT", f"http://{address}/admin/policy", {"A": "b"}, b"{}", 5.0, 100)
        assert answer.status == 200 and answer.body == b"x" * 100
        moved = await http_request("GET", f"http://{address}/moved", {}, None, 5.0, 100)
        assert moved.status == 302  # the token is never sent on to another address
        await http_request("GET", f"http://ops:s%40cret@{address}/basic", {}, None, 5.0, 100)
    assert seen[0][:2] == ("PUT", "/admin/policy") and seen[0][3] == b"{}"
    assert [s[1] for s in seen] == ["/admin/policy", "/moved", "/basic"]  # nothing asked of the redirect's target
    assert seen[2][2] == "Basic " + base64.b64encode(b"ops:s@cret").decode()


async def test_failures_are_said_in_words():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(OSError) as refused:
        await http_request("GET", f"http://127.0.0.1:{port}/", {}, None, 2.0, 10)
    assert failure_words(refused.value, 2.0) == "not answering (connection refused or unreachable)"

    silent = socket.socket()  # accepts (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        with pytest.raises((TimeoutError, socket.timeout)) as waited:
            await http_request("GET", f"http://127.0.0.1:{silent.getsockname()[1]}/", {}, None, 0.5, 10)
    finally:
        silent.close()
    assert failure_words(waited.value, 0.5) == "no answer within 0.5 s"

    for url in ("ftp://127.0.0.1/", "http:///nohost", "http://127.0.0.1:99999/"):
        with pytest.raises(HttpFailure) as bad:
            await http_request("GET", url, {}, None, 1.0, 10)
        assert failure_words(bad.value, 1.0) == "not a URL that can be asked"
    assert failure_words(ValueError("other"), 1.0) is None
