"""Source `prometheus`: per-replica and fleet figures from a Prometheus-compatible API.

For fleets too large to scrape from one terminal: Prometheus (or Thanos, Mimir)
already holds every replica's series, and PromQL does the window math. Each
refresh sends the fixed set of queries in `console.sources.promql`, evaluated at
the same instant, whatever the fleet size: every figure of every replica in one
round, or, past `detail_all` replicas, the top-k view in two (every replica's
state and gauges and the fleet's aggregates, then the rates and percentiles of
the replicas `picked` for the screen).

Replicas are Prometheus targets (`instance`), their state Prometheus' own `up`.
Prometheus unreachable, too slow, answering a query with an error, or with an
answer that is not a Prometheus vector becomes `FleetFigures.source_error` with
no replicas: never an exception.

The answers are read here, not by a client library, because a Prometheus (or a
proxy in front of it) may misbehave in ways a library does not bound:

* one deadline (`timeout`) covers the reads of a refresh (both rounds; reading
  the first round's answers is not counted); at it every read stops and its
  connection is closed, so nothing goes on reading an answer already given up;
* the answers of one refresh are read up to `max_answer_bytes` in total, counted
  after decompression (a small gzip body can inflate a thousandfold); past it
  the refresh is refused without parsing anything;
* JSON of the wrong shape (a `result` that is not a list, labels that are not
  strings, values that are not `[time, "number"]`) is refused as a whole, and
  NaN or infinite values are unknown, never a number.

A URL's `user:password@` is sent as HTTP Basic auth; the URL is shown, and its
errors recorded, with the password masked (`console.redact`).

Choose a window of at least twice the scrape interval (Grafana's
`$__rate_interval` uses four): `rate()` needs two samples in the window, and
with fewer the rates and quantiles are unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import ssl
import threading
import zlib
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import httpx

from console.metrics.figures import ANSWERING, FLEET_TOTAL, Figures, FleetFigures, ReplicaState
from console.metrics.vllm import kv_capacity_tokens, kv_capacity_tokens_by_engine
from console.metrics.window import QUANTILE_FIGURES, RATE_FIGURES
from console.redact import redact, redact_url, url_secrets
from console.sources import promql

SOURCE = "prometheus"
# The answers one refresh reads, in total, decompressed. Measured on a real Prometheus holding
# 10,000 replicas (pod-IP instances, Kubernetes target labels, one engine each): the six answers
# come to 37 MB (rates 20.5 MB, the largest), 50 MB with 60-character instance names.
DEFAULT_MAX_ANSWER_BYTES = 128 * 1024 * 1024
_BODY_SHOWN = 160  # characters of a non-JSON error body kept in the error text
# A longer query (the top-k view's instance list) is sent as a POST form: proxies refuse long URLs (8 KB).
MAX_GET_QUERY_CHARS = 4000
# The top-k view's own picks, beside Prometheus' topk/bottomk: the first replicas by name (the table's
# first screen before any sort) and the most loaded by each gauge every replica reports.
DETAIL_FIRST = 40
DETAIL_MAX = DETAIL_FIRST + 3 * 10 + 2 * 10 * 15  # the first names, three gauges' tops, both ends of 15 figures


class QueryClient(Protocol):
    """A synchronous client in place of the HTTP reads (tests), with prometheus-api-client's call signature."""

    def custom_query(self, query: str, params: dict | None = None, timeout: int | None = None) -> list[dict]: ...


class AnswerError(Exception):
    """An answer that cannot be read as Prometheus' (the words say why); a source error."""


class QueryError(Exception):
    """An instant query that gave no rows (unreachable, refused, too slow, not a vector); the words are redacted."""


class _Refused(Exception):
    """Prometheus (or a proxy) answered, but not with a result: an HTTP error or an error status."""


class _Abandoned(Exception):
    """The refresh was given up (its caller cancelled): the worker stops parsing."""


class _TooLarge(AnswerError):
    """The answers of one refresh passed the budget: the source moves to the top-k view."""


