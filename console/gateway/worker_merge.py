"""What several workers of one gateway (--workers N) say, as one gateway says it; and a switch shared out.

Pure: pages and states in, one page or state out. Each worker enforces its share of the gateway's limits
(as --instances shares the plan's between gateways), so a switch's limits are shared out before they
reach the workers, and their counts are summed on the way back.

/metrics: counters, histograms and the gauges of what is happening now (queue length, in flight, open
connections) are summed; what every worker holds alike (the mode, the policy, the switches applied,
whether a replica is used) is the first worker's; the _created stamps the earliest. The peak queue
length is the sum of the workers' peaks: at most that many ever waited at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

# Families every worker holds alike: the first worker's page says them.
ALIKE = frozenset(
    {
        "capcon_gateway_policy_info",
        "capcon_gateway_mode",
        "capcon_gateway_replica_healthy",
        "capcon_gateway_policy_switches",
    }
)
# A switch's limits on the whole gateway: each worker gets its share (rounded up, as --instances does).
SHARED_LIMITS = ("max_queue", "max_inflight_per_replica", "max_batch_queue", "hosted_after_queue")


def share(value: int, workers: int, least: int = 1) -> int:
    """One worker's share of a limit on the whole gateway, rounded up (never under `least`)."""
    return max(least, -(-value // max(1, workers)))  # whole numbers only: a 400-digit one is no float


def shared_switch(body: object, workers: int) -> object:
    """The switch each worker applies: its limits shared out. Anything not a whole number is left for the
    worker's own check to refuse, in its own words."""
    if not isinstance(body, dict) or workers <= 1:
        return body
    out = dict(body)
    for name in SHARED_LIMITS:
        value = out.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[name] = share(value, workers, least=0 if name == "hosted_after_queue" else 1)
    return out


def merge_pages(pages: list[str]) -> str:
    """The workers' /metrics pages as one page (the exposition format prometheus_client writes)."""
    families: dict[str, tuple[str, str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = {}
    for index, page in enumerate(pages):
        for family in text_string_to_metric_families(page):
            name = family.name
            if name in ALIKE and index > 0 and name in families:
                continue
            _, _, samples = families.setdefault(name, (family.type, family.documentation, {}))
            created = name.endswith("_created")
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key not in samples:
                    samples[key] = sample.value
                elif created:
                    samples[key] = min(samples[key], sample.value)
                else:
                    samples[key] += sample.value
    lines = []
    for name, (kind, documentation, samples) in families.items():
        shown = name + "_total" if kind == "counter" else name
        lines.append(f"# HELP {shown} {_escape_help(documentation)}")
        lines.append(f"# TYPE {shown} {kind}")
        for (sample_name, labels), value in samples.items():
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            lines.append(f"{sample_name}{{{text}}} {_number(value)}" if text else f"{sample_name} {_number(value)}")
    return "\n".join(lines) + "\n"


def merge_states(states: list[dict]) -> dict:
    """The workers' GET /admin/state as one: the first worker's policy, the others' counts added to its own.

    `workers` keeps each worker's own state, for what a sum would hide.
    """
    if not states:
        return {"workers": []}
    merged = dict(states[0])
    merged["queue"] = dict(states[0].get("queue") or {})
    for key in ("interactive", "batch", "max_queue", "max_batch_queue"):
        merged["queue"][key] = _sum(s.get("queue", {}).get(key) for s in states)
    merged["queue"]["peak"] = _add_maps([s.get("queue", {}).get("peak") or {} for s in states])
    for key in ("in_flight", "cap_per_replica"):
        merged[key] = _sum(s.get(key) for s in states)
    merged["counters"] = {
        outcome: _add_maps([(s.get("counters") or {}).get(outcome) or {} for s in states])
        for outcome in (states[0].get("counters") or {})
    }
    merged["totals"] = _add_maps([s.get("totals") or {} for s in states])
    merged["hosted_usage"] = _add_maps([s.get("hosted_usage") or {} for s in states])
    rates = [s.get("completions_per_second") for s in states]
    merged["completions_per_second"] = None if any(r is None for r in rates) else sum(rates)
    by_name: dict[str, dict] = {}
    for state in states:
        for replica in state.get("replicas") or ():
            seen = by_name.get(replica.get("name"))
            if seen is None:
                by_name[replica.get("name")] = dict(replica)
                continue
            for key in ("in_flight", "answered", "refused_connections"):
                seen[key] = _sum((seen.get(key), replica.get(key)))
            seen["healthy"] = bool(seen.get("healthy")) and bool(replica.get("healthy"))
    merged["replicas"] = list(by_name.values())
    merged["stopping"] = any(s.get("stopping") for s in states)
    merged["workers"] = states
    return merged


def _sum(values: Iterable[object]) -> int | float | None:
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(numbers) if numbers else None


def _add_maps(maps: list[dict]) -> dict:
    out: dict = {}
    for one in maps:
        for key, value in one.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
    return out


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
