"""The plan's latency targets judged on what the histograms can say: met, missed or undetermined.

Each p95 target is judged on the window's buckets (console.metrics.attainment): the clients' through the
gateways where they gave them (finer buckets, queue wait included), else the replicas' own. Figures without
buckets (a Prometheus source answers quantiles only) are judged on the p95 figure as it reads. The words for
the flags, the plan panel, `watch --once` and its JSON are written here, once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from console.fleet import format as fmt
from console.fleet.plan_now import PlanNow
from console.metrics.attainment import Buckets, Judgement, Verdict, is_wide, judge, quantile_bucket
from console.metrics.figures import Figures
from console.metrics.gateway import GatewayFigures

QUANTILE = 0.95  # the plan's targets are p95s


@dataclass(frozen=True)
class TargetCheck:
    """One latency target of the plan against the window."""

    key: str  # "ttft", "tpot" or "e2e": the flag's kind ends with it
    label: str  # "p95 TPOT", "client p95 TTFT"
    target: float  # seconds
    value: float | None  # the interpolated p95 (histogram_quantile)
    judgement: Judgement | None  # None: no buckets, judged on `value`
    buckets_of: str  # whose histogram: "vLLM's" or "the gateway's client"
    percentile: tuple[float, float] | None  # the bucket holding the p95
    replicas_value: float | None = None  # the replicas' own p95, when the clients' is judged
    buckets: Buckets | None = None  # what it was judged on

    @property
    def verdict(self) -> Verdict | None:
        """None: nothing to judge (no requests in the window)."""
        if self.judgement is not None:
            return self.judgement.verdict
        if self.value is None:
            return None
        return "missed" if self.value > self.target else "met"

    @property
    def attainment(self) -> tuple[float, float] | None:
        """The share of requests within the target (at least, at most); None without buckets."""
        return self.judgement.attainment if self.judgement is not None else None


def _replica_buckets(f: Figures, key: str) -> Buckets | None:
    if key == "tpot":  # as the TPOT column: a server without a TPOT histogram is judged on its inter-token one
        return f.latency_buckets.get("tpot") or (f.latency_buckets.get("itl") if f.tpot_p95_seconds is None else None)
    return f.latency_buckets.get(key)


def _check(key: str, label: str, target: float, value: float | None, b: Buckets | None, whose: str) -> TargetCheck:
    judged = judge(b, target, QUANTILE)
    return TargetCheck(key, label, target, value, judged, whose, quantile_bucket(b, QUANTILE), buckets=b)


def checks(f: Figures, plan: PlanNow | None, client: GatewayFigures | None = None) -> tuple[TargetCheck, ...]:
    """Each target the plan sets, judged on the clients' histogram where the gateways gave one, else the
    replicas'. The TPOT is the replicas' alone: a gateway sees no tokens' pace."""
    if plan is None:
        return ()
    tpot = f.tpot_p95_seconds if f.tpot_p95_seconds is not None else f.itl_p95_seconds
    found = []
    for key, name, own, target, client_value, client_buckets in (
        ("ttft", "TTFT", f.ttft_p95_seconds, plan.ttft_p95_target_seconds, *_client(client, "ttft")),
        ("tpot", "TPOT", tpot, plan.tpot_p95_target_seconds, None, None),
        ("e2e", "end-to-end", f.e2e_p95_seconds, plan.e2e_p95_target_seconds, *_client(client, "e2e")),
    ):
        if target is None:
            continue
        if client_value is not None:
            check = _check(key, f"client p95 {name}", target, client_value, client_buckets, "the gateway's client")
            found.append(replace(check, replicas_value=own))
        else:
            found.append(_check(key, f"p95 {name}", target, own, _replica_buckets(f, key), "vLLM's"))
    return tuple(found)


def _client(client: GatewayFigures | None, key: str) -> tuple[float | None, Buckets | None]:
    if client is None:
        return None, None
    if key == "ttft":
        return client.client_ttft_p95_seconds, client.client_ttft_buckets
    return client.client_e2e_p95_seconds, client.client_e2e_buckets


def line(check: TargetCheck) -> str:
    """One target in a line (`watch --once`, the plan panel's help): "TPOT p95 50-75ms · 92-97 % within 60ms ·
    undetermined: the 60 ms target lies inside ..."."""
    name = check.label.removeprefix("client ").removeprefix("p95 ")
    whose = "clients' " if check.label.startswith("client") else ""
    words = f"SLO {whose}{name} p95 {percentile_words(check.value, check.percentile)}"
    attained = attainment_words(check)
    if attained:
        words += f" · {attained}"
    verdict = check.verdict
    if verdict == "undetermined":
        return f"{words} · undetermined: {fix(check)}"
    return f"{words} · {'over' if verdict == 'missed' else 'within'} target" if verdict else words


