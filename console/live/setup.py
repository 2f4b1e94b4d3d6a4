"""The fleets a command watches, from its options: plans, sources, names, windows, one handle per fleet.

`capcon watch`, `capcon record` and `capcon demo` set their fleets up here, the same way: the
options are defined once (`add_source_options`) beside the code that reads them.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from console.args import OPTION_LIMITS, span
from console.errors import UserError
from console.live.defaults import DEFAULT_MAX_ANSWER_MB, DEFAULT_WINDOW_SECONDS, MAX_DEFAULT_TIMEOUT_SECONDS
from console.targets import Target, checked_url, masked_target, metrics_url, targets_from

if TYPE_CHECKING:
    from console.live.handle import FleetHandle
    from console.live.watcher import Watcher
    from console.plan.model import Plan
    from console.plan.schema import CapacityEstimator
    from console.sources.base import FigureSource, SampleSource

# The handle, the watcher and the sources are imported where a fleet is built: a verb's `add_parser` calls
# `add_source_options`, and `capcon VERB --help` should not load the poll stack to print its options.


def add_source_options(parser: argparse.ArgumentParser, named_in: str) -> None:
    """The options `build_source` and `fleet_name` read (watch and record): which replicas, through what, the fleet's name."""
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="URL",
        help="a replica's URL (host:port, or a full /metrics URL); repeat for each",
    )
    parser.add_argument(
        "--source",
        choices=("scrape", "prometheus"),
        default=None,
        help="scrape replicas directly (default) or query Prometheus",
    )
    parser.add_argument(
        "--prometheus", metavar="URL", help="Prometheus (or Thanos, Mimir) base URL, for --source prometheus"
    )
    parser.add_argument(
        "--selector", default=None, metavar="SEL", help="PromQL label matchers choosing the fleet, e.g. 'job=\"vllm\"'"
    )
    parser.add_argument(
        "--name",
        default=None,
        metavar="NAME",
        help=f"the fleet's name in {named_in} (default: the plan's name, else taken from the targets or the selector)",
    )
    parser.add_argument(
        "--timeout",
        type=span(OPTION_LIMITS["timeout"].high, OPTION_LIMITS["timeout"].high),
        default=None,
        metavar="DURATION",
        help="per-target (or per-query) timeout: 2s, 500ms; a bare number is seconds (default: the interval, "
        "at most 5s)",
    )
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="send a bearer token read from this environment variable "
        "(a URL's own user:password@ is sent as HTTP Basic auth instead)",
    )
    parser.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    parser.add_argument(
        "--dcgm",
        action="append",
        default=[],
        metavar="URL",
        help="an NVIDIA dcgm-exporter page of the fleet's GPUs (host:port or URL), read beside the replicas for "
        "their SM, tensor and DRAM activity and memory used; repeat for each (default: the plan's fleet.dcgm_targets)",
    )
    parser.add_argument(
        "--dcgm-selector",
        default=None,
        metavar="SEL",
        help="with --source prometheus: read the GPUs' dcgm-exporter series from the same Prometheus instead, "
        "those matching SEL (PromQL label matchers, e.g. 'job=\"dcgm-exporter\"'; '' for every one), paired with "
        "the replicas by their pod labels or host",
    )
    parser.add_argument(
        "--max-answer-mb",
        type=float,
        default=None,
        metavar="MB",
        help="Prometheus: read at most this many MB of answers per refresh, decompressed, over its six "
        f"queries (default {DEFAULT_MAX_ANSWER_MB:g}; a 10,000-replica fleet takes about 40)",
    )


def load_plans(paths: Sequence[str], estimate: CapacityEstimator) -> list[Plan]:
    """The plan files at `paths`; `estimate` fills in a capacity a file does not give (the command passes it)."""
    from console.plan.schema import load_plan  # noqa: PLC0415 - yaml and the schema only when a plan is named

    return [load_plan(path, estimate) for path in paths]


def fleet_handles(args: argparse.Namespace, plans: Sequence[Plan]) -> list[FleetHandle]:
    """One handle per plan (each on its own fleet section), or one for the targets (or selector) given."""
    if len(plans) > 1:
        check_fleets(args, plans)
        return [_plan_handle(args, plan.name, plan, fleet_watcher(args, [plan]), [plan]) for plan in plans]
    plan = plans[0] if plans else None
    watcher = fleet_watcher(args, list(plans))
    return [_plan_handle(args, fleet_name(args, plan, watcher.source), plan, watcher, plans)]


def _plan_handle(
    args: argparse.Namespace, name: str, plan: Plan | None, watcher: Watcher, plans: Sequence[Plan]
) -> FleetHandle:
    """One fleet's handle: its watcher, and the gateways and GPU pages beside it, as the arguments and plan say."""
    from console.live.handle import FleetHandle  # noqa: PLC0415

    pods, indices = named_gpus(args, plan)
    return FleetHandle(
        name,
        plan,
        watcher,
        gateways=gateway_urls(args, plan),
        dcgm=dcgm_urls(args, plan),
        dcgm_timeout=timeout(args),
        dcgm_selector=dcgm_selector(args, list(plans)),
        replica_pods=pods,
        replica_gpu_indices=indices,
    )


