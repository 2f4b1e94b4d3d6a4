"""`capcon gateway [PLAN]`: the fleet's front door, enforcing the overflow policy, switchable at runtime."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from console.args import SubParsers
from console.errors import UserError

if TYPE_CHECKING:
    import asyncio
    import socket

    from console.gateway.config import GatewayConfig
    from console.gateway.workers import Worker
    from console.plan.model import Overflow, Plan

    LoopFactory = Callable[[], asyncio.AbstractEventLoop]

DESCRIPTION = """\
An OpenAI-compatible gateway in front of a fleet's replicas (the plan's fleet.targets,
--target, or the instances Prometheus names for the plan's fleet.selector). It proxies /v1/completions and /v1/chat/completions (streams passed on
chunk by chunk), /v1/models and /health, sends each request to the healthy replica with
the fewest requests in flight, and enforces the overflow policy: the plan's overflow
section at start, switched at runtime through the admin API (PUT /admin/policy), with an
optional expiry after which the gateway returns to the plan's policy by itself.

modes: pass (forward everything; the in-flight cap still holds if set), bounded_queue
(in-flight cap per replica, one FIFO queue of at most max_queue with a deadline of
max_wait_seconds: 429 when full, 503 past the deadline, both with Retry-After), hosted
(past a queue threshold, new requests go to --hosted-url; only when prompts may leave),
defer (requests with `x-capcon-class: deferrable`, or bearing a client key listed in
--deferrable-keys-env, get 429 until off-peak, or wait in a batch queue released while the
fleet has room; interactive traffic keeps the queue). The plan's overflow section may name
hosted_key_env, hosted_price_per_million and deferrable_keys_env; the options win over it.

/metrics (Prometheus) on the main listener: requests by outcome and class, queue length
and wait, in-flight per replica, Retry-After given, the mode, hosted tokens.
"""

EPILOG = """\
admin API (its own listener, loopback by default; needs --admin-token-env):
  GET /admin/policy   GET /admin/state   PUT /admin/policy with a JSON body such as
  {"mode": "pass", "reason": "spike, capacity is coming", "actor": "alice", "for": "30m"}
  (also max_queue, max_wait_seconds, max_inflight_per_replica, hosted_after_queue, defer_action,
  max_batch_queue); every request needs `Authorization: Bearer $TOKEN`.
exit status: 0 stopped by Ctrl+C or SIGTERM (queued requests answered 503, streams drained up to
--drain-timeout); 2 bad input (the plan, an option, an address, a port taken, a missing token).
examples:
  capcon gateway plans/internal-assistant-18rps.yaml --listen 0.0.0.0:8080 --admin-token-env CAPCON_ADMIN_TOKEN
  capcon gateway --target 10.0.0.11:8000 --target 10.0.0.12:8000 --mode bounded_queue --max-inflight 32
  capcon gateway plan.yaml --hosted-url https://api.example.com/v1 --hosted-key-env HOSTED_KEY --hosted-model big-model"""

MAX_INSTANCES = 1000
MAX_WORKERS = 64
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_RESPONSE_BYTES = 1024 * 1024 * 1024
MIN_TOKEN_LENGTH = 16