def verdict_on(b: Buckets, limit: float) -> Verdict | None:
    """A p95 against a limit on one histogram's buckets."""
    judged = judge(b, limit, QUANTILE)
    return judged.verdict if judged is not None else None


def cell_verdict(f: Figures, key: str, target: float) -> Verdict | None:
    """One row's figure against a target (the table's cells): on its buckets where it has them."""
    b = _replica_buckets(f, key)
    if b is not None:
        judged = judge(b, target, QUANTILE)
        return judged.verdict if judged is not None else None
    value = {"ttft": f.ttft_p95_seconds, "e2e": f.e2e_p95_seconds}.get(key)
    if key == "tpot":
        value = f.tpot_p95_seconds if f.tpot_p95_seconds is not None else f.itl_p95_seconds
    if value is None:
        return None
    return "missed" if value > target else "met"


# --- words -------------------------------------------------------------------


def _ms(seconds: float) -> str:
    """The flags' unit: "60 ms", "4900 ms"."""
    return f"{seconds * 1000:.0f} ms"


def _ms_range(low: float, high: float) -> str:
    return f"over {_ms(low)}" if math.isinf(high) else f"{low * 1000:.0f}-{_ms(high)}"


def _ms_percentile(value: float | None, bucket: tuple[float, float] | None) -> str:
    """A flag's p95: the bucket where it is wide ("50-75 ms"), else the figure ("393 ms")."""
    if bucket is not None and is_wide(bucket):
        return _ms_range(*bucket)
    return _ms(value) if value is not None else fmt.UNKNOWN


def percentile_words(value: float | None, bucket: tuple[float, float] | None) -> str:
    """A percentile as the histogram can tell it: its bucket ("50-75ms", ">2.5s") where the bucket is wide
    (`attainment.RANGE_RATIO`), else the interpolated figure."""
    if bucket is None or not is_wide(bucket):
        return fmt.seconds(value)
    return fmt.seconds_range(*bucket)


def p95_buckets_words(f: Figures) -> str:
    """The bucket holding each latency p95 of a row: "tpot 50-75ms, ttft 500-750ms"; "" without buckets."""
    found = []
    for name, b in sorted(f.latency_buckets.items()):
        bucket = quantile_bucket(b, QUANTILE)
        if bucket is not None:
            found.append(f"{name} {fmt.seconds_range(*bucket)}")
    return ", ".join(found)


def share_words(low: float, high: float) -> str:
    """A share known as a range: "3.1-7.9 %", or one figure where the ends meet."""
    if fmt.percent(low) == fmt.percent(high):
        return f"{fmt.percent(low)} %"
    return f"{fmt.percent(low)}-{fmt.percent(high)} %"


def attainment_words(check: TargetCheck) -> str:
    """ "92.1-96.9 % within 60ms" (a range off a bound, one figure on it); "" without buckets."""
    if check.attainment is None:
        return ""
    return f"{share_words(*check.attainment)} within {_ms(check.target)}"


def why(check: TargetCheck) -> str:
    """What the figures say, for a flag: the p95 against the target and the share of requests over it."""
    shown = _ms_percentile(check.value, check.percentile)
    verdict = check.verdict
    if verdict == "undetermined":
        words = f"{check.label} {shown}: undetermined against its {_ms(check.target)} target"
    else:
        relation = "over" if verdict == "missed" else "within"
        words = f"{check.label} {shown} {relation} its {_ms(check.target)} target"
    j = check.judgement
    if j is not None:
        words += f"; {share_words(j.over_low, j.over_high)} of requests over it ({fmt.percent(j.allowed)} % allowed)"
    if check.replicas_value is not None:
        words += f" (the replicas' own {_ms(check.replicas_value)})"
    return words


def fix(check: TargetCheck) -> str:
    """Why a target cannot be judged and what makes it judgeable: it lies inside a bucket."""
    j = check.judgement
    if j is None:
        return ""
    lo, hi = j.bucket
    bucket = _ms_range(lo, hi)
    words = (
        f"The {_ms(check.target)} target lies inside {check.buckets_of} {bucket} bucket: "
        f"put the target on a bound ({_ms(lo)} or {_ms(hi)})"
    )
    if check.key != "tpot" and check.buckets_of == "vLLM's":
        words += ", or read the gateway's finer client histogram"
    return words + "."


def judged_at(check: TargetCheck, limit: float) -> Verdict | None:
    """The same p95 against another limit (a breach's clear threshold), on the same buckets; without buckets,
    met only strictly below it, as the figure reads."""
    if check.buckets is None:
        if check.value is None:
            return None
        return "met" if check.value < limit else "missed"
    judged = judge(check.buckets, limit, QUANTILE)
    return judged.verdict if judged is not None else None
