"""History from Prometheus: vLLM's series over a past range, read as the polls a recording would have written.

`capcon history import` asks Prometheus for the raw vLLM series of the fleet (the counters, gauges and
histogram buckets a scrape reads, by the names in console.metrics.vllm) with range queries through
prometheus-api-client, one chunk of the range at a time. Each step of a chunk becomes one poll: per
instance, the series' values at that step, normalised by the same `sample_from_samples` a scrape goes
through (names across vLLM versions, engines summed, impossible values unknown). So `capcon history`,
`history --plan` and `history --backtest` read an imported file exactly as a recorded one.

Memory is bounded by the chunk: a chunk's answer is converted, written and dropped before the next is
asked for. (prometheus-api-client's `get_metric_range_data` also reads in chunks, but joins every
chunk's answer into one list before returning, so its memory grows with the range; its
`custom_query_range` per chunk is used instead.)

`rows_from_matrix` is the conversion, pure (no I/O); `RangeReader` the network side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import unquote, urlsplit, urlunsplit

from console.metrics.exposition import PROCESS_START, ParseError
from console.metrics.figures import ReplicaState
from console.metrics.vllm import CACHE_CONFIG, COUNTERS, CREATED_MARKERS, GAUGES, HISTOGRAMS, sample_from_samples
from console.redact import redact_url
from console.targets import TargetResult

SOURCE = "import"  # the polls' source: marks the rows as imported, not recorded
INSTANCE_LABEL = "instance"
_SHOWN = 200  # characters of a label value kept as a replica's name
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def series_names() -> tuple[str, ...]:
    """Every sample name a scrape reads: counters (with `_total`), gauges, histogram parts, the cache config,
    the process start and the counters' `_created` markers (a restart shows in either)."""
    names: list[str] = []
    for table in (COUNTERS, GAUGES):
        for spellings in table.values():
            names += spellings
    for spellings in HISTOGRAMS.values():
        names += [name + part for name in spellings for part in ("_bucket", "_sum", "_count")]
    return (*names, CACHE_CONFIG, PROCESS_START, *CREATED_MARKERS)


def series_query(selector: str) -> str:
    """The one PromQL selector for every series a poll needs, restricted by the user's `selector`."""
    names = "|".join(re.escape(name) for name in series_names())
    inner = selector.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    return '{__name__=~"' + names + '"' + (", " + inner if inner else "") + "}"


def _number(text: object) -> float | None:
    if not isinstance(text, (str, int, float)):  # what JSON holds: a list, a map, null are no number
        return None
    try:
        return float(text)
    except ValueError:
        return None


def replica_name(instance: str) -> str:
    """An instance label as a replica's name: printable, bounded (text from the network never reaches a terminal raw)."""
    shown = _PRINTABLE.sub("?", instance)
    return shown if len(shown) <= _SHOWN else shown[:_SHOWN] + "..."


def replica_url(instance: str) -> str:
    """The URL the replica is stored under: its /metrics page when the instance is host:port, else the name."""
    name = replica_name(instance)
    if re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}", name):
        return f"http://{name}/metrics"
    return name


@dataclass(frozen=True)
class ImportedPoll:
    at: float
    results: tuple[TargetResult, ...]