def _number(kind: type[int] | type[float], low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            low_words = f"over {low:g}" if low_open else f"from {low:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number {low_words} to {high:g}")
        return value

    return parse


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    from console.overflow.policy import MAX_INFLIGHT, MAX_QUEUE, MAX_WAIT_SECONDS, MODES

    parser = sub.add_parser(
        "gateway",
        help="the fleet's front door: an OpenAI-compatible proxy enforcing the overflow policy, switchable at runtime",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "plan",
        metavar="PLAN",
        nargs="?",
        help="plan file (YAML): its overflow section, fleet and concurrency per replica set the policy at start",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="URL",
        help="a replica (host:port or http(s) URL); repeat for each (default: the plan's fleet.targets)",
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="where clients connect (default 127.0.0.1:8080; 0.0.0.0:8080 for every interface; port 0: a free one)",
    )
    parser.add_argument(
        "--admin",
        metavar="HOST:PORT",
        help="the admin API's listener (default 127.0.0.1:8081 when --admin-token-env is given)",
    )
    parser.add_argument(
        "--admin-token-env",
        metavar="VAR",
        help="environment variable holding the admin API's bearer token (required for the admin API)",
    )
    parser.add_argument(
        "--mode", choices=MODES, help="the mode at start (default: the plan's overflow.mode; pass without a plan)"
    )
    parser.add_argument(
        "--max-queue",
        type=_number(int, 0, MAX_QUEUE),
        metavar="N",
        help="requests waiting, all replicas together (default: the plan's max_queue x replicas / instances)",
    )
    parser.add_argument(
        "--max-wait",
        type=_number(float, 0, MAX_WAIT_SECONDS, low_open=True),
        metavar="SECONDS",
        help="a queued request's deadline (default: the plan's max_wait_seconds, or 5)",
    )
    parser.add_argument(
        "--max-inflight",
        type=_number(int, 1, MAX_INFLIGHT),
        metavar="N",
        help="requests in flight per replica before new ones wait, in the queueing modes "
        "(default: the planner's concurrency per replica at the peak)",
    )
    parser.add_argument(
        "--instances",
        type=_number(int, 1, MAX_INSTANCES),
        default=1,
        metavar="N",
        help="gateways behind the load balancer: each enforces 1/N of the plan's queue and in-flight cap",
    )
    parser.add_argument(
        "--workers",
        type=_number(int, 1, MAX_WORKERS),
        default=1,
        metavar="N",
        help="processes serving the one --listen port (SO_REUSEPORT), for a fleet whose traffic needs more than "
        "one core: each enforces 1/N of the queue and in-flight cap (given or the plan's), one admin API fans "
        "a switch out to all, /metrics is their sum (default 1)",
    )
    parser.add_argument(
        "--hosted-url", metavar="URL", help="hosted OpenAI-compatible endpoint (default: the plan's hosted_url)"
    )
    parser.add_argument(
        "--hosted-model",
        action="append",
        default=[],
        metavar="[LOCAL=]REMOTE",
        help="the hosted model for a local one (or for all); repeat (default: the plan's hosted_model)",
    )
    parser.add_argument(
        "--hosted-key-env",
        metavar="VAR",
        help="environment variable holding the hosted endpoint's API key (default: the plan's overflow.hosted_key_env)",
    )
    parser.add_argument(
        "--deferrable-keys-env",
        metavar="VAR",
        help="environment variable holding client API keys (comma-separated) whose requests are deferrable "
        "(default: the plan's overflow.deferrable_keys_env)",
    )
    parser.add_argument(
        "--hosted-after-queue",
        type=_number(int, 0, MAX_QUEUE),
        metavar="N",
        help="hosted mode: queued requests past which new ones go to the hosted endpoint (default 0)",
    )
    parser.add_argument(
        "--hosted-price-per-million",
        type=_number(float, 0, 1e6),
        metavar="DOLLARS",
        help="price of a million hosted tokens, for capcon_gateway_hosted_cost_dollars_total "
        "(default: the plan's overflow.hosted_price_per_million)",
    )
    parser.add_argument(
        "--prompts-may-leave",
        action="store_true",
        help="without a plan: prompts may go to the hosted endpoint (a plan says so in data.prompts_may_leave)",
    )
    parser.add_argument(
        "--defer-action",
        choices=("reject", "hold"),
        help="defer mode: refuse deferrable work until off-peak (reject, default) or hold it in a batch queue",
    )
    parser.add_argument(
        "--max-batch-queue",
        type=_number(int, 0, MAX_QUEUE),
        metavar="N",
        help="defer mode, hold: deferrable requests held at most (default 1000)",
    )
    parser.add_argument(
        "--batch-release-share",
        type=_number(float, 0, 1, low_open=True),
        default=0.5,
        metavar="X",
        help="defer mode, hold: held work goes to replicas under X of the in-flight cap (default 0.5)",
    )
    parser.add_argument(
        "--off-peak",
        metavar="HH:MM[-HH:MM]",
        help="daily off-peak window, for Retry-After to deferrable work (default: the plan's idle hours)",
    )
    parser.add_argument("--db", metavar="PATH", help="history file: every policy switch is written to its events")
    parser.add_argument(
        "--health-interval",
        type=_number(float, 0.1, 300),
        default=5.0,
        metavar="SECONDS",
        help="seconds between health checks of every replica (default 5)",
    )
    parser.add_argument(
        "--discover-every",
        type=_number(float, 0.1, 3600),
        default=15.0,
        metavar="SECONDS",
        help="a plan whose fleet is read through Prometheus: seconds between asking it for the replicas "
        "(up{selector}'s instances; default 15)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=_number(float, 0, 3600),
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl+C, how long streams in flight may go on (default 30)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_number(int, 1024, MAX_BODY_BYTES),
        default=4 * 1024 * 1024,
        metavar="N",
        help="largest request body; bigger ones get 413 (default 4 MiB)",
    )
    parser.add_argument(
        "--max-response-bytes",
        type=_number(int, 1024, MAX_RESPONSE_BYTES),
        default=64 * 1024 * 1024,
        metavar="N",
        help="largest answer the gateway reads whole: a replica's non-stream answer (a bigger one is a 502), "
        "a hosted answer or one event of a hosted stream (a bigger one falls back to the bounded queue, or "
        "ends the stream begun in an error event), a model list (default 64 MiB; streams from replicas are "
        "passed on as they come, whatever their length)",
    )
    parser.add_argument(
        "--upstream-timeout",
        type=_number(float, 1, 3600),
        default=600.0,
        metavar="SECONDS",
        help="longest silence from a replica within one answer (default 600)",
    )
    parser.add_argument(
        "--header-timeout",
        type=_number(float, 0, 3600),
        default=10.0,
        metavar="SECONDS",
        help="a client's request head (line and headers) must arrive whole this soon after its first byte, or "
        "after the connection opened, else the connection is closed (default 10; 0: no limit)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_number(float, 0, 3600),
        default=75.0,
        metavar="SECONDS",
        help="a kept-alive client connection with no new request is closed after this long (default 75, longer "
        "than common load balancers' 60 s; 0: no limit of the gateway's own)",
    )
    parser.add_argument(
        "--max-connections",
        type=_number(int, 0, 10_000_000),
        metavar="N",
        help="client connections open at once; past it a new one takes the place of the one waiting longest "
        "for its request head, or is closed at once (default and most: half the open-files limit less 64, "
        "the limit first raised to the hard one; 0: no cap of its own)",
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop: uvloop when installed (auto, default; benchmarks/bench_gateway.py measures "
        "what it saves), or asyncio's own",
    )
    parser.set_defaults(run=run)
    return parser


def _secret(variable: str, option: str, minimum: int = 1, what: str = "the token") -> str:
    if not variable or not variable.replace("_", "").isalnum():
        raise UserError(f"{option} {variable!r}: expected the name of an environment variable")
    value = os.environ.get(variable, "")
    if not value.strip():
        raise UserError(f"{option} {variable}: the variable is not set or empty; expected it to hold {what}")
    if len(value.strip()) < minimum:
        raise UserError(
            f"{option} {variable}: the token is shorter than {minimum} characters; expected a random "
            f"token such as `openssl rand -hex 16` gives"
        )
    return value.strip()


def _from_option_or_plan(
    option_value: str | None, option: str, overflow: Overflow | None, key: str
) -> tuple[str | None, str]:
    """The variable's name and what to call it in messages: the option's if given, else the plan's."""
    if option_value:
        return option_value, option
    name = getattr(overflow, key, None) if overflow is not None else None
    return name, f"the plan's overflow.{key}"


def _deferrable_keys(variable: str, option: str) -> frozenset[bytes]:
    """The digests of the keys listed in `variable`; the keys themselves are dropped here."""
    from console.overflow.clients import key_digests

    digests = key_digests(_secret(variable, option, what="client API keys separated by commas"))
    if not digests:
        raise UserError(f"{option} {variable}: the variable lists no key; expected client API keys separated by commas")
    return digests


def build_config(args: argparse.Namespace) -> GatewayConfig:
    """The gateway's configuration from the options and the plan; UserError for anything wrong."""
    from dataclasses import replace

    from console.bench.estimate import load_plan
    from console.gateway import config as cfg
    from console.gateway.offpeak import parse_window, seconds_to_daily_window
    from console.overflow.policy import Policy

    plan = load_plan(args.plan) if args.plan else None
    if plan is not None and args.prompts_may_leave and not plan.data.prompts_may_leave:
        raise UserError(
            f"--prompts-may-leave: the plan {args.plan} says data.prompts_may_leave: false; the plan "
            "decides where prompts may go"
        )
    texts = list(args.target)
    prometheus_url, selector = None, ""
    if not texts and plan is not None and plan.fleet is not None:
        if plan.fleet.prometheus_url and not plan.fleet.targets:
            prometheus_url, selector = _discovery_source(args.plan, plan.fleet.prometheus_url, plan.fleet.selector)
        texts = list(plan.fleet.targets)
    if not texts and not prometheus_url:
        raise UserError("no replicas: expected --target URL (repeat for each replica) or a plan with fleet.targets")
    targets = []
    for text in texts:
        try:
            targets.append(cfg.base_url(text))
        except ValueError as problem:
            raise UserError(f"--target {cfg.shown(text)!r}: {problem}; expected {cfg.TARGET_EXPECTED}") from None
    targets = list(dict.fromkeys(targets))
    if len(targets) > cfg.MAX_TARGETS:
        raise UserError(f"{len(targets)} targets: expected at most {cfg.MAX_TARGETS} replicas behind one gateway")
    try:
        listen = cfg.host_port(args.listen, "--listen")
        admin = cfg.host_port(args.admin, "--admin") if args.admin else None
    except ValueError as problem:
        raise UserError(str(problem)) from None
    token = None
    if args.admin_token_env:
        token = _secret(args.admin_token_env, "--admin-token-env", MIN_TOKEN_LENGTH)
        admin = admin or cfg.DEFAULT_ADMIN
    elif admin is not None:
        raise UserError("--admin: the admin API needs a bearer token; expected --admin-token-env VAR as well")
    if admin is not None and admin[1] != 0 and admin == listen:
        raise UserError(f"--admin {args.admin}: the same address as --listen; expected its own port")

    # --workers: each worker process is one more gateway sharing the limits, as --instances counts them; a
    # limit given as an option is the whole gateway's, shared out between its workers too.
    workers = getattr(args, "workers", 1)
    instances = args.instances * workers

    def shared(value: int | None) -> int | None:
        return None if value is None else math.ceil(value / workers)

    service = cfg.service_seconds_from_plan(plan) if plan is not None else None
    cap: int | None  # the in-flight cap per replica; None: none
    if plan is not None:
        policy = cfg.policy_from_plan(plan, len(targets) or _planned_replicas(plan), instances)
        cap = shared(args.max_inflight) or cfg.planned_cap_from_plan(plan, instances)
    else:
        policy = Policy(
            mode="pass",
            max_queue=64,
            max_wait_seconds=5.0,
            hosted_allowed=bool(args.prompts_may_leave),
            actor="plan",
            reason="no plan: the gateway's options at start",
        )
        cap = shared(args.max_inflight)
    given = {
        "mode": args.mode,
        "max_queue": args.max_queue,
        "max_wait_seconds": args.max_wait,
        "hosted_after_queue": args.hosted_after_queue,
        "defer_action": args.defer_action,
        "max_batch_queue": args.max_batch_queue,
    }
    changes = {k: v for k, v in given.items() if v is not None}
    if changes:
        shown = ", ".join(f"--{k.replace('_seconds', '').replace('_', '-')} {v}" for k, v in changes.items())
        changes["reason"] = f"{policy.reason} with {shown}" + (f" (shared by {workers} workers)" if workers > 1 else "")
        for name in ("max_queue", "hosted_after_queue", "max_batch_queue"):
            if name in changes:
                changes[name] = shared(changes[name])
        policy = replace(policy, **changes)
    if policy.mode != "pass" and cap is None:
        raise UserError(
            f"--mode {policy.mode}: without a plan there is no in-flight cap per replica; expected "
            "--max-inflight N (requests in flight per replica before new ones wait)"
        )

    hosted_url = args.hosted_url or (plan.overflow.hosted_url if plan is not None else None)
    if hosted_url:
        try:
            cfg.base_url(hosted_url)
        except ValueError as problem:
            raise UserError(f"--hosted-url {cfg.shown(hosted_url)!r}: {problem}; expected an http(s) URL") from None
        if "?" in hosted_url or "#" in hosted_url:
            raise UserError(
                f"--hosted-url {cfg.shown(hosted_url)!r}: expected a base URL without a query; "
                "an API key goes in --hosted-key-env"
            )
    models = {}
    for text in args.hosted_model or (
        [plan.overflow.hosted_model] if plan is not None and plan.overflow.hosted_model else []
    ):
        local, equals, remote = text.partition("=")
        local, remote = (local.strip(), remote.strip()) if equals else ("*", local.strip())
        if not local or not remote:
            raise UserError(f"--hosted-model {text!r}: expected REMOTE or LOCAL=REMOTE")
        models[local] = remote
    overflow = plan.overflow if plan is not None else None
    # The options win over the plan's overflow section.
    key_env, key_option = _from_option_or_plan(args.hosted_key_env, "--hosted-key-env", overflow, "hosted_key_env")
    if (models or key_env) and not hosted_url:
        raise UserError(
            "--hosted-model/--hosted-key-env: no hosted endpoint; expected --hosted-url (or the plan's hosted_url)"
        )
    hosted_key = _secret(key_env, key_option, what="the hosted endpoint's API key") if key_env else None
    price = args.hosted_price_per_million
    if price is None and overflow is not None:
        price = overflow.hosted_price_per_million
    deferrable_env, deferrable_option = _from_option_or_plan(
        args.deferrable_keys_env, "--deferrable-keys-env", overflow, "deferrable_keys_env"
    )
    deferrable_keys = _deferrable_keys(deferrable_env, deferrable_option) if deferrable_env else frozenset()
    if policy.mode == "hosted":
        if not policy.hosted_allowed:
            raise UserError(
                "--mode hosted: prompts may not leave (the plan's data.prompts_may_leave is false, or "
                "no --prompts-may-leave without a plan); expected bounded_queue or defer"
            )
        if not hosted_url:
            raise UserError("--mode hosted: no hosted endpoint; expected --hosted-url (or the plan's hosted_url)")

    zone = plan.timezone if plan is not None else "UTC"
    off_peak: Callable[[float], float | None] | None = None
    if args.off_peak:
        try:
            window = parse_window(args.off_peak)
        except ValueError as problem:
            raise UserError(f"--off-peak {args.off_peak!r}: {problem}; expected HH:MM or HH:MM-HH:MM") from None

        def off_peak_given(now: float, window: tuple[float, float] = window) -> float | None:
            return seconds_to_daily_window(window, now, zone)

        off_peak = off_peak_given
    elif plan is not None:
        off_peak = cfg.off_peak_from_plan(plan)

    history = None
    fleet = plan.name if plan is not None else "gateway"
    if args.db is not None:
        if not args.db.strip():
            raise UserError("--db: empty path; expected a history file path")
        from console.gateway.history import SwitchHistory

        history = SwitchHistory(args.db, fleet)
        history.open()
    return cfg.GatewayConfig(
        targets=tuple(targets),
        plan_policy=policy,
        planned_cap=cap,
        expected_service_seconds=service,
        listen=listen,
        admin=admin,
        admin_token=token,
        hosted_url=hosted_url.rstrip("/") if hosted_url else None,
        hosted_models=models,
        hosted_key=hosted_key,
        hosted_price_per_million=price,
        deferrable_keys=deferrable_keys,
        off_peak=off_peak,
        batch_release_share=args.batch_release_share,
        health_interval=args.health_interval,
        health_timeout=min(2.0, max(0.5, args.health_interval)),
        drain_timeout=args.drain_timeout,
        max_body_bytes=args.max_body_bytes,
        upstream_timeout=args.upstream_timeout,
        header_timeout=args.header_timeout,
        idle_timeout=args.idle_timeout,
        max_connections=args.max_connections,
        max_response_bytes=args.max_response_bytes,
        fleet_name=fleet,
        history=history,
        prometheus_url=prometheus_url,
        selector=selector,
        discover_every=args.discover_every,
        discovery_timeout=min(5.0, max(1.0, args.discover_every)),
    )


def _discovery_source(plan_path: str, url: str, selector: str) -> tuple[str, str]:
    """The plan's Prometheus URL and selector, checked; the replicas are asked of it at run time."""
    from console.metrics.promql import selector_matchers
    from console.targets import checked_url, masked_target

    try:
        checked = checked_url(url)
    except ValueError as problem:
        raise UserError(f"{plan_path}: fleet.prometheus_url {masked_target(url)!r}: {problem}") from None
    try:
        selector_matchers(selector)
    except UserError as problem:
        raise UserError(f"{plan_path}: fleet.selector: {problem}") from None
    return checked, selector


def _planned_replicas(plan: Plan) -> int:
    """Replicas the plan sizes for (with its spare): the queue's bound before Prometheus names the real ones."""
    from console.plan.sizing import size

    return max(1, size(plan).replicas_with_redundancy)


def _setup_logging() -> None:
    logger = logging.getLogger("capcon.gateway")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s capcon gateway: %(message)s", "%Y-%m-%dT%H:%M:%S%z"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


async def _serve(config: GatewayConfig, loop_name: str = "asyncio") -> None:
    import asyncio

    from console.gateway.config import is_loopback
    from console.gateway.server import Gateway
    from console.overflow.policy import summary
    from console.redact import redact_url

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = []

    def on_signal() -> None:
        if stop.is_set():
            gateway.hurry()
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
        signals.append(signum)
    from console.gateway.connections import raise_open_files_limit

    files = raise_open_files_limit()[1]  # as servers do: the cap on client connections is kept under it
    gateway = Gateway(config)
    try:
        try:
            await gateway.start()
        except OSError as error:
            if config.history is not None:
                config.history.close()
            raise UserError(
                f"cannot listen: {error.strerror or error}; expected a free port for --listen and --admin (or port 0)"
            ) from None
        policy = gateway.policy()
        print(f"capcon gateway: listening on {gateway.url} in front of {len(gateway.replicas)} replica(s):")
        for replica in gateway.replicas:
            print(
                f"  {redact_url(replica.url)}  {'healthy' if replica.healthy else 'NOT ANSWERING: ' + replica.problem}"
            )
        if gateway.discovery is not None:
            found = gateway.discovery.state
            print(
                f"replicas from {found.source}, asked every {config.discover_every:g} s"
                + ("; none yet: requests get 503 until Prometheus names them" if not gateway.replicas else "")
            )
        cap = config.planned_cap
        print(
            f"policy: {policy.mode} ({policy.reason}): {summary(policy)}"
            + (f"; in-flight cap {cap} per replica" if cap else "")
        )
        if gateway.admin_url and config.admin is not None:
            where = "" if is_loopback(config.admin[0]) else " (NOT loopback: reachable from the network)"
            print(f"admin API on {gateway.admin_url}{where}: GET/PUT /admin/policy, GET /admin/state")
        else:
            print("admin API off (no --admin-token-env): the policy stays as started")
        if config.deferrable_keys:
            print(f"deferrable class: requests bearing one of {len(config.deferrable_keys)} client key(s)")
        guard = gateway.connections
        assert guard is not None, "a started gateway guards its listener"
        print(
            f"client connections: at most {guard.max_connections or 'any number'} open"
            + (f" (open-files limit {files})" if files else "")
            + f", head within {_seconds(guard.header_timeout)}, idle kept {_seconds(guard.idle_timeout)}"
        )
        print(f"metrics on {gateway.url}/metrics; event loop: {loop_name}")
        print("Ctrl+C stops it.", flush=True)
        await stop.wait()
        print(
            f"stopping: queued requests get 503; streams in flight have up to {config.drain_timeout:g} s "
            f"({gateway.in_flight()} now)",
            flush=True,
        )
        await gateway.stop()
        print("stopped.", flush=True)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


def _serve_workers(config: GatewayConfig, workers: int, factory: LoopFactory | None, loop_name: str) -> int:
    """--workers N: fork the workers, then hold their one admin API and merged /metrics until stopped."""
    import asyncio

    from console.gateway.connections import raise_open_files_limit
    from console.gateway.workers import WorkerFailed, start_workers

    files = raise_open_files_limit()[1]  # before the fork, so every worker has it
    try:
        started, merged, token = start_workers(config, workers, factory)
    except OSError as error:
        raise UserError(
            f"cannot listen: {error.strerror or error}; expected a free port for --listen and --admin (or port 0)"
        ) from None
    except WorkerFailed as problem:
        raise UserError(f"--workers {workers}: a worker could not start: {problem}") from None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_supervise(config, started, merged, token, files, loop_name))


