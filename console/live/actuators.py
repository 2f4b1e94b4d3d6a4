"""Who carries out a policy switch: capcon's gateways, a signed webhook, or a command, behind one interface.

Each actuator has a `name` shown to operators and written to the history (URLs redacted, never a token
or a secret) and `async apply(body) -> ActuatorAnswer`, which never raises: a refusal, a timeout, a
program that cannot start are answers, said in words. `apply_all` asks them all at once and keeps
their order, so the report reads like the plan's list.

A team that runs its own gateway (LiteLLM, Envoy, a Kubernetes gateway) wires the same switch with a
webhook (the policy JSON, signed: `X-Capcon-Signature: sha256=HMAC(secret, "timestamp.body")`) or a
command (the policy JSON on standard input, the exit code as the answer).

The HTTP requests go through console/live/admin_http.py (the standard library's http.client on a worker
thread): a runbook's `capcon overflow set` starts without loading an HTTP stack for a request of milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from console.errors import UserError
from console.redact import redact, redact_url, url_secrets
from console.text import printable

if TYPE_CHECKING:
    from console.plan.model import Plan

DETAIL = 200  # characters of an answer kept for the report: enough to say why, never a page
READ_BYTES = 64 * 1024  # of a webhook's answer or a command's standard error
GATEWAY_TIMEOUT = 10.0
MIN_TOKEN_LENGTH = 16  # as `capcon gateway --admin-token-env` requires


@dataclass(frozen=True)
class ActuatorAnswer:
    name: str
    ok: bool
    detail: str
    seconds: float
    previous_mode: str | None = None  # a gateway's mode before the switch, when it said


class Actuator(Protocol):
    """What a switch is sent to: a name for the report, and `apply`, which answers and never raises."""

    name: str

    async def apply(self, body: dict) -> ActuatorAnswer: ...


def bounded(text: str, secrets: Sequence[str] = (), limit: int = DETAIL) -> str:
    """Text from elsewhere, as shown: secrets masked, one printable line, at most `limit` characters."""
    # Escaped first, masked after: an escape (`\x1b`) cannot then spell out a secret that the mask missed.
    flat = redact(printable(" ".join(text.split())), secrets)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class GatewayActuator:
    """A `capcon gateway`'s admin API: PUT /admin/policy with the bearer token."""

    kind = "gateway"

    def __init__(self, url: str, token: str, timeout: float = GATEWAY_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.name = f"gateway {redact_url(self.url)}"

    def __repr__(self) -> str:
        return f"GatewayActuator({self.name!r})"

    async def apply(self, body: dict) -> ActuatorAnswer:
        from console.live.admin_http import http_request  # noqa: PLC0415 - only when a switch is sent

        started = time.monotonic()
        secrets = [self._token, *url_secrets(self.url)]
        try:
            answer_read = await http_request(
                "PUT",
                self.url + "/admin/policy",
                {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
                json.dumps(body).encode(),
                self.timeout,
                READ_BYTES,
            )
        except Exception as error:  # noqa: BLE001 - every failure is an answer, in words
            return ActuatorAnswer(self.name, False, _failure(error, self.timeout, secrets), _since(started))
        raw, status = answer_read.body, answer_read.status
        answer = _json(raw)
        if status == 200 and isinstance(answer, dict) and isinstance(answer.get("policy"), dict):
            new = answer["policy"].get("mode")
            previous = answer.get("previous", {}).get("mode") if isinstance(answer.get("previous"), dict) else None
            shown_previous = bounded(str(previous), secrets, 40) if previous is not None else None
            detail = f"applied: {shown_previous or '?'} -> {bounded(str(new), secrets, 40)}"
            return ActuatorAnswer(self.name, True, detail, _since(started), shown_previous)
        if status == 401:
            return ActuatorAnswer(self.name, False, "token refused (401)", _since(started))
        message = _error_message(answer) or raw.decode("utf-8", "replace")
        return ActuatorAnswer(self.name, False, f"refused ({status}): {bounded(message, secrets)}", _since(started))


class WebhookActuator:
    """POST of the policy JSON to a URL, signed with HMAC-SHA256 over "timestamp.body"; any 2xx is applied."""

    kind = "webhook"

    def __init__(self, url: str, secret: str, timeout: float, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self._secret = secret
        self.timeout = timeout
        self._clock = clock
        self.name = f"webhook {redact_url(url)}"

    def __repr__(self) -> str:
        return f"WebhookActuator({self.name!r})"

    def signed(self, payload: bytes) -> dict[str, str]:
        stamp = str(int(self._clock()))
        digest = hmac.new(self._secret.encode(), stamp.encode() + b"." + payload, hashlib.sha256).hexdigest()
        return {
            "Content-Type": "application/json",
            "X-Capcon-Timestamp": stamp,
            "X-Capcon-Signature": f"sha256={digest}",
        }

    async def apply(self, body: dict) -> ActuatorAnswer:
        from console.live.admin_http import http_request  # noqa: PLC0415 - only when a switch is sent

        started = time.monotonic()
        secrets = [self._secret, *url_secrets(self.url)]
        payload = json.dumps(body, separators=(",", ":")).encode()
        try:
            answer = await http_request("POST", self.url, self.signed(payload), payload, self.timeout, READ_BYTES)
        except Exception as error:  # noqa: BLE001 - every failure is an answer, in words
            return ActuatorAnswer(self.name, False, _failure(error, self.timeout, secrets), _since(started))
        raw, status = answer.body, answer.status
        text = bounded(raw.decode("utf-8", "replace"), secrets)
        ok = 200 <= status < 300
        detail = f"{'applied' if ok else 'refused'} ({status})" + (f": {text}" if text else "")
        return ActuatorAnswer(self.name, ok, detail, _since(started))


class CommandActuator:
    """A program given the policy JSON on standard input; exit 0 is applied; killed at the timeout."""

    kind = "command"

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        if not argv:
            raise ValueError("a command actuator needs a program")
        self.argv = tuple(argv)
        self.timeout = timeout
        self.name = "command " + bounded(" ".join(self.argv), limit=80)

    def __repr__(self) -> str:
        return f"CommandActuator({self.name!r})"

    async def apply(self, body: dict) -> ActuatorAnswer:
        started = time.monotonic()
        payload = json.dumps(body).encode()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: the timeout ends its children too
            )
        except FileNotFoundError:
            return ActuatorAnswer(self.name, False, "cannot start: no such program", _since(started))
        except PermissionError:
            return ActuatorAnswer(self.name, False, "cannot start: not executable", _since(started))
        except OSError as error:
            return ActuatorAnswer(self.name, False, f"cannot start: {bounded(str(error))}", _since(started))
        tail = bytearray()
        stdin, stderr = process.stdin, process.stderr
        assert stdin is not None and stderr is not None, "both are pipes: asked for above"

        async def run() -> int:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write(payload)
                await stdin.drain()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.close()
            while chunk := await stderr.read(4096):
                tail.extend(chunk)
                del tail[:-READ_BYTES]  # the end is what says why
            return await process.wait()

        try:
            code = await asyncio.wait_for(run(), self.timeout)
        except TimeoutError:
            _kill(process)
            await process.wait()
            return ActuatorAnswer(self.name, False, f"no answer within {self.timeout:g} s: killed", _since(started))
        except asyncio.CancelledError:
            _kill(process)
            raise
        lines = [line for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
        last = bounded(lines[-1]) if lines else ""
        if code == 0:
            return ActuatorAnswer(self.name, True, "applied (exit 0)" + (f": {last}" if last else ""), _since(started))
        return ActuatorAnswer(
            self.name, False, f"refused (exit {code})" + (f": {last}" if last else ""), _since(started)
        )


async def apply_all(
    actuators: Sequence[Actuator],
    body: dict,
    timeout: float | None = None,  # noqa: ASYNC109 - a bound on each actuator, each answering on its own
) -> tuple[ActuatorAnswer, ...]:
    """Every actuator's answer, asked concurrently, in the actuators' order; `timeout` bounds each one."""

    async def one(actuator: Actuator) -> ActuatorAnswer:
        started = time.monotonic()
        try:
            if timeout is None:
                return await actuator.apply(body)
            return await asyncio.wait_for(actuator.apply(body), timeout)
        except TimeoutError:
            return ActuatorAnswer(actuator.name, False, f"no answer within {timeout:g} s", _since(started))
        except Exception as error:  # noqa: BLE001 - apply never raises; if one did, it is an answer all the same
            return ActuatorAnswer(actuator.name, False, f"failed: {bounded(str(error))}", _since(started))

    return tuple(await asyncio.gather(*(one(a) for a in actuators)))


@dataclass(frozen=True)
class GatewayStatus:
    name: str
    ok: bool
    detail: str  # why not, when not ok
    policy: dict | None = None
    plan_policy: dict | None = None
    state: dict | None = field(default=None, repr=False)


async def read_status(gateway_url: str, token: str, seconds: float = GATEWAY_TIMEOUT) -> GatewayStatus:
    """A gateway's policy and state (GET /admin/policy and /admin/state), or why they could not be read."""
    from console.live.admin_http import http_request  # noqa: PLC0415 - only when a status is read

    url = gateway_url.rstrip("/")
    name = f"gateway {redact_url(url)}"
    secrets = [token, *url_secrets(url)]
    headers = {"Authorization": f"Bearer {token}"}
    read: dict[str, object] = {}
    try:
        for path in ("/admin/policy", "/admin/state"):
            response = await http_request("GET", url + path, headers, None, seconds, 4 * 1024 * 1024)
            if response.status == 401:
                return GatewayStatus(name, False, "token refused (401)")
            answer = _json(response.body)
            if response.status != 200 or not isinstance(answer, dict):
                message = _error_message(answer) or response.body.decode("utf-8", "replace")
                return GatewayStatus(name, False, f"{path} answered {response.status}: {bounded(message, secrets)}")
            read[path] = answer
    except Exception as error:  # noqa: BLE001 - every failure is an answer, in words
        return GatewayStatus(name, False, _failure(error, seconds, secrets))
    policy_answer = read["/admin/policy"]
    policy = policy_answer.get("policy") if isinstance(policy_answer, dict) else None
    plan_policy = policy_answer.get("plan_policy") if isinstance(policy_answer, dict) else None
    if not isinstance(policy, dict):
        return GatewayStatus(name, False, "/admin/policy answered without a policy")
    return GatewayStatus(
        name,
        True,
        "",
        policy,
        plan_policy if isinstance(plan_policy, dict) else None,
        read["/admin/state"],  # type: ignore[arg-type]  # checked a dict above
    )


def actuators_for(
    plan: Plan | None, gateways: Sequence[str] | None, token_env: str | None, environ: Mapping[str, str]
) -> list[Actuator]:
    """The actuators a switch goes to: the plan's `overflow.actuators` (default: `gateway` when there are gateways).

    `gateways` are admin URLs (`--gateway`), else the plan's fleet.gateways that have an admin_url; `token_env`
    names the admin token's variable (`--admin-token-env`), else the plan's overflow.admin_token_env. A missing
    or empty variable is a UserError naming it, never showing a value.
    """
    overflow = plan.overflow if plan is not None else None
    if gateways:
        admin_urls = list(dict.fromkeys(gateways))
        where = "--gateway"
    else:
        listed = plan.fleet.gateways if plan is not None and plan.fleet is not None else ()
        admin_urls = [g.admin_url for g in listed if g.admin_url]
        where = "the plan's fleet.gateways"
    specs = overflow.actuators if overflow is not None and overflow.actuators is not None else None
    kinds = [s.kind for s in specs] if specs is not None else (["gateway"] if admin_urls else [])
    if not kinds:
        raise UserError(
            "nothing to switch: expected --gateway URL (a gateway's admin API), fleet.gateways with admin_url "
            "in the plan, or the plan's overflow.actuators"
        )
    built: list[Actuator] = []
    token = ""
    if "gateway" in kinds:
        if not admin_urls:
            raise UserError(
                f"the gateway actuator has no gateway: {where} names no admin API; expected --gateway URL or "
                "fleet.gateways entries with admin_url"
            )
        variable = token_env or (overflow.admin_token_env if overflow is not None else None)
        option = "--admin-token-env" if token_env else "the plan's overflow.admin_token_env"
        if not variable:
            raise UserError(
                "the gateways' admin token: expected --admin-token-env VAR or the plan's overflow.admin_token_env"
            )
        token = env_value(environ, variable, option, "the gateways' admin token", MIN_TOKEN_LENGTH)
    for index, kind in enumerate(kinds):
        if kind == "gateway":
            built += [GatewayActuator(url, token) for url in admin_urls]
        elif kind == "webhook":
            assert specs is not None, "webhook and command come from the plan's list"
            spec = specs[index]
            secret = env_value(
                environ, spec.secret_env or "", f"overflow.actuators[{index}].webhook.secret_env", "its HMAC secret"
            )
            built.append(WebhookActuator(spec.url, secret, spec.timeout_seconds))
        else:
            assert specs is not None, "as above"
            spec = specs[index]
            built.append(CommandActuator(spec.argv, spec.timeout_seconds))
    return built


def env_value(environ: Mapping[str, str], name: str, option: str, what: str, minimum: int = 1) -> str:
    if not name or not name.replace("_", "").isalnum():
        raise UserError(f"{option} {printable(name)[:64]!r}: expected the name of an environment variable")
    value = environ.get(name, "").strip()
    if not value:
        raise UserError(f"{option} {name}: the variable is not set or empty; expected it to hold {what}")
    if len(value) < minimum:
        raise UserError(f"{option} {name}: shorter than {minimum} characters; expected {what} (not shown)")
    return value


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _error_message(answer: object) -> str | None:
    """An OpenAI-style `{"error": {"message": ...}}` body's message (the gateway's refusals)."""
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        message = answer["error"].get("message")
        return str(message) if message is not None else None
    return None


def _failure(error: BaseException, timeout: float, secrets: Sequence[str]) -> str:
    from console.live.admin_http import failure_words  # noqa: PLC0415 - only when a request failed

    words = failure_words(error, timeout)
    return words if words is not None else f"failed: {bounded(f'{type(error).__name__}: {error}', secrets)}"


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)