class _Budget:
    """Decompressed bytes the answers of one refresh may still take."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def take(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise _TooLarge(
                f"answers larger than {self.limit / (1024 * 1024):g} MB in total (decompressed); not read "
                "(a fleet this large needs --max-answer-mb)"
            )


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
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        detail_all: int = promql.DETAIL_ALL_REPLICAS,
    ) -> None:
        base = url.strip().rstrip("/")
        self.url = redact_url(base)  # as shown and recorded: never a password or a token
        self.selector = selector  # names an unnamed fleet
        self.window_seconds = float(window_seconds)
        self.timeout = timeout
        self.max_answer_bytes = int(max_answer_bytes)
        self._matchers = promql.selector_matchers(selector)
        self.queries = promql.refresh_queries(self._matchers, self.window_seconds)
        self.overview = promql.overview_queries(self._matchers, self.window_seconds)
        # A fleet up to `detail_all` replicas: every replica's figures in one round of `queries`. Larger (seen
        # at the last refresh, or a refresh of every figure that did not fit the deadline or the budget): the
        # top-k view, `overview` then the detail of the picked replicas (console.sources.promql).
        self.detail_all = int(detail_all)
        self.top_k_view = False
        self.last_queries = 0  # queries the last refresh sent
        self._headers = {
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
            "User-Agent": "capcon",
            **dict(headers or {}),
        }
        self._secrets = tuple(url_secrets(base)) + tuple(
            value.split(" ", 1)[-1] for key, value in self._headers.items() if key.lower() == "authorization"
        )
        self._verify = verify
        self._client = client
        self._http: httpx.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._endpoint: httpx.URL | None = None
        self._auth: httpx.BasicAuth | None = None
        self._bad_url = ""
        try:
            parsed = httpx.URL(base)
            if parsed.scheme not in ("http", "https") or not parsed.host:
                raise httpx.InvalidURL("expected an http(s) URL with a host")
        except (httpx.InvalidURL, TypeError, ValueError) as error:
            self._bad_url = self._redact(f"not a usable URL: {error}")
        else:
            if parsed.userinfo:  # sent as Basic auth, never as part of the URL
                self._auth = httpx.BasicAuth(parsed.username, parsed.password)
                parsed = parsed.copy_with(username=None, password=None)
            self._endpoint = parsed.copy_with(path=parsed.path.rstrip("/") + "/api/v1/query")

    async def collect(self, now: float) -> FleetFigures:
        """Every figure at time `now` over the window; a failure is a source error, not an exception."""
        stop = threading.Event()
        try:
            if self._bad_url:
                raise AnswerError(self._bad_url)
            # One deadline covers the reads of the whole refresh (one round, or two in the top-k view).
            deadline = asyncio.get_running_loop().time() + self.timeout
            budget = _Budget(self.max_answer_bytes)
            if self.top_k_view:
                figures = await self._top_k(now, deadline, budget, stop)
            else:
                try:
                    async with asyncio.timeout_at(deadline):
                        answers = await self._answers(self.queries, now, budget)
                except (TimeoutError, _TooLarge):
                    self.top_k_view = True  # every figure of every replica does not fit: the top-k view next time
                    raise
                checked = await asyncio.to_thread(self._checked, answers, stop)
                figures = await asyncio.to_thread(_figures_from_rows, checked, self.window_seconds, now)
            count = len(figures.replicas)
            if count > self.detail_all:
                self.top_k_view = True
            elif count <= self.detail_all // 2:
                self.top_k_view = False  # well inside the limit again: one round
            return figures
        except TimeoutError:
            return self._failed(now, f"no answer within {self.timeout:g} s")
        except (AnswerError, _Refused) as problem:
            return self._failed(now, str(problem))
        except Exception as error:  # noqa: BLE001 - any client fault is a state of the source
            return self._failed(now, describe_error(error))
        finally:
            stop.set()  # cancelled meanwhile: a worker stops at its next step

    async def _top_k(self, now: float, deadline: float, budget: _Budget, stop: threading.Event) -> FleetFigures:
        """Every replica's state and gauges and the fleet's aggregates, then the picked replicas' rates and percentiles."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(deadline):
            first = await self._answers(self.overview, now, budget)
        began = loop.time()

        def read_overview() -> tuple[dict[str, list[Row]], tuple[str, ...] | None]:
            rows = self._checked(first, stop)
            return rows, picked(rows, self.detail_all)

        overview, chosen = await asyncio.to_thread(read_overview)  # off the event loop: 0.1 s at 10,000
        deadline += loop.time() - began  # the deadline is Prometheus' to answer in: reading the overview is ours
        detail = promql.detail_queries(self._matchers, self.window_seconds, chosen)
        async with asyncio.timeout_at(deadline):
            second = await self._answers(detail, now, budget)
        checked = {**overview, **await asyncio.to_thread(self._checked, second, stop)}
        self.last_queries = len(self.overview) + len(detail)
        return await asyncio.to_thread(_figures_from_rows, checked, self.window_seconds, now)

    async def aclose(self) -> None:
        if self._http is not None:
            http, self._http = self._http, None
            try:
                await http.aclose()
            except RuntimeError:  # made in an event loop that has closed since
                pass
        session = getattr(self._client, "_session", None)
        if session is not None:
            session.close()

    async def instant_vector(self, query: str, now: float, purpose: str = "instant") -> list[tuple[dict, float | None]]:
        """One instant query's (labels, value) rows, read as `collect` reads its answers.

        The same bounds: one deadline (`timeout`), `max_answer_bytes` decompressed, the answer's
        shape checked as a whole. Any failure is a QueryError whose words are already redacted.
        """
        try:
            if self._bad_url:
                raise AnswerError(self._bad_url)
            async with asyncio.timeout(self.timeout):
                if self._client is not None:
                    result: object = await asyncio.to_thread(
                        self._client.custom_query,
                        query,
                        params={"time": f"{now:.3f}"},
                        # prometheus-api-client annotates `timeout` as int; it hands it to requests, which takes
                        # seconds as a float.
                        timeout=self.timeout,  # type: ignore[arg-type]
                    )
                else:
                    body = await self._read(self._session(), query, now, _Budget(self.max_answer_bytes))
                    result = _result(purpose, body)
            return [(dict(labels), value) for labels, value in _rows(purpose, result)]
        except TimeoutError:
            detail = f"no answer within {self.timeout:g} s"
        except (AnswerError, _Refused) as problem:
            detail = str(problem)
        except Exception as error:  # noqa: BLE001 - any client fault is a state of the source
            detail = describe_error(error)
        raise QueryError(f"Prometheus at {self.url}: {self._redact(detail)}")

    # --- reading ---------------------------------------------------------------------------

    async def _answers(self, queries: Mapping[str, str], now: float, budget: _Budget) -> dict[str, object]:
        """Each query's answer by purpose: raw bytes (read here) or a client's result list."""
        self.last_queries = len(queries)
        calls: dict[str, Awaitable[object]]
        if self._client is not None:
            client = self._client
            params = {"time": f"{now:.3f}"}
            calls = {
                # prometheus-api-client annotates `timeout` as int; requests takes seconds as a float.
                p: asyncio.to_thread(client.custom_query, q, params=params, timeout=self.timeout)  # type: ignore[arg-type]
                for p, q in queries.items()
            }
        else:
            http = self._session()
            calls = {p: self._read(http, q, now, budget) for p, q in queries.items()}
        tasks = {purpose: asyncio.ensure_future(call) for purpose, call in calls.items()}
        try:
            # The first failure ends the refresh: the other reads stop at once (their connections close).
            done, _pending = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
            for task in tasks.values():
                if task in done and (error := task.exception()) is not None:
                    raise error
            return {purpose: task.result() for purpose, task in tasks.items()}
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    def _session(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:
            # Proxies from HTTP(S)_PROXY / NO_PROXY and SSL_CERT_FILE are honoured; no retries:
            # a refresh that fails is reported now and tried again at the next one.
            self._http = httpx.AsyncClient(
                headers=self._headers,
                auth=self._auth,
                verify=self._verify,
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
            )
            self._http_loop = loop
        return self._http

    async def _read(self, http: httpx.AsyncClient, query: str, now: float, budget: _Budget) -> bytes:
        # The base URL's own query (?api_key=... for a hosted Prometheus) is kept beside the query's.
        endpoint = self._endpoint
        if endpoint is None:  # the base URL was not usable: the callers said so before reading
            raise AnswerError(self._bad_url)
        fields = {"query": query, "time": f"{now:.3f}"}
        if len(query) > MAX_GET_QUERY_CHARS:  # a long instance list: in the body, past proxies' URL limits
            request = http.build_request("POST", endpoint, data=fields)
        else:
            request = http.build_request("GET", endpoint, params=endpoint.params.merge(fields))
        response = await http.send(request, stream=True)
        try:
            body = await _body(response, budget)
        finally:
            await response.aclose()  # unfinished (cancelled, refused): the connection is closed
        if response.status_code != 200:
            raise _Refused(self._redact(_status_words(response.status_code, response.reason_phrase, body)))
        return body

    # --- parsing (in a worker thread) -------------------------------------------------------

    def _checked(self, answers: Mapping[str, object], stop: threading.Event) -> dict[str, list[Row]]:
        """Each answer's rows, shape checked (in a worker thread); stops between answers once given up."""
        checked: dict[str, list[Row]] = {}
        with _collector_paused():
            for purpose, answer in answers.items():
                if stop.is_set():
                    raise _Abandoned()
                result = _result(purpose, answer) if isinstance(answer, (bytes, bytearray)) else answer
                checked[purpose] = _rows(purpose, result)
        if stop.is_set():
            raise _Abandoned()
        return checked

    def _figures(self, answers: Mapping[str, object], now: float, stop: threading.Event) -> FleetFigures:
        return _figures_from_rows(self._checked(answers, stop), self.window_seconds, now)

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _failed(self, now: float, detail: str) -> FleetFigures:
        return failed_figures(self.window_seconds, now, f"Prometheus at {self.url}: {self._redact(detail)}")


async def _body(response: httpx.Response, budget: _Budget) -> bytes:
    """The answer's bytes, decompressed, within the refresh's budget; AnswerError past it."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunks = []
        try:
            async for chunk in response.aiter_raw():
                while chunk:
                    # Never inflate more than the budget allows: one step at most one byte past it.
                    out = inflate.decompress(chunk, max(budget.left, 0) + 1)
                    budget.take(len(out))
                    chunks.append(out)
                    chunk = inflate.unconsumed_tail
                if inflate.eof:
                    break
        except zlib.error as error:
            raise AnswerError(f"gzip answer is corrupt: {error}") from None
        if not inflate.eof:
            raise AnswerError("gzip answer cut short")
        return b"".join(chunks)
    if encoding not in ("", "identity"):
        raise AnswerError(f"unsupported Content-Encoding {encoding[:40]!r}")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > budget.left:
        budget.take(int(declared))  # refused before reading a byte
    chunks = []
    async for chunk in response.aiter_raw():
        budget.take(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


def _status_words(status: int, reason: str, body: bytes) -> str:
    """An HTTP error in words: Prometheus' own error text when it sent one."""
    detail = _error_text(body)
    if detail is not None:
        return f"query refused (HTTP {status}): {detail}"
    text = " ".join(body[: _BODY_SHOWN * 4].decode("utf-8", "replace").split())
    shown = f"HTTP {status} {reason}".strip()
    return f"{shown}: {text[:_BODY_SHOWN]}" if text else shown


def _error_text(body: bytes) -> str | None:
    """`error` (with `errorType`) of a Prometheus error body, None for anything else."""
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    if not isinstance(payload, dict) or not payload.get("error"):
        return None
    return str(payload["error"])[:300]


def _result(purpose: str, body: bytes | bytearray) -> object:
    """The `data.result` of a successful instant-vector answer (its shape checked by `_rows`); AnswerError
    otherwise."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise AnswerError(f"answer to the {purpose} query is not JSON ({str(error)[:120]})") from None
    if not isinstance(payload, dict):
        raise AnswerError(f"answer to the {purpose} query is not a Prometheus answer (not a JSON object)")
    status = payload.get("status")
    if status == "error":
        raise _Refused(
            f"query refused: {str(payload.get('error') or payload.get('errorType') or 'no reason given')[:300]}"
        )
    if status != "success":
        raise AnswerError(f"answer to the {purpose} query is not a Prometheus answer (status {_brief(status)})")
    data = payload.get("data")
    if not isinstance(data, dict):
        raise AnswerError(f"answer to the {purpose} query is not a Prometheus answer (data is {_kind(data)})")
    if data.get("resultType") != "vector":
        raise AnswerError(
            f"answer to the {purpose} query is not an instant vector (resultType {_brief(data.get('resultType'))})"
        )
    return data.get("result")


def describe_error(error: BaseException) -> str:
    """One line for a transport or client error (redacted by the caller)."""
    chain = _causes(error)
    if any(isinstance(e, (ssl.SSLError, ssl.CertificateError)) for e in chain):
        return f"TLS failed: {_words(error)}"[:300]
    if any(isinstance(e, (httpx.ConnectError, ConnectionRefusedError)) for e in chain):
        return "cannot connect (is Prometheus running, and is the URL right?)"
    if any(isinstance(e, (httpx.TimeoutException, TimeoutError)) for e in chain):
        return "timed out"
    if isinstance(error, (httpx.RemoteProtocolError, httpx.ReadError)):
        return f"answer cut short: {_words(error)}"[:300]
    if isinstance(error, (httpx.InvalidURL, httpx.UnsupportedProtocol)):
        return f"not a usable URL: {_words(error)}"[:300]
    if isinstance(error, httpx.HTTPError):
        return f"connection failed: {_words(error)}"[:300]
    return f"{type(error).__name__}: {error}".strip()[:300]


def _words(error: BaseException) -> str:
    return str(error).strip() or type(error).__name__


def _causes(error: BaseException) -> list[BaseException]:
    """The error and what it wraps (in args, `reason`, __cause__ and __context__)."""
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


def failed_figures(window_seconds: float, now: float, error: str) -> FleetFigures:
    fleet = Figures(name=FLEET_TOTAL, url="", state=ReplicaState.UNKNOWN, error=error)
    return FleetFigures(window_seconds, SOURCE, (), fleet, now, source_error=error)


# --- answers -> figures --------------------------------------------------------------------

Row = tuple[Mapping[str, str], "float | None"]


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _brief(value: object) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else _kind(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _number(value: object, where: str) -> float | None:
    """A sample's value: a string Prometheus wrote from a float. NaN and infinities (no data in
    the window) are unknown, never a number.

    Hook for the impossible-values rule of console.metrics (a negative rate, a share over 1):
    it applies to whole figures, after `figures_from_answers`.
    """
    if not isinstance(value, str):
        raise AnswerError(f"{where} is {_kind(value)}, not a number in a string")
    try:
        number = float(value)
    except ValueError:
        raise AnswerError(f"{where} is {_brief(value)}, not a number") from None
    return number if math.isfinite(number) else None


def _rows(purpose: str, result: object) -> list[Row]:
    """The (labels, value) pairs of an instant vector's `result`; AnswerError for any other shape.

    Each item is checked in one expression; the words of a refusal are made only for the item
    that fails (making them for each of 300,000 rows cost more than the JSON parse).
    """
    if not isinstance(result, list):
        raise AnswerError(f"answer to the {purpose} query: result is {_kind(result)}, not a list")
    rows: list[Row] = []
    append = rows.append
    for item in result:
        if type(item) is dict:
            labels, pair = item.get("metric"), item.get("value")
            if (
                type(labels) is dict
                and type(pair) is list
                and len(pair) == 2
                and type(pair[1]) is str
                and type(pair[0]) in (int, float)
                and all(type(value) is str for value in labels.values())
            ):
                try:
                    number = float(pair[1])
                except ValueError:
                    pass
                else:
                    append((labels, number if math.isfinite(number) else None))
                    continue
        append(_checked_item(purpose, len(rows), item))
    return rows


def _checked_item(purpose: str, index: int, item: object) -> Row:
    """result[index] read with every check in turn: its row, or the AnswerError that says what is wrong."""
    where = f"answer to the {purpose} query: result[{index}]"
    if not isinstance(item, dict):
        raise AnswerError(f"{where} is {_kind(item)}, not an object")
    labels = item.get("metric")
    if not isinstance(labels, dict):
        raise AnswerError(f"{where}.metric is {_kind(labels)}, not an object of labels")
    for name, value in labels.items():
        if not isinstance(value, str):
            raise AnswerError(f"{where}.metric label {_brief(name)} is {_kind(value)}, not a string")
    pair = item.get("value")
    if (
        not isinstance(pair, list)
        or len(pair) != 2
        or isinstance(pair[0], bool)
        or not isinstance(pair[0], (int, float))
    ):
        raise AnswerError(f'{where}.value is not a [time, "number"] pair')
    return labels, _number(pair[1], f"{where}.value[1]")


def _by_figure(rows: Iterable[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    label = promql.FIGURE_LABEL
    for row in rows:  # the rows themselves, not a new pair for each (100,000 rows at 10,000 replicas)
        figure = row[0].get(label, "")
        if figure in out:
            out[figure].append(row)
        else:
            out[figure] = [row]
    return out


def _instance(labels: Mapping[str, str]) -> str:
    return labels.get("instance", "")


def _per_instance(rows: list[Row]) -> dict[str, float | None]:
    return {_instance(labels): value for labels, value in rows}


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or not whole > 0:
        return None
    ratio = part / whole
    return ratio if math.isfinite(ratio) else None


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    total = sum(known) if known else None
    return total if total is None or math.isfinite(total) else None


def _max(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def figures_from_answers(answers: Mapping[str, list], window_seconds: float, now: float) -> FleetFigures:
    """Turn the `result` lists of `promql.refresh_queries` (by purpose) into FleetFigures.

    Raises AnswerError when a result is not an instant vector of string labels and
    `[time, "number"]` values (the caller makes that the source's error).
    """
    return _figures_from_rows(
        {purpose: _rows(purpose, result) for purpose, result in answers.items()}, window_seconds, now
    )


def picked(overview: Mapping[str, list[Row]], detail_all: int) -> tuple[str, ...] | None:
    """The replicas whose rates and percentiles a large fleet's refresh reads; None: every replica (a small fleet).

    Prometheus' picks (the top and bottom of each figure), the first names (the table's first
    screen), and the most loaded by each gauge (waiting, running, KV: the flagged first).
    """
    instances = sorted({_instance(labels) for labels, _value in overview.get("up", [])})
    if len(instances) <= detail_all:
        return None
    known = set(instances)
    chosen = set(instances[:DETAIL_FIRST])
    gauges = _by_figure(overview.get("gauges", []))
    for figure in ("waiting", "running", "kv_usage"):
        ranked = [(value, _instance(labels)) for labels, value in gauges.get(figure, []) if value is not None]
        ranked.sort(reverse=True)
        chosen.update(name for _value, name in ranked[: promql.DETAIL_PER_FIGURE])
    # Prometheus' picks are at most 2 x DETAIL_PER_FIGURE per figure; an answer naming more is cut there,
    # so a misbehaving server cannot make the detail query name the whole fleet.
    picks = sorted({_instance(labels) for labels, _value in overview.get("picks", [])} & known)
    chosen.update(picks[: DETAIL_MAX - len(chosen)])
    return tuple(sorted(chosen & known))


def _figures_from_rows(checked: Mapping[str, list[Row]], window_seconds: float, now: float) -> FleetFigures:
    """`figures_from_answers` on rows already checked; the top-k view's answers too (`fleet`, `picks`)."""
    with _collector_paused():
        return _figures_unpaused(checked, window_seconds, now)


