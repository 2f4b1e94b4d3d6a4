"""Source `prometheus`: per-replica and fleet figures from a Prometheus-compatible API.

For fleets too large to scrape from one terminal: Prometheus (or Thanos, Mimir)
already holds every replica's series, and PromQL does the window math. Each
refresh sends the fixed set of queries in `console.sources.promql`, evaluated at
the same instant, whatever the fleet size. prometheus-api-client is synchronous,
so the queries run in worker threads.

Replicas are Prometheus targets (`instance`), their state Prometheus' own `up`.
Prometheus unreachable, too slow, or answering a query with an error becomes
`FleetFigures.source_error` with no replicas: never an exception.

Choose a window of at least twice the scrape interval (Grafana's
`$__rate_interval` uses four): `rate()` needs two samples in the window, and
with fewer the rates and quantiles are unknown.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import re
from typing import Any, Mapping, Protocol

import requests
import urllib3
from urllib3.util.retry import Retry

from console.metrics.figures import Figures, FleetFigures, ReplicaState
from console.metrics.vllm import kv_capacity_tokens, kv_capacity_tokens_by_engine
from console.metrics.window import QUANTILE_FIGURES, RATE_FIGURES
from console.sources import promql

SOURCE = "prometheus"


class QueryClient(Protocol):
    """The one call used from prometheus_api_client.PrometheusConnect."""

    def custom_query(self, query: str, params: dict | None = None, timeout: int | None = None) -> list[dict]: ...


class PrometheusSource:
    name = SOURCE

    def __init__(
        self,
        url: str,
        selector: str = "",
        window_seconds: float = 60.0,
        timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
        verify: bool = True,
        client: QueryClient | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.selector = selector  # names an unnamed fleet
        self.window_seconds = float(window_seconds)
        self.timeout = timeout
        self.queries = promql.refresh_queries(promql.selector_matchers(selector), self.window_seconds)
        if client is None:
            from prometheus_api_client import PrometheusConnect

            # No retries: a refresh that fails is reported now and tried again next refresh.
            client = PrometheusConnect(
                url=self.url,
                headers=dict(headers or {}),
                disable_ssl=not verify,
                retry=Retry(total=0, raise_on_status=False),
                timeout=timeout,
            )
        self._client = client

    async def collect(self, now: float) -> FleetFigures:
        """Every figure at time `now` over the window; a failure is a source error, not an exception."""
        try:
            async with asyncio.timeout(self.timeout * 2):
                answers = await asyncio.gather(*(asyncio.to_thread(self._query, query, now) for query in self.queries.values()))
        except TimeoutError:
            return failed_figures(self.window_seconds, now, f"Prometheus at {self.url}: no answer within {self.timeout:g} s")
        except Exception as error:  # noqa: BLE001 - any client fault is a state of the source
            return failed_figures(self.window_seconds, now, f"Prometheus at {self.url}: {describe_error(error)}")
        return figures_from_answers(dict(zip(self.queries, answers)), self.window_seconds, now)

    async def aclose(self) -> None:
        session = getattr(self._client, "_session", None)
        if session is not None:
            session.close()

    def _query(self, query: str, now: float) -> list[dict]:
        return self._client.custom_query(query, params={"time": f"{now:.3f}"}, timeout=self.timeout)


def describe_error(error: BaseException) -> str:
    """One line for a client error: Prometheus' own error text when it sent one."""
    chain = _causes(error)
    # urllib3's NewConnectionError is also a timeout class: look for it first.
    if any(isinstance(e, (urllib3.exceptions.NewConnectionError, ConnectionRefusedError)) for e in chain):
        return "cannot connect (is Prometheus running, and is the URL right?)"
    if any(isinstance(e, (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)) for e in chain):
        return "timed out"
    if isinstance(error, requests.exceptions.ConnectionError):
        return f"connection failed: {error}"[:300]
    text = str(error)
    body = _error_body(text)
    if body is not None:
        status = re.search(r"HTTP Status Code (\d+)", text)
        return f"query refused{' (HTTP ' + status.group(1) + ')' if status else ''}: {body}"
    return f"{type(error).__name__}: {text}".strip()[:300]