def rows_from_matrix(matrix: Iterable[object], instance_label: str = INSTANCE_LABEL) -> list[ImportedPoll]:
    """A range query's `result` (a list of {"metric": labels, "values": [[time, "value"], ...]}) as one poll per
    step: each instance's series at that step read as one scrape of it. An instance whose series at a step are
    not a vLLM page (no engine metrics, buckets falling) is left out of that step's poll; a malformed item is
    skipped, never an exception."""
    by_step: dict[float, dict[str, list[tuple[str, dict[str, str], float]]]] = {}
    for item in matrix:
        if not isinstance(item, Mapping):
            continue
        labels = item.get("metric")
        values = item.get("values")
        if not isinstance(labels, Mapping) or not isinstance(values, list):
            continue
        name = labels.get("__name__")
        instance = labels.get(instance_label)
        if not isinstance(name, str) or not isinstance(instance, str):
            continue
        rest = {k: v for k, v in labels.items() if k != "__name__" and isinstance(k, str) and isinstance(v, str)}
        for pair in values:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                continue
            at, value = _number(pair[0]), _number(pair[1])
            if at is None or value is None or not math.isfinite(at):
                continue
            by_step.setdefault(at, {}).setdefault(instance, []).append((name, rest, value))
    polls = []
    for at in sorted(by_step):
        results = []
        for instance in sorted(by_step[at]):
            # A page lists a family's lines together, as sample_from_samples expects: sort by name keeps them so.
            samples = sorted(by_step[at][instance], key=lambda s: s[0])
            try:
                sample = sample_from_samples(samples, at)
            except ParseError:
                continue
            results.append(TargetResult(replica_name(instance), replica_url(instance), ReplicaState.UP, sample, "", at))
        if results:
            polls.append(ImportedPoll(at, tuple(results)))
    return polls


class RangeFailed(Exception):
    """Prometheus could not be read (unreachable, an error status, an answer that is no Prometheus answer)."""


class RangeReader:
    """Range queries, a chunk at a time, through prometheus-api-client; errors as RangeFailed in one line."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 - loaded only for an import
        from urllib3.util.retry import Retry  # noqa: PLC0415 - the library's own HTTP stack

        self.shown = redact_url(url)
        user, password = _credentials(url)
        self.client = PrometheusConnect(
            url=_without_credentials(url).rstrip("/"),
            auth=(user, password) if user else None,
            timeout=timeout,
            # Two more tries on a refused connection or a busy server, then one line: the library's default
            # retries a refused connection for six seconds before saying anything.
            retry=Retry(total=2, backoff_factor=0.1, status_forcelist=(502, 503, 504), raise_on_status=False),
        )

    def chunks(self, query: str, start: float, end: float, step: float, chunk: float) -> Iterator[list]:
        """The answer of each chunk of [start, end) in turn (steps at start, start + step, ...)."""
        at = start
        while at < end:
            last = min(at + chunk, end) - step  # the chunk's steps: at, at + step, ... below its end
            last = max(at, math.floor((last - at) / step) * step + at)
            try:
                answer = self.client.custom_query_range(
                    query,
                    datetime.fromtimestamp(at, UTC),
                    datetime.fromtimestamp(last, UTC),
                    step=f"{step:g}s",
                )
            except Exception as error:  # noqa: BLE001 - the library raises requests' errors, its own, and JSON errors
                raise RangeFailed(_words(error, self.shown)) from None
            if not isinstance(answer, list):
                raise RangeFailed(f"{self.shown}: the answer is not a Prometheus matrix")
            yield answer
            at = last + step


def _credentials(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return unquote(parts.username or ""), unquote(parts.password or "")


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc))


def _words(error: BaseException, shown: str) -> str:
    """One line for a failed range query, never the library's traceback or a password."""
    kind = type(error).__name__
    text = str(error).splitlines()[0] if str(error) else kind
    if "ConnectionError" in kind or "Connection refused" in text or "Max retries" in text:
        return f"{shown}: cannot connect (is Prometheus running there?)"
    if "Timeout" in kind:
        return f"{shown}: no answer in time"
    if "HTTP Status Code" in text:
        code = re.search(r"HTTP Status Code (\d+)", text)
        detail = re.search(r'"error":"([^"]{0,160})', text)
        said = f": {detail.group(1)}" if detail else ""
        return f"{shown}: answered HTTP {code.group(1) if code else '?'}{said}"
    if "JSON" in kind or "Expecting value" in text:
        return f"{shown}: the answer is not JSON; expected a Prometheus HTTP API"
    return f"{shown}: {kind}: {replica_name(text)[:160]}"