_PAUSES = threading.Lock()
_paused = 0  # readers inside `_collector_paused`, over every source of the process
_freeze_on_resume = False  # `freeze_on_resume`: the console's collector policy


def freeze_on_resume(on: bool) -> None:
    """Whether what was made while the collector was paused is frozen (`gc.freeze`) before it resumes.

    Resumed, the collector's first young pass scans every object made meanwhile (the answers, a
    tenth of a 10,000-replica refresh); frozen, they are left to reference counting until the
    process's next full pass (`console.live.collector`), which unfreezes first, so a cycle among
    them is still collected then. For a process that runs such passes only.
    """
    global _freeze_on_resume
    _freeze_on_resume = on


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while answers are read, on again after the last reader.

    A parsed answer is hundreds of thousands of young containers, none of them in a cycle: the
    collector ran full passes over the whole heap while they were made (a third of a 10,000-replica
    refresh). Reference counting still frees everything; a pass runs once the collector is back.
    """
    global _paused
    with _PAUSES:
        ours = _paused > 0 or gc.isenabled()  # turned off by someone else: not ours to turn on again
        if ours:
            _paused += 1
            gc.disable()
    if not ours:
        yield
        return
    try:
        yield
    finally:
        with _PAUSES:
            _paused -= 1
            if _paused == 0:
                if _freeze_on_resume:
                    gc.freeze()
                gc.enable()


def _figures_unpaused(checked: Mapping[str, list[Row]], window_seconds: float, now: float) -> FleetFigures:
    up = _by_figure(checked.get("up", []))
    rates = _by_figure(checked.get("rates", []))
    gauges = _by_figure(checked.get("gauges", []))
    quantiles = _by_figure(checked.get("quantiles", []))
    fleet_quantiles = {
        figure: rows[0][1] for figure, rows in _by_figure(checked.get("fleet_quantiles", [])).items() if rows
    }

    up_by_instance = _per_instance(up.get("up", []))
    scraped_at = _per_instance(up.get("scraped_at", []))
    rate_by = {figure: _per_instance(rows) for figure, rows in rates.items()}
    for figure in ("preemptions", "resets"):  # the top-k view's: for every replica where they are not zero
        for instance, value in _per_instance(gauges.get(figure, [])).items():
            rate_by.setdefault(figure, {}).setdefault(instance, value)
    by_reason: dict[str, dict[str, float]] = {}
    for labels, value in rates.get("requests_by_reason", []):
        if value is not None:
            by_reason.setdefault(_instance(labels), {})[labels.get("finished_reason", "unknown")] = value
    kv_by: dict[str, dict[str, float]] = {}
    for labels, value in gauges.get("kv_usage", []):
        if value is not None:
            kv_by.setdefault(_instance(labels), {})[labels.get("engine") or "0"] = value
    running = _per_instance(gauges.get("running", []))
    waiting = _per_instance(gauges.get("waiting", []))
    quantile_by = {figure: _per_instance(rows) for figure, rows in quantiles.items()}
    engine_configs = _engine_configs_by_instance(checked.get("cache_config", []))

    # Each figure's column, looked up once; a replica's row is then one `get` per column.
    nothing: dict[str, float | None] = {}
    resets = rate_by.get("resets", nothing)
    columns = [(name, rate_by.get(canonical, nothing)) for name, canonical in RATE_FIGURES]
    columns += [(name, quantile_by.get(name, nothing)) for name, _c, _q in QUANTILE_FIGURES]
    means = [
        (name, rate_by.get(canonical + "_sum", nothing), rate_by.get(canonical + "_count", nothing))
        for name, canonical in promql.MEAN_FIGURES
    ]
    hits, queries = rate_by.get("prefix_cache_hits", nothing), rate_by.get("prefix_cache_queries", nothing)
    replicas = []
    for instance in sorted(up_by_instance):
        at = scraped_at.get(instance)
        age = max(now - at, 0.0) if at is not None else None
        state, error = _state(up_by_instance[instance], age, window_seconds, (resets.get(instance) or 0) > 0)
        values: dict[str, Any] = {name: column.get(instance) for name, column in columns}
        for name, sums, counts in means:
            values[name] = _ratio(sums.get(instance), counts.get(instance))
        kv = kv_by.get(instance, {})
        configs = list(engine_configs.get(instance, {}).values())
        shown = redact(instance)  # a label, but shown and recorded as a replica's name and URL
        replicas.append(
            Figures(
                name=shown,
                url=shown,
                state=state,
                error=error,
                requests_per_second_by_reason=by_reason.get(instance, {}),
                running=running.get(instance),
                waiting=waiting.get(instance),
                kv_usage=max(kv.values()) if kv else None,
                kv_usage_by_engine=kv,
                kv_capacity_tokens=kv_capacity_tokens(configs),
                kv_capacity_tokens_by_engine=kv_capacity_tokens_by_engine(configs),
                prefix_hit_share=_ratio(hits.get(instance), queries.get(instance)),
                data_age_seconds=age,
                **values,
            )
        )
    if "fleet" in checked:  # the top-k view: the fleet's rates summed by Prometheus over every replica
        fleet_rows = _by_figure(checked["fleet"])
        rate_totals = {figure: rows[0][1] for figure, rows in fleet_rows.items() if rows}
        reason_totals = {
            labels.get("finished_reason", "unknown"): value
            for labels, value in fleet_rows.get("requests_by_reason", [])
            if value is not None
        }
    else:
        rate_totals = {figure: _sum(values.values()) for figure, values in rate_by.items()}
        reason_totals = {}
        for per_reason in by_reason.values():
            for reason, value in per_reason.items():
                reason_totals[reason] = reason_totals.get(reason, 0.0) + value
    return FleetFigures(
        window_seconds, SOURCE, tuple(replicas), _fleet(replicas, rate_totals, reason_totals, fleet_quantiles), now
    )


def _state(up: float | None, age: float | None, window_seconds: float, reset: bool) -> tuple[ReplicaState, str]:
    if up is None or up < 1:
        return ReplicaState.DOWN, "Prometheus' last scrape of this target failed (up == 0)"
    if age is not None and age > max(window_seconds, 60.0):
        return ReplicaState.STALE, f"Prometheus last scraped this target {age:.0f} s ago"
    if reset:
        return ReplicaState.RESTARTED, "a counter went down inside the window: the replica restarted"
    return ReplicaState.UP, ""


def _engine_configs_by_instance(rows: list[Row]) -> dict[str, dict[str, Mapping[str, str]]]:
    """`cache_config_info` label sets by instance, then engine: KV capacity comes from them."""
    per_engine: dict[str, dict[str, Mapping[str, str]]] = {}
    for labels, _value in rows:
        # Both spellings of the family may be present: one label set per (instance, engine).
        per_engine.setdefault(_instance(labels), {}).setdefault(labels.get("engine") or "0", labels)
    return per_engine


def _fleet(
    replicas: list[Figures],
    rate_totals: Mapping[str, float | None],
    reason_totals: Mapping[str, float],
    fleet_quantiles: Mapping[str, float | None],
) -> Figures:
    """Rates summed (over every replica, by Prometheus in the top-k view), gauges summed over the answering
    replicas, KV the max, quantiles from merged buckets (PromQL `sum by (le)`)."""
    current = [f for f in replicas if f.state in ANSWERING]
    values: dict[str, Any] = {name: rate_totals.get(canonical) for name, canonical in RATE_FIGURES}
    reasons = {reason: value for reason, value in reason_totals.items() if math.isfinite(value)}
    for name, canonical in promql.MEAN_FIGURES:
        values[name] = _ratio(rate_totals.get(canonical + "_sum"), rate_totals.get(canonical + "_count"))
    values.update({name: fleet_quantiles.get(name) for name, _c, _q in QUANTILE_FIGURES})
    hits = rate_totals.get("prefix_cache_hits")
    queries = rate_totals.get("prefix_cache_queries")
    answering = len(current)
    notes = (
        [f"{len(replicas) - answering} of {len(replicas)} replicas not answering"] if answering < len(replicas) else []
    )
    state = ReplicaState.UP if answering else (ReplicaState.DOWN if replicas else ReplicaState.UNKNOWN)
    if not replicas:
        notes.append("no targets match the selector in Prometheus")
    return Figures(
        name=FLEET_TOTAL,
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