def _causes(error: BaseException) -> list[BaseException]:
    """The error and what it wraps (requests wraps urllib3's errors in args and `reason`)."""
    out: list[BaseException] = []
    pending: list[BaseException] = [error]
    while pending and len(out) < 10:
        current = pending.pop()
        out.append(current)
        pending.extend(a for a in current.args if isinstance(a, BaseException))
        for linked in (getattr(current, "reason", None), current.__cause__, current.__context__):
            if isinstance(linked, BaseException) and linked not in out:
                pending.append(linked)
    return out


def _error_body(text: str) -> str | None:
    """The `error` field of the JSON body quoted (as a bytes repr) in prometheus-api-client's message."""
    found = re.search(r"\((b(['\"]).*\2)\)\s*$", text, re.DOTALL)
    if not found:
        return None
    try:
        payload = json.loads(ast.literal_eval(found.group(1)))
    except (ValueError, SyntaxError):
        return None
    detail = payload.get("error") if isinstance(payload, dict) else None
    return str(detail) if detail else None


def failed_figures(window_seconds: float, now: float, error: str) -> FleetFigures:
    fleet = Figures(name="fleet", url="", state="unknown", error=error)
    return FleetFigures(window_seconds, SOURCE, (), fleet, now, source_error=error)


def _value(result: Mapping[str, Any]) -> float | None:
    """A query result's number; NaN and infinities (no data in the window) are unknown."""
    try:
        value = float(result["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _by_figure(results: list[dict]) -> dict[str, list[tuple[Mapping[str, str], float | None]]]:
    out: dict[str, list[tuple[Mapping[str, str], float | None]]] = {}
    for result in results:
        labels = result.get("metric", {})
        out.setdefault(labels.get(promql.FIGURE_LABEL, ""), []).append((labels, _value(result)))
    return out


def _per_instance(rows: list[tuple[Mapping[str, str], float | None]]) -> dict[str, float | None]:
    return {labels.get("instance", ""): value for labels, value in rows}


def _ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole is not None and whole > 0 else None


def _sum(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _max(values) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def figures_from_answers(answers: Mapping[str, list[dict]], window_seconds: float, now: float) -> FleetFigures:
    """Turn the answers of `promql.refresh_queries` (by purpose) into FleetFigures."""
    up = _by_figure(answers.get("up", []))
    rates = _by_figure(answers.get("rates", []))
    gauges = _by_figure(answers.get("gauges", []))
    quantiles = _by_figure(answers.get("quantiles", []))
    fleet_quantiles = {figure: rows[0][1] for figure, rows in _by_figure(answers.get("fleet_quantiles", [])).items() if rows}

    up_by_instance = _per_instance(up.get("up", []))
    scraped_at = _per_instance(up.get("scraped_at", []))
    rate_by = {figure: _per_instance(rows) for figure, rows in rates.items()}
    by_reason: dict[str, dict[str, float]] = {}
    for labels, value in rates.get("requests_by_reason", []):
        if value is not None:
            by_reason.setdefault(labels.get("instance", ""), {})[labels.get("finished_reason", "unknown")] = value
    kv_by: dict[str, dict[str, float]] = {}
    for labels, value in gauges.get("kv_usage", []):
        if value is not None:
            kv_by.setdefault(labels.get("instance", ""), {})[labels.get("engine") or "0"] = value
    running = _per_instance(gauges.get("running", []))
    waiting = _per_instance(gauges.get("waiting", []))
    quantile_by = {figure: _per_instance(rows) for figure, rows in quantiles.items()}
    engine_configs = _engine_configs_by_instance(answers.get("cache_config", []))

    replicas = []
    for instance in sorted(up_by_instance):
        at = scraped_at.get(instance)
        age = max(now - at, 0.0) if at is not None else None
        state, error = _state(up_by_instance[instance], age, window_seconds, (rate_by.get("resets", {}).get(instance) or 0) > 0)
        values: dict[str, Any] = {name: rate_by.get(canonical, {}).get(instance) for name, canonical in RATE_FIGURES}
        values.update({name: quantile_by.get(name, {}).get(instance) for name, _c, _q in QUANTILE_FIGURES})
        for name, canonical in promql.MEAN_FIGURES:
            values[name] = _ratio(rate_by.get(canonical + "_sum", {}).get(instance), rate_by.get(canonical + "_count", {}).get(instance))
        kv = kv_by.get(instance, {})
        configs = list(engine_configs.get(instance, {}).values())
        replicas.append(
            Figures(
                name=instance,
                url=instance,
                state=state,
                error=error,
                requests_per_second_by_reason=by_reason.get(instance, {}),
                running=running.get(instance),
                waiting=waiting.get(instance),
                kv_usage=max(kv.values()) if kv else None,
                kv_usage_by_engine=kv,
                kv_capacity_tokens=kv_capacity_tokens(configs),
                kv_capacity_tokens_by_engine=kv_capacity_tokens_by_engine(configs),
                prefix_hit_share=_ratio(rate_by.get("prefix_cache_hits", {}).get(instance), rate_by.get("prefix_cache_queries", {}).get(instance)),
                data_age_seconds=age,
                **values,
            )
        )
    return FleetFigures(window_seconds, SOURCE, tuple(replicas), _fleet(replicas, rate_by, by_reason, fleet_quantiles), now)


def _state(up: float | None, age: float | None, window_seconds: float, reset: bool) -> tuple[ReplicaState, str]:
    if up is None or up < 1:
        return "down", "Prometheus' last scrape of this target failed (up == 0)"
    if age is not None and age > max(window_seconds, 60.0):
        return "stale", f"Prometheus last scraped this target {age:.0f} s ago"
    if reset:
        return "restarted", "a counter went down inside the window: the replica restarted"
    return "up", ""


def _engine_configs_by_instance(results: list[dict]) -> dict[str, dict[str, Mapping[str, str]]]:
    """`cache_config_info` label sets by instance, then engine: KV capacity comes from them."""
    per_engine: dict[str, dict[str, Mapping[str, str]]] = {}
    for result in results:
        labels = result.get("metric", {})
        # Both spellings of the family may be present: one label set per (instance, engine).
        per_engine.setdefault(labels.get("instance", ""), {}).setdefault(labels.get("engine") or "0", labels)
    return per_engine


def _fleet(
    replicas: list[Figures],
    rate_by: Mapping[str, Mapping[str, float | None]],
    by_reason: Mapping[str, Mapping[str, float]],
    fleet_quantiles: Mapping[str, float | None],
) -> Figures:
    """Rates and gauges summed, KV the max, quantiles from merged buckets (PromQL `sum by (le)`)."""
    current = [f for f in replicas if f.state in ("up", "restarted", "stale")]
    values: dict[str, Any] = {name: _sum(rate_by.get(canonical, {}).values()) for name, canonical in RATE_FIGURES}
    reasons: dict[str, float] = {}
    for per_reason in by_reason.values():
        for reason, value in per_reason.items():
            reasons[reason] = reasons.get(reason, 0.0) + value
    for name, canonical in promql.MEAN_FIGURES:
        values[name] = _ratio(_sum(rate_by.get(canonical + "_sum", {}).values()), _sum(rate_by.get(canonical + "_count", {}).values()))
    values.update({name: fleet_quantiles.get(name) for name, _c, _q in QUANTILE_FIGURES})
    hits = _sum(rate_by.get("prefix_cache_hits", {}).values())
    queries = _sum(rate_by.get("prefix_cache_queries", {}).values())
    answering = len(current)
    notes = [f"{len(replicas) - answering} of {len(replicas)} replicas not answering"] if answering < len(replicas) else []
    state: ReplicaState = "up" if answering else ("down" if replicas else "unknown")
    if not replicas:
        notes.append("no targets match the selector in Prometheus")
    return Figures(
        name="fleet",
        url="",
        state=state,
        error="; ".join(notes),
        requests_per_second_by_reason=reasons,
        running=_sum(f.running for f in current),
        waiting=_sum(f.waiting for f in current),
        kv_usage=_max(f.kv_usage for f in current),
        kv_capacity_tokens=_sum(f.kv_capacity_tokens for f in current),
        prefix_hit_share=_ratio(hits, queries),
        data_age_seconds=_max(f.data_age_seconds for f in current),
        **values,
    )