def named_gpus(
    args: argparse.Namespace, plan: Plan | None
) -> tuple[tuple[tuple[str, str, str | None], ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """The GPUs the plan's fleet.targets name for its replicas ({url, pod} or {url, gpus}): (name, pod, namespace)
    and (name, GPU indices) under the names the replicas are shown by; nothing when `--target` replaces them."""
    fleet = plan.fleet if plan is not None else None
    if fleet is None or not fleet.target_gpus or getattr(args, "target", None):
        return (), ()
    names = {target.url: target.name for target in targets_from(list(fleet.targets))}
    pods: list[tuple[str, str, str | None]] = []
    indices: list[tuple[str, tuple[str, ...]]] = []
    for named in fleet.target_gpus:
        name = names.get(metrics_url(named.url))
        if name is None:
            continue
        if named.pod is not None:
            pods.append((name, named.pod, named.namespace))
        if named.gpus:
            indices.append((name, named.gpus))
    return tuple(pods), tuple(indices)


def dcgm_urls(args: argparse.Namespace, plan: Plan | None) -> tuple[str, ...]:
    """The GPU pages read beside the fleet: `--dcgm` (one fleet) or the plan's fleet.dcgm_targets, as URLs."""
    from console.live.gpu_watch import dcgm_url  # noqa: PLC0415

    given = tuple(getattr(args, "dcgm", None) or ())
    if given:
        return tuple(dcgm_url(text) for text in given)
    fleet = plan.fleet if plan is not None else None
    return tuple(dcgm_url(text, "fleet.dcgm_targets") for text in fleet.dcgm_targets) if fleet is not None else ()


def dcgm_selector(args: argparse.Namespace, plans: Sequence[Plan]) -> str | None:
    """`--dcgm-selector`, checked: the GPUs' series read through the fleet's Prometheus (None: not asked for)."""
    selector = getattr(args, "dcgm_selector", None)
    if selector is None:
        return None
    from console.metrics.promql import selector_matchers  # noqa: PLC0415

    selector_matchers(selector, "--dcgm-selector")
    if getattr(args, "dcgm", None):
        raise UserError(
            "--dcgm with --dcgm-selector: the GPU pages are read directly or through Prometheus; expected one of them"
        )
    if source_kind(args, plans) != "prometheus":
        raise UserError(
            "--dcgm-selector: the GPUs' series are read through the fleet's Prometheus; expected --source prometheus "
            "(or --dcgm URL to read dcgm-exporter's pages directly)"
        )
    return str(selector)


def gateway_urls(args: argparse.Namespace, plan: Plan | None) -> tuple[str, ...]:
    """The gateways watched beside the fleet: `--gateway` (one fleet) or the plan's fleet.gateways."""
    given = tuple(getattr(args, "gateway", None) or ())
    if given:
        return given
    fleet = plan.fleet if plan is not None else None
    return tuple(g.url for g in fleet.gateways) if fleet is not None else ()


def fleet_watcher(args: argparse.Namespace, plans: Sequence[Plan]) -> Watcher:
    from console.live.watcher import Watcher  # noqa: PLC0415

    return Watcher(
        build_source(args, plans), window_seconds(args, source_kind(args, plans)), interval_seconds=args.interval
    )


def handle_on_urls(
    name: str,
    plan: Plan,
    urls: Sequence[str],
    window: float,
    interval: float,
    plan_clock: Callable[[float], float] | None = None,
    dcgm: Sequence[str] = (),
    pods: Sequence[tuple[str, str | None]] = (),
) -> FleetHandle:
    """A fleet scraped at `urls` (named replica-0, replica-1, ...): the simulated fleet of `capcon demo`.

    `dcgm`: its GPU pages; `pods`: each replica's (pod, namespace), in the order of `urls`, which pairs it
    with its GPUs (the replicas share one host)."""
    from console.live.handle import FleetHandle  # noqa: PLC0415
    from console.live.watcher import Watcher  # noqa: PLC0415
    from console.sources.scrape import ScrapeSource  # noqa: PLC0415 - the scrape stack only when a fleet is watched

    source = ScrapeSource([Target(f"replica-{i}", url) for i, url in enumerate(urls)], timeout=2.0)
    return FleetHandle(
        name,
        plan,
        Watcher(source, window, interval_seconds=interval),
        plan_clock=plan_clock,
        dcgm=tuple(dcgm),
        replica_pods=tuple((f"replica-{i}", pod, namespace) for i, (pod, namespace) in enumerate(pods)),
    )


def window_seconds(args: argparse.Namespace, kind: str = "scrape") -> float:
    if args.window is not None:
        return float(args.window)
    if args.once and kind == "scrape":
        return float(args.interval + timeout(args))  # the two samples, however long the first scrape took
    return DEFAULT_WINDOW_SECONDS


def timeout(args: argparse.Namespace) -> float:
    return float(
        args.timeout if args.timeout is not None else min(max(args.interval, 1.0), MAX_DEFAULT_TIMEOUT_SECONDS)
    )


def fleet_name(args: argparse.Namespace, plan: Plan | None, source: object) -> str:
    """The fleet's name: --name, else the plan's, else one the targets (or the Prometheus selector) give.

    The history keys fleets by name, so two different sets of targets must never share one
    ("fleet" for every unnamed fleet would merge their histories and block each other's recorders).
    """
    if getattr(args, "name", None):
        return str(args.name)
    if plan is not None:
        return plan.name
    targets = sorted(t.name for t in getattr(source, "targets", ()) or ())
    if targets:
        return targets[0] if len(targets) == 1 else f"{targets[0]} +{len(targets) - 1}"
    selector = getattr(source, "selector", "") or ""
    return f"prometheus {selector}".strip() if selector or getattr(source, "name", "") == "prometheus" else "fleet"


def source_kind(args: argparse.Namespace, plans: Sequence[Plan]) -> str:
    if args.source:
        return str(args.source)
    has_prometheus = args.prometheus or any(p.fleet.prometheus_url for p in plans if p.fleet)
    return "prometheus" if has_prometheus and not args.target else "scrape"


def build_source(args: argparse.Namespace, plans: Sequence[Plan]) -> SampleSource | FigureSource:
    """The source the arguments and plan ask for; a UserError when they do not name a fleet."""
    fleets = [p.fleet for p in plans if p.fleet is not None]
    prometheus_url = args.prometheus or next((f.prometheus_url for f in fleets if f.prometheus_url), None)
    kind = source_kind(args, plans)
    from console.sources.scrape import ScrapeSource, bearer_token_from_env  # noqa: PLC0415 - keeps --help light

    if kind == "prometheus":
        if not prometheus_url:
            raise UserError(
                "--source prometheus: no Prometheus URL; expected --prometheus URL or a plan fleet section with prometheus_url"
            )
        prometheus_url = _prometheus_url(prometheus_url, "--prometheus" if args.prometheus else "fleet.prometheus_url")
        max_mb = getattr(args, "max_answer_mb", None)
        if max_mb is not None and (not math.isfinite(max_mb) or max_mb <= 0):
            raise UserError(f"--max-answer-mb {max_mb:g}: expected a positive number of MB")
        selector = args.selector if args.selector is not None else next((f.selector for f in fleets if f.selector), "")
        from console.sources.prometheus import PrometheusSource  # noqa: PLC0415 - only a Prometheus fleet loads it

        token = bearer_token_from_env(args.token_env)
        return PrometheusSource(
            prometheus_url,
            selector,
            window_seconds(args, kind),
            timeout(args),
            headers={"Authorization": f"Bearer {token}"} if token else None,
            verify=not args.insecure,
            max_answer_bytes=int((max_mb if max_mb is not None else DEFAULT_MAX_ANSWER_MB) * 1024 * 1024),
        )

    urls = list(args.target) or [url for f in fleets for url in f.targets]
    if not urls:
        raise UserError(
            "no targets: expected --target URL (repeatable) or a plan file whose fleet section lists targets"
        )
    return ScrapeSource(
        targets_from(urls),
        timeout=timeout(args),
        token=bearer_token_from_env(args.token_env),
        verify=not args.insecure,
    )


def _prometheus_url(text: str, named: str) -> str:
    """Prometheus' base URL by the one address rule (`user:password@` allowed, sent as Basic auth)."""
    try:
        return checked_url(text)
    except ValueError as problem:
        raise UserError(
            f"{named} {masked_target(text)!r}: {problem}; expected an http(s) URL such as http://prometheus:9090"
        ) from None


def check_fleets(args: argparse.Namespace, plans: Sequence[Plan]) -> None:
    """Several plans: each names its own fleet, so each needs a fleet section, and each comes once."""
    if args.target:
        raise UserError(
            "--target with several plans: each plan's fleet section names its replicas; expected one plan, or no --target"
        )
    if getattr(args, "gateway", None):
        raise UserError(
            "--gateway with several plans: each plan's fleet.gateways names its own; expected one plan, or no --gateway"
        )
    if getattr(args, "dcgm", None):
        raise UserError(
            "--dcgm with several plans: each plan's fleet.dcgm_targets names its own; expected one plan, or no --dcgm"
        )
    if getattr(args, "name", None):
        raise UserError(
            "--name with several plans: each fleet is named after its plan; expected one plan, or no --name"
        )
    seen: dict[Path, str] = {}
    for path in args.plan:
        resolved = Path(path).resolve()
        if resolved in seen:
            # Refused rather than merged: two blocks of one fleet would read as two fleets.
            raise UserError(f"{path}: given twice (also as {seen[resolved]}); expected each plan once")
        seen[resolved] = path
    for path, plan in zip(args.plan, plans, strict=False):
        if plan.fleet is None:
            raise UserError(f"{path} has no fleet section; expected fleet.targets or fleet.prometheus_url")
