"""Which series `capcon rules` reads when neither --selector nor the plan's fleet.selector says.

A plan that lists its replicas (fleet.targets) names them: Prometheus labels each scraped series
with `instance`, by default the target's host:port, so the rules match exactly those instances.
A plan with neither gets `job="vllm"`, the job name of vLLM's own example Prometheus configuration
(examples/online_serving/prometheus_grafana/prometheus.yaml in the vLLM repository). Either way the
choice and its reason go into the rule file's header and on stderr, so nobody mistakes a guess for
their fleet's labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from console.metrics.promql import instance_matcher
from console.plan.model import Plan
from console.targets import checked_url

VLLM_EXAMPLE_JOB = 'job="vllm"'
_DEFAULT_PORTS = {"http": "80", "https": "443"}


@dataclass(frozen=True)
class ChosenSelector:
    selector: str
    why: str  # "" when it was given (--selector or fleet.selector)

    @property
    def guessed(self) -> bool:
        return bool(self.why)


def target_instances(targets: tuple[str, ...]) -> list[str]:
    """The `instance` labels Prometheus gives these targets: host:port (a URL without a port: both forms)."""
    found = []
    for target in targets:
        parts = urlsplit(checked_url(target))
        host_port = parts.netloc.rpartition("@")[2]  # never a user name or password
        found.append(host_port)
        if parts.port is None:  # Prometheus before 3.0 adds the scheme's port, 3.0 and later do not
            found.append(f"{host_port}:{_DEFAULT_PORTS[parts.scheme.lower()]}")
    return found


def chosen_selector(plan: Plan, given: str | None) -> ChosenSelector:
    """--selector if given (even empty: the rules refuse it), else fleet.selector, else one from the plan."""
    if given is not None:
        return ChosenSelector(given, "")
    fleet = plan.fleet
    if fleet is not None and fleet.selector:
        return ChosenSelector(fleet.selector, "")
    if fleet is not None and fleet.targets:
        return ChosenSelector(
            instance_matcher(target_instances(fleet.targets)),
            "the plan's fleet.targets, by the instance label Prometheus gives each target: its host:port",
        )
    return ChosenSelector(VLLM_EXAMPLE_JOB, "the job name in vLLM's example Prometheus configuration")
