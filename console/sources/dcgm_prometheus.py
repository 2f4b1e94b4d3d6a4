"""dcgm-exporter's series read through the fleet's own Prometheus, beside its vLLM series.

A fleet watched through Prometheus (`--source prometheus`) has its GPUs' counters there too,
wherever a dcgm-exporter is scraped. Each poll sends two instant queries
(console.metrics.promql: `dcgm_query`, `replica_pods_query`) through the fleet's
PrometheusSource, so they are bounded as its own are (one deadline, the answer budget, the
answer's shape checked as a whole) and sent with its URL, auth and TLS settings:

- the GPUs: SM, tensor and DRAM active, memory used and GPU_UTIL, with the labels that name
  and pair a GPU. The rows are written back as exposition lines and read by the one
  dcgm-exporter reader (console.metrics.dcgm), so units, ranges, MIG instances and bad values
  are decided in one place whichever way a page came. A GPU's host is its exporter's address
  (Prometheus' `instance`), as a page read directly is named by its URL; its pod is the
  page's own `pod` label, or `exported_pod` where the scrape's Kubernetes discovery put the
  exporter's own pod under that name (`honor_labels` off);
- the replicas' pods: the `pod`/`namespace` labels Kubernetes discovery gives their targets
  (`kubernetes_pod_name`/`kubernetes_namespace` in older configurations), which pair a
  replica with the GPUs its pod holds (console.fleet.gpus).

Staleness is Prometheus' own: a series whose exporter stopped answering leaves the instant
answer after its lookback (5 minutes by default). A query that fails is named in words; its
GPUs are then unknown for this poll, never 0, and the poll goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from console.metrics import promql
from console.metrics.dcgm import DcgmPageError, GpuReading, parse_dcgm
from console.redact import redact
from console.sources.prometheus import PrometheusSource, QueryError

# Labels a GPU reading keeps as the page wrote them; pod, namespace and container are read below.
_KEPT = ("UUID", "gpu", "GPU_I_ID", "GPU_I_PROFILE", "modelName")
_POD_LABELS = ("pod", "namespace", "container")
Rows = list[tuple[dict, "float | None"]]  # an instant answer's (labels, value) rows


@dataclass(frozen=True)
class DcgmPrometheusRead:
    """One poll's read: the GPUs found, the exporters they came from, what failed, the replicas' pods."""

    gpus: tuple[GpuReading, ...] = ()
    exporters: int = 0  # dcgm-exporter targets (Prometheus `instance`s) the GPUs came from
    errors: tuple[str, ...] = ()
    pods: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)  # replica name -> (pod, namespace)
    bad_rows: int = 0  # rows that could not be used (the rest were kept)


class DcgmPrometheusSource:
    name = "dcgm-prometheus"

    def __init__(self, prometheus: PrometheusSource, selector: str = "") -> None:
        self.prometheus = prometheus  # the fleet's own source: its URL, auth, deadline and answer budget
        self.selector = selector
        self.dcgm_query = promql.dcgm_query(promql.selector_matchers(selector, "--dcgm-selector"))
        self.pods_query = promql.replica_pods_query(promql.selector_matchers(prometheus.selector))
        self.urls = [prometheus.url]  # where the GPUs are read, as shown: one read per poll

    async def fetch(self, now: float) -> DcgmPrometheusRead:
        answers: list[Rows | BaseException] = list(
            await asyncio.gather(
                self.prometheus.instant_vector(self.dcgm_query, now, "dcgm"),
                self.prometheus.instant_vector(self.pods_query, now, "replica pods"),
                return_exceptions=True,
            )
        )
        gpu_rows, pod_rows = answers
        errors: list[str] = []
        pods: dict[str, tuple[str, str | None]] = {}
        if isinstance(pod_rows, QueryError):
            errors.append(f"replicas' pod labels: {pod_rows}")  # pairing by host still works
        elif isinstance(pod_rows, BaseException):
            raise pod_rows
        else:
            pods = pods_by_replica(pod_rows)
        if isinstance(gpu_rows, QueryError):
            return DcgmPrometheusRead(errors=(str(gpu_rows), *errors), pods=pods)
        if isinstance(gpu_rows, BaseException):
            raise gpu_rows
        if not gpu_rows:
            matching = f" match --dcgm-selector {self.selector!r}" if self.selector else ""
            errors.insert(0, f"Prometheus at {self.prometheus.url}: no dcgm-exporter series{matching}")
            return DcgmPrometheusRead(errors=tuple(errors), pods=pods)
        text, skipped, exporters = exposition_of(gpu_rows)
        try:
            page = parse_dcgm(text)
        except DcgmPageError as error:
            return DcgmPrometheusRead(errors=(str(error), *errors), pods=pods, bad_rows=len(gpu_rows))
        return DcgmPrometheusRead(page.gpus, exporters, tuple(errors), pods, skipped + page.errors)

    async def aclose(self) -> None:
        """Nothing of its own to close: the fleet's PrometheusSource is closed with the fleet's watcher."""


def _host(instance: str) -> str:
    try:
        return urlsplit(f"//{instance}").hostname or ""
    except ValueError:
        return ""


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition_of(rows: Rows) -> tuple[str, int, int]:
    """Prometheus' rows as dcgm-exporter's lines: (the text, rows skipped, exporters seen).

    A row of another name, or one whose value is unknown, is left to the reader to refuse
    (NaN) or skipped here; label names are fixed, so only values are escaped.
    """
    lines = []
    skipped = 0
    exporters: set[str] = set()
    fields = frozenset(promql.DCGM_FIELDS)
    for labels, value in rows:
        name = labels.get("__name__")
        if name not in fields:
            skipped += 1
            continue
        kept = {label: labels[label] for label in _KEPT if labels.get(label)}
        for label in _POD_LABELS:
            given = labels.get(f"exported_{label}") or labels.get(label)
            if given:
                kept[label] = given
        instance = labels.get("instance", "")
        host = _host(instance) or labels.get("hostname") or labels.get("Hostname")
        if host:
            kept["hostname"] = host
        if instance:
            exporters.add(instance)
        written = ",".join(f'{label}="{_escaped(text)}"' for label, text in kept.items())
        lines.append(f"{name}{{{written}}} {'NaN' if value is None else repr(float(value))}\n")
    return "".join(lines), skipped, len(exporters)


def pods_by_replica(rows: Rows) -> dict[str, tuple[str, str | None]]:
    """Replica name (its `instance`, as the Prometheus source names it) -> (pod, namespace), where labelled."""
    out: dict[str, tuple[str, str | None]] = {}
    for labels, _value in rows:
        instance = labels.get("instance")
        pod = labels.get("pod") or labels.get("kubernetes_pod_name")
        if instance and pod:
            out.setdefault(redact(instance), (pod, labels.get("namespace") or labels.get("kubernetes_namespace")))
    return out