async def _supervise(
    config: GatewayConfig,
    started: list[Worker],
    merged: socket.socket,
    token: str,
    files: int | None,
    loop_name: str,
) -> int:
    import asyncio

    from console.gateway.config import is_loopback
    from console.gateway.workers import Supervisor
    from console.overflow.policy import summary

    supervisor = Supervisor(config, started, merged, token)
    try:
        await supervisor.start()
    except OSError as error:
        supervisor.stop_workers()
        await supervisor.wait()
        await supervisor.close()
        raise UserError(
            f"cannot listen: {error.strerror or error}; expected a free port for --admin (or port 0)"
        ) from None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, supervisor.stop_workers)
    policy = config.plan_policy
    print(
        f"capcon gateway: listening on {started[0].url} with {len(started)} workers (SO_REUSEPORT), pids "
        + " ".join(str(w.pid) for w in started)
    )
    cap = config.planned_cap
    print(
        f"policy: {policy.mode} ({policy.reason}): {summary(policy)}"
        + (f"; in-flight cap {cap} per replica" if cap else "")
        + f", each worker's share of {len(started)}"
    )
    if supervisor.admin_url and config.admin is not None:
        where = "" if is_loopback(config.admin[0]) else " (NOT loopback: reachable from the network)"
        print(f"admin API on {supervisor.admin_url}{where}: GET/PUT /admin/policy, GET /admin/state (every worker)")
    else:
        print("admin API off (no --admin-token-env): the policy stays as started")
    print(
        f"metrics on {started[0].url}/metrics (the workers' sum)"
        + (f"; open-files limit {files}" if files else "")
        + f"; event loop: {loop_name}"
    )
    print("Ctrl+C stops it.", flush=True)
    try:
        status = await supervisor.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await supervisor.close()
    print("stopped.", flush=True)
    return status


def _seconds(value: float | None) -> str:
    return f"{value:g} s" if value else "without limit"


def _loop_factory(choice: str) -> LoopFactory | None:
    """uvloop's loop if chosen (or, with auto, if installed); None: asyncio's own."""
    if choice == "asyncio":
        return None
    try:
        import uvloop  # optional
    except ImportError:  # a third-party extra, not installed on Windows (pyproject.toml): auto runs on asyncio's loop
        if choice == "uvloop":
            raise UserError(
                "--loop uvloop: uvloop is not installed; expected `pip install uvloop`, or --loop asyncio"
            ) from None
        return None
    return uvloop.new_event_loop


def run(args: argparse.Namespace) -> int:
    import asyncio

    workers = getattr(args, "workers", 1)
    if workers > 1 and args.db is not None:
        raise UserError(
            "--db with --workers: not yet (each worker would write its own switches and tallies); expected one of them"
        )
    config = build_config(args)
    factory = _loop_factory(getattr(args, "loop", "auto"))
    _setup_logging()
    if workers > 1:
        return _serve_workers(config, workers, factory, "uvloop" if factory else "asyncio")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(config, "uvloop" if factory else "asyncio"))
    sys.stdout.flush()
    return 0
