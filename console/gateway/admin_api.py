"""The admin API: its own listener (loopback by default), every route behind the bearer token.

GET /admin/policy, PUT /admin/policy (a switch: 200, or 400 naming the field; never 500), GET /admin/state,
GET /admin/metrics (this process's own /metrics page, for the supervisor of --workers to merge).
The gateway applies the switch and says its state; this room reads the requests and writes the answers.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from aiohttp import web

from console.gateway import answers, bounded_json
from console.gateway.telemetry import CONTENT_TYPE
from console.overflow.policy import PolicyError, as_json

if TYPE_CHECKING:
    from console.gateway.server import Gateway

ADMIN_MAX_BODY = 64 * 1024


def bearer_authorized(request: web.Request, token: str | None) -> bool:
    """The request bears `token` (compared in constant time); no token configured admits no one (the gateway
    refuses to start an admin listener without one)."""
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        presented = ""
    if token is None:
        return False
    return hmac.compare_digest(presented.strip().encode("utf-8", "replace"), token.encode())


def unauthorized() -> web.Response:
    return answers.error(
        401,
        "a valid bearer token is required (Authorization: Bearer <token>)",
        "unauthorized",
        retry_after=None,
        headers={"WWW-Authenticate": "Bearer"},
    )


def no_route(request: web.Request) -> web.Response:
    """The admin API's 404, the same from one gateway and from the workers' supervisor."""
    return answers.error(
        404,
        f"no route {request.method} {request.path[:200]}; expected GET or PUT /admin/policy, GET /admin/state",
        "not_found",
        retry_after=None,
    )


async def read_switch_body(request: web.Request) -> tuple[object, web.Response | None]:
    """A switch's JSON body, or the 413 or 400 that says why it cannot be read (nesting bounded: no reply may
    recurse past it)."""
    try:
        return bounded_json.loads(await request.read()), None
    except web.HTTPRequestEntityTooLarge:
        return None, answers.error(
            413, f"the body is over {ADMIN_MAX_BODY} bytes", "request_too_large", retry_after=None, param="body"
        )
    except (ValueError, UnicodeDecodeError, RecursionError) as problem:
        return None, answers.error(
            400,
            f'body: {problem}; expected a JSON object such as {{"mode": "pass", "reason": "...", "actor": "..."}}',
            "invalid_policy",
            retry_after=None,
            param="body",
        )


class AdminApi:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway  # policy(), plan_policy, switch(body), state(), stopping

    def app(self) -> web.Application:
        app = web.Application(client_max_size=ADMIN_MAX_BODY)
        app.router.add_get("/admin/policy", self._policy)
        app.router.add_put("/admin/policy", self._switch)
        app.router.add_get("/admin/state", self._state)
        app.router.add_get("/admin/metrics", self._metrics)  # this process's own page (workers.py merges them)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    def _authorized(self, request: web.Request) -> bool:
        return bearer_authorized(request, self.gateway.config.admin_token)

    @staticmethod
    def _unauthorized() -> web.Response:
        return unauthorized()

    async def _policy(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return web.json_response(
            {"policy": as_json(self.gateway.policy()), "plan_policy": as_json(self.gateway.plan_policy)}
        )

    async def _switch(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        body, refused = await read_switch_body(request)
        if refused is not None:
            return refused
        if self.gateway.stopping:
            return answers.error(503, "the gateway is shutting down", "shutting_down", retry_after=None)
        try:
            old, new = self.gateway.switch(body)
        except PolicyError as problem:
            return answers.error(400, str(problem), "invalid_policy", retry_after=None, param=problem.field)
        return web.json_response({"policy": as_json(new), "previous": as_json(old)})

    async def _state(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return web.json_response(self.gateway.state())

    async def _metrics(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return web.Response(body=self.gateway.telemetry.render(), headers={"Content-Type": CONTENT_TYPE})

    async def _unknown(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return no_route(request)
