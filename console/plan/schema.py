"""Plan files: strict YAML -> `Plan` (SI units), every problem named by file, line and key path.

The YAML uses the units people write (GB, TB/s, TFLOP/s, minutes); the Plan holds SI.
GB and TB are decimal (10^9, 10^12 bytes), as in the datasheets and the method.
Errors read "FILE:LINE: key.path: what was wrong; expected ...". The first problem found
is reported: a plan that loads has none.
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from console.errors import UserError
from console.plan import catalog
from console.plan.model import (
    DAYS,
    Capacity,
    DataRules,
    FleetSource,
    Gpu,
    Model,
    Overflow,
    Plan,
    Replica,
    Targets,
    TokenStats,
    Workload,
)

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
WEIGHT_PRECISIONS = ("fp16", "bf16", "int8", "fp8", "int4")
KV_PRECISIONS = ("fp16", "bf16", "fp8")
OVERFLOW_MODES = ("bounded_queue", "hosted", "defer")
WORKLOAD_KINDS = ("interactive", "deferrable")

# YAML 1.1 reads `70e9` as a string (its floats need a dot); plans may write it anyway.
_SCIENTIFIC = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)[eE][+-]?\d+$")
_COUNT = re.compile(r"^(\d+(\.\d*)?|\.\d+)\s*([kKmMbBtT])$")
_COUNT_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


_CONSTRUCTOR = yaml.constructor.SafeConstructor()


class PlanError(UserError):
    """A plan file that cannot be used as written."""


class _Field:
    """One YAML node with its key path: typed reads that fail with the node's line."""

    def __init__(self, node: yaml.Node, path: str, source: str):
        self.node = node
        self.path = path
        self.source = source

    @property
    def line(self) -> int:
        return self.node.start_mark.line + 1

    def fail(self, problem: str, expected: str) -> PlanError:
        where = f"{self.path}: " if self.path else ""
        return PlanError(f"{self.source}:{self.line}: {where}{problem}; expected {expected}")

    def _shown(self) -> str:
        if isinstance(self.node, yaml.ScalarNode):
            return repr(self.node.value) if self.node.style else self.node.value or "nothing"
        return "a list" if isinstance(self.node, yaml.SequenceNode) else "a mapping"

    def child(self, key: str | int, node: yaml.Node) -> _Field:
        path = f"{self.path}[{key}]" if isinstance(key, int) else (f"{self.path}.{key}" if self.path else key)
        return _Field(node, path, self.source)

    # Containers -----------------------------------------------------------------------

    def mapping(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, _Field]:
        allowed = required + optional
        if not isinstance(self.node, yaml.MappingNode):
            raise self.fail(f"got {self._shown()}", f"a mapping with keys {', '.join(allowed)}")
        fields: dict[str, _Field] = {}
        for key_node, value_node in self.node.value:
            key_field = _Field(key_node, self.path, self.source)
            if not isinstance(key_node, yaml.ScalarNode):
                raise key_field.fail("a key that is not a name", "plain key names")
            key = key_node.value
            if key not in allowed:
                raise self.child(key, key_node).fail("unknown key", "one of " + ", ".join(allowed))
            if key in fields:
                raise self.child(key, key_node).fail("key given twice", "each key once")
            fields[key] = self.child(key, value_node)
        for key in required:
            if key not in fields:
                raise self.fail(f"missing key {key!r}", f"{key} to be set")
        return fields

    def sequence(self, length: int | None = None, what: str = "a list") -> list[_Field]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.fail(f"got {self._shown()}", what)
        items = [self.child(i, node) for i, node in enumerate(self.node.value)]
        if length is not None and len(items) != length:
            raise self.fail(f"{len(items)} values", what)
        return items

    # Scalars ----------------------------------------------------------------------------

    def _scalar(self, expected: str) -> Any:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.fail(f"got {self._shown()}", expected)
        try:
            return _CONSTRUCTOR.construct_object(self.node)
        except (yaml.YAMLError, ValueError, TypeError):  # an explicit tag (!!int abc, !!python/...) that does not hold
            tag = self.node.tag.replace("tag:yaml.org,2002:", "!!")
            raise self.fail(f"got {tag} {self.node.value!r}", expected) from None

    def number(self, *, minimum: float | None = 0.0, strict: bool = True, maximum: float | None = None) -> float:
        """A finite number; `strict` means above `minimum` (positive by default), else at least it."""
        bound = "" if minimum is None else (f" > {minimum:g}" if strict else f" >= {minimum:g}")
        if maximum is not None:
            bound += f" and <= {maximum:g}"
        expected = f"a number{bound}"
        value = self._scalar(expected)
        if isinstance(value, str) and self.node.style is None and _SCIENTIFIC.match(value.strip()):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(f"got {self._shown()}", expected)
        if minimum is not None and (value <= minimum if strict else value < minimum):
            raise self.fail(f"got {value:g}", expected)
        if maximum is not None and value > maximum:
            raise self.fail(f"got {value:g}", expected)
        return float(value)

    def count(self) -> float:
        """A large positive count: a number, or a number with k/M/B/T (e.g. 70B)."""
        expected = "a positive count such as 70e9 or 70B"
        if isinstance(self.node, yaml.ScalarNode) and self.node.style is None:
            match = _COUNT.match(self.node.value.strip())
            if match:
                value = float(round(float(match.group(1)) * _COUNT_SCALE[match.group(3).lower()]))
                if value <= 0:
                    raise self.fail(f"got {self.node.value}", expected)
                return value
        try:
            return self.number()
        except PlanError:
            raise self.fail(f"got {self._shown()}", expected) from None

    def integer(self, *, minimum: int = 1) -> int:
        expected = f"a whole number >= {minimum}"
        value = self._scalar(expected)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"got {self._shown()}", expected)
        if value < minimum:
            raise self.fail(f"got {value}", expected)
        return value

    def text(self) -> str:
        value = self._scalar("text")
        if isinstance(value, (dict, list)) or value is None:
            raise self.fail(f"got {self._shown()}", "text")
        if isinstance(value, str) and not value.strip():
            raise self.fail("empty text", "text")
        return str(value)

    def choice(self, options: tuple[str, ...]) -> str:
        expected = "one of " + ", ".join(options)
        value = self._scalar(expected)
        if not isinstance(value, str) or value.lower() not in options:
            raise self.fail(f"got {self._shown()}", expected)
        return value.lower()

    def boolean(self) -> bool:
        value = self._scalar("true or false")
        if not isinstance(value, bool):
            raise self.fail(f"got {self._shown()}", "true or false")
        return value

    def is_null(self) -> bool:
        return isinstance(self.node, yaml.ScalarNode) and self.node.tag == "tag:yaml.org,2002:null"


# Sections ----------------------------------------------------------------------------------


def _model(f: _Field) -> Model:
    m = f.mapping(
        ("name", "parameters", "layers", "kv_heads", "head_dim", "weight_precision", "kv_precision"),
        ("attention_heads", "hidden_size", "max_model_len"),
    )
    model = Model(
        name=m["name"].text(),
        parameters=m["parameters"].count(),
        layers=m["layers"].integer(),
        kv_heads=m["kv_heads"].integer(),
        head_dim=m["head_dim"].integer(),
        weight_precision=m["weight_precision"].choice(WEIGHT_PRECISIONS),  # type: ignore[arg-type]
        kv_precision=m["kv_precision"].choice(KV_PRECISIONS),  # type: ignore[arg-type]
        attention_heads=m["attention_heads"].integer() if "attention_heads" in m else None,
        hidden_size=m["hidden_size"].integer() if "hidden_size" in m else None,
        max_model_len=m["max_model_len"].integer() if "max_model_len" in m else None,
    )
    if model.attention_heads is not None and model.attention_heads % model.kv_heads:
        raise m["attention_heads"].fail(
            f"{model.attention_heads} attention heads do not group into {model.kv_heads} KV heads",
            "a multiple of kv_heads",
        )
    return model


_GPU_FIGURES = ("memory_gb", "bandwidth_tb_s", "tflops_bf16", "price_per_hour")


def _gpu(f: _Field) -> Gpu:
    g = f.mapping((), ("preset", "name") + _GPU_FIGURES)
    base: Gpu | None = None
    if "preset" in g:
        wanted = g["preset"].text()
        base = catalog.find_preset(wanted)
        if base is None:
            raise g["preset"].fail(f"unknown GPU preset {wanted!r}", "one of " + ", ".join(catalog.PRESETS))
    else:
        for key in _GPU_FIGURES:
            if key not in g:
                raise f.fail(
                    f"missing key {key!r}",
                    "a preset, or memory_gb, bandwidth_tb_s, tflops_bf16 and price_per_hour",
                )
    def figure(key: str, scale: float, fallback: float | None) -> float:
        return g[key].number() * scale if key in g else float(fallback)  # type: ignore[arg-type]

    name = g["name"].text() if "name" in g else (base.name if base else "custom GPU")
    return Gpu(
        name=name,
        memory_bytes=figure("memory_gb", catalog.GB, base and base.memory_bytes),
        bandwidth_bytes_per_second=figure("bandwidth_tb_s", catalog.TB, base and base.bandwidth_bytes_per_second),
        flops_per_second=figure("tflops_bf16", catalog.TFLOP, base and base.flops_per_second),
        price_per_hour=(
            g["price_per_hour"].number(strict=False) if "price_per_hour" in g else base.price_per_hour  # type: ignore[union-attr]
        ),
    )


def _replica(f: _Field | None) -> Replica:
    if f is None:
        return Replica(tensor_parallel=None)
    r = f.mapping(
        (),
        (
            "tensor_parallel",
            "usable_memory_share",
            "overhead_gb_per_gpu",
            "bandwidth_efficiency",
            "compute_efficiency",
            "max_num_seqs",
            "block_size",
        ),
    )
    tp: int | None = None
    if "tensor_parallel" in r:
        node = r["tensor_parallel"]
        if isinstance(node.node, yaml.ScalarNode) and node.node.value == "auto":
            tp = None
        else:
            expected = "auto or one of 1, 2, 4, 8"
            try:
                tp = node.integer()
            except PlanError:
                raise node.fail(f"got {node._shown()}", expected) from None
            if tp not in TENSOR_PARALLEL_SIZES:
                raise node.fail(f"got {tp}", expected)
    defaults = Replica(tensor_parallel=None)

    def share(key: str, default: float) -> float:
        return r[key].number(maximum=1.0) if key in r else default

    return Replica(
        tensor_parallel=tp,
        usable_memory_share=share("usable_memory_share", defaults.usable_memory_share),
        overhead_bytes_per_gpu=(
            r["overhead_gb_per_gpu"].number(strict=False) * catalog.GB if "overhead_gb_per_gpu" in r else 0.0
        ),
        bandwidth_efficiency=share("bandwidth_efficiency", defaults.bandwidth_efficiency),
        compute_efficiency=share("compute_efficiency", defaults.compute_efficiency),
        max_num_seqs=r["max_num_seqs"].integer() if "max_num_seqs" in r else defaults.max_num_seqs,
        block_size=r["block_size"].integer() if "block_size" in r else defaults.block_size,
    )


def _hours(f: _Field) -> tuple[float, ...]:
    items = f.sequence(24, "24 values, one per hour from 00:00")
    return tuple(item.number(strict=False) for item in items)


def _arrivals(f: _Field) -> tuple[tuple[float, ...], ...]:
    a = f.mapping((), ("weekday", "weekend", "week"))
    if "week" in a:
        if "weekday" in a or "weekend" in a:
            raise a["week"].fail("week given with weekday/weekend", "either week, or weekday and weekend")
        week = a["week"]
        if isinstance(week.node, yaml.MappingNode):
            days = week.mapping(DAYS)
            return tuple(_hours(days[day]) for day in DAYS)
        rows = week.sequence(7, "7 rows (Monday first) of 24 values, or a mapping mon..sun")
        return tuple(_hours(row) for row in rows)
    for key in ("weekday", "weekend"):
        if key not in a:
            raise f.fail(f"missing key {key!r}", "weekday and weekend (24 values each), or a 7 x 24 week")
    weekday, weekend = _hours(a["weekday"]), _hours(a["weekend"])
    return (weekday,) * 5 + (weekend,) * 2


def _workload(f: _Field) -> Workload:
    w = f.mapping(("name", "kind", "arrivals", "tokens", "targets"), ("queue_seconds", "burstiness"))
    t = w["tokens"].mapping(("input_mean", "input_p95", "output_mean", "output_max"))
    tokens = TokenStats(
        input_mean=t["input_mean"].number(),
        input_p95=t["input_p95"].number(),
        output_mean=t["output_mean"].number(),
        output_max=t["output_max"].number(),
    )
    if tokens.input_p95 < tokens.input_mean:
        raise t["input_p95"].fail(f"p95 {tokens.input_p95:g} is below the mean {tokens.input_mean:g}", "p95 >= mean")
    if tokens.output_max < tokens.output_mean:
        raise t["output_max"].fail(
            f"max {tokens.output_max:g} is below the mean {tokens.output_mean:g}", "max >= mean"
        )
    g = w["targets"].mapping(("ttft_p95_seconds", "tpot_p95_seconds"), ("e2e_p95_seconds", "goodput_share"))
    targets = Targets(
        ttft_p95_seconds=g["ttft_p95_seconds"].number(),
        tpot_p95_seconds=g["tpot_p95_seconds"].number(),
        e2e_p95_seconds=(
            None if "e2e_p95_seconds" not in g or g["e2e_p95_seconds"].is_null() else g["e2e_p95_seconds"].number()
        ),
        goodput_share=g["goodput_share"].number(maximum=1.0) if "goodput_share" in g else 0.99,
    )
    rps = _arrivals(w["arrivals"])
    if max(max(day) for day in rps) <= 0:
        raise w["arrivals"].fail("every hour is 0 rps", "the busiest-five-minute rps of at least one hour")
    return Workload(
        name=w["name"].text(),
        kind=w["kind"].choice(WORKLOAD_KINDS),  # type: ignore[arg-type]
        rps_by_hour=rps,
        tokens=tokens,
        targets=targets,
        queue_seconds=w["queue_seconds"].number(strict=False) if "queue_seconds" in w else 0.5,
        burstiness=w["burstiness"].number() if "burstiness" in w else 1.0,
    )


def _workloads(f: _Field) -> tuple[Workload, ...]:
    items = f.sequence(what="a list of workloads")
    if not items:
        raise f.fail("no workloads", "at least one interactive workload")
    workloads = tuple(_workload(item) for item in items)
    seen: set[str] = set()
    for item, workload in zip(items, workloads):
        if workload.name in seen:
            raise item.fail(f"workload name {workload.name!r} used twice", "a unique name per workload")
        seen.add(workload.name)
    if not any(w.kind == "interactive" for w in workloads):
        raise f.fail("no interactive workload", "at least one workload of kind interactive (it sizes the fleet)")
    return workloads


def _capacity(f: _Field) -> Capacity:
    c = f.mapping(("rps_per_replica", "source"), ("note",))
    return Capacity(
        rps_per_replica=c["rps_per_replica"].number(),
        source=c["source"].text(),
        note=c["note"].text() if "note" in c else "",
    )


def _url(f: _Field) -> str:
    value = f.text()
    if not re.match(r"^https?://[^\s/]+", value):
        raise f.fail(f"got {value!r}", "a URL such as http://10.0.0.5:8000")
    return value


TARGET_EXPECTED = "host:port or an http(s) URL such as http://10.0.0.5:8000"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
# `http//h:8000` and `http:/h:8000` would otherwise read as a host named "http" (or "http:"):
# a DNS failure at poll time, exit 1, instead of a refusal naming the typo.
_SCHEME_TYPO = re.compile(r"^(https?)(:/(?!/)|//|:\\)", re.IGNORECASE)
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")  # RFC 1123: letters, digits, inner hyphens
_PORT = re.compile(r"^[0-9]+$")
_SHOWN_LENGTH = 200  # a target echoed in an error: enough to find it, never a screenful


def masked_target(text: str) -> str:
    """`text` as an error may show it: a password (`user:pass@`) and query values (`?token=...`) masked.

    Everything up to the last `@` is credentials, whatever it holds (a password may contain
    `/`, `:` or `?`); the user name before the first `:` stays, to say which one it was.
    """
    head, sep, rest = text.partition("://")
    if not sep or not _SCHEME.match(head):  # what comes before '://' is shown only when it is a scheme
        head, sep, rest = "", "", text
    if "@" in rest:
        userinfo, _, rest = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        rest = (f"{user}:***@" if colon else "***@") + rest
    before, question, query = rest.partition("?")
    if question:
        rest = before + "?" + re.sub(r"(^|&)([^=&]*)=[^&]*", r"\1\2=***", query)
    shown = head + sep + rest
    return shown if len(shown) <= _SHOWN_LENGTH else shown[:_SHOWN_LENGTH] + "…"


def target_metrics_url(text: str) -> str:
    """`host:8000`, `http://host:8000` or a full URL -> the URL of its /metrics page.

    The one rule for a replica's address, from `--target` or a plan's fleet.targets. Strict,
    because a mistyped address must be refused here rather than polled as a host that does not
    resolve: scheme http or https, an RFC 1123 host name or an IPv4 or [IPv6] literal, a port
    1-65535, a path and query after them. A ValueError says what is wrong; it never repeats
    the text (callers show `masked_target(text)`), so a password in it is never echoed.
    """
    url = text.strip()
    if not url:
        raise ValueError("an empty address")
    odd = next((c for c in url if c.isspace() or not c.isprintable()), None)
    if odd is not None:
        raise ValueError(f"{odd!r} is not allowed in an address")
    typo = _SCHEME_TYPO.match(url)
    if typo:
        raise ValueError(f"{typo[0]!r} is a mistyped scheme: write {typo[1].lower()}://")
    if "://" not in url:
        url = "http://" + url
    scheme, _, rest = url.partition("://")
    if not _SCHEME.match(scheme):
        raise ValueError("what comes before '://' is not a scheme")
    if scheme.lower() not in ("http", "https"):
        raise ValueError(f"scheme {scheme.lower()!r} is not http or https")
    if "@" in rest:
        # Neither sent nor wanted: the address is shown and recorded; a token goes in --token-env.
        raise ValueError("credentials in the address (user:password@) are never sent, and the address is shown "
                         "and recorded: give a bearer token with --token-env VAR")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    _check_netloc(netloc)
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        # Rebuilt rather than appended to, so a query string (?token=...) stays after the path.
        url = urlunsplit(parts._replace(path="/metrics"))
    return url


def _check_netloc(netloc: str) -> None:
    """`host`, `host:port`, `[v6]` or `[v6]:port`; ValueError otherwise."""
    if netloc.startswith("["):
        host, bracket, after = netloc[1:].partition("]")
        if not bracket:
            raise ValueError("'[' without a closing ']' (an IPv6 address is written [::1]:8000)")
        try:
            ipaddress.IPv6Address(host.replace("%25", "%"))  # a zone (fe80::1%25eth0) is written %25 in a URL
        except ValueError:
            raise ValueError(f"[{_short(host)}] is not an IPv6 address") from None
        if after and not after.startswith(":"):
            raise ValueError(f"{_short(after)!r} after the IPv6 address, where only :port may follow")
        port = after[1:] if after else None
    else:
        if netloc.count(":") > 1:
            raise ValueError("an IPv6 address needs brackets, as in [::1]:8000")
        host, colon, port = netloc.partition(":")
        port = port if colon else None
        _check_host(host)
    if port is not None:
        _check_port(port)


def _check_port(port: str) -> None:
    if not port:
        raise ValueError("no port after ':'")
    if not _PORT.match(port):
        raise ValueError(f"port {_short(port)!r} is not a number")
    digits = port.lstrip("0") or "0"
    if len(digits) > 5 or not 1 <= int(digits) <= 65535:  # the length first: int() of 5,000 digits refuses
        raise ValueError(f"port {_short(port)} is outside 1-65535")


def _check_host(host: str) -> None:
    if not host:
        raise ValueError("no host or port")
    if re.fullmatch(r"[0-9.]+", host):
        # All digits and dots is an IPv4 address or a typo of one, never a name (RFC 1123 2.1).
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"{_short(host)!r} is not an IPv4 address (four numbers 0-255)") from None
        return
    odd = next((c for c in host if not (c.isascii() and (c.isalnum() or c in "-."))), None)
    if odd is not None:
        raise ValueError(f"{odd!r} is not allowed in a host name (letters, digits, '-' and '.')")
    name = host[:-1] if host.endswith(".") else host  # a fully qualified name may end in a dot
    if len(name) > 253:
        raise ValueError("a host name longer than 253 characters")
    for label in name.split("."):
        if not label:
            raise ValueError(f"{_short(host)!r} has an empty label (two dots in a row, or a leading dot)")
        if not _LABEL.match(label):
            raise ValueError(f"host name label {_short(label)!r} is not 1-63 letters, digits or inner '-'")


def _short(piece: str) -> str:
    return piece if len(piece) <= 60 else piece[:60] + "…"


def _target(f: _Field) -> str:
    value = f.text()
    try:
        target_metrics_url(value)
    except ValueError as problem:
        raise f.fail(f"got {masked_target(value)!r}: {problem}", TARGET_EXPECTED) from None
    return value


def _fleet(f: _Field) -> FleetSource:
    s = f.mapping((), ("targets", "prometheus_url", "selector"))
    if ("targets" in s) == ("prometheus_url" in s):
        raise f.fail("needs exactly one source", "targets (a list of URLs) or prometheus_url")
    if "selector" in s and "prometheus_url" not in s:
        raise s["selector"].fail("selector without prometheus_url", "selector only with prometheus_url")
    if "targets" in s:
        items = s["targets"].sequence(what="a list of URLs")
        if not items:
            raise s["targets"].fail("an empty list", "at least one URL")
        return FleetSource(targets=tuple(_target(item) for item in items))
    return FleetSource(
        prometheus_url=_url(s["prometheus_url"]),
        selector=s["selector"].text() if "selector" in s else "",
    )


def _overflow(f: _Field | None, data: DataRules) -> Overflow:
    if f is None:
        return Overflow()
    o = f.mapping((), ("mode", "max_queue", "max_wait_seconds", "hosted_model", "hosted_url"))
    overflow = Overflow(
        mode=o["mode"].choice(OVERFLOW_MODES) if "mode" in o else "bounded_queue",  # type: ignore[arg-type]
        max_queue=o["max_queue"].integer() if "max_queue" in o else Overflow.max_queue,
        max_wait_seconds=o["max_wait_seconds"].number() if "max_wait_seconds" in o else Overflow.max_wait_seconds,
        hosted_model=o["hosted_model"].text() if "hosted_model" in o else None,
        hosted_url=_url(o["hosted_url"]) if "hosted_url" in o else None,
    )
    if overflow.mode == "hosted":
        if not data.prompts_may_leave:
            raise o["mode"].fail(
                "hosted overflow, but data.prompts_may_leave is false", "bounded_queue or defer, or allow prompts out"
            )
        if overflow.hosted_url is None:
            raise f.fail("hosted overflow without hosted_url", "hosted_url (and hosted_model) for the hosted model")
    return overflow


def _data(f: _Field | None) -> DataRules:
    if f is None:
        return DataRules()
    d = f.mapping((), ("prompts_may_leave", "location"))
    return DataRules(
        prompts_may_leave=d["prompts_may_leave"].boolean() if "prompts_may_leave" in d else False,
        location=d["location"].text() if "location" in d else "",
    )


_TOP_REQUIRED = ("model", "gpu", "workloads", "capacity")
_TOP_OPTIONAL = ("name", "timezone", "replica", "redundancy", "lead_time_minutes", "data", "overflow", "fleet")


def _timezone(field: "_Field") -> str:
    """An IANA zone name ("Europe/Warsaw"): the clock the plan's hours of the day are written in."""
    name = field.text()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise field.fail(f"unknown time zone {name!r}", "an IANA zone name such as UTC or Europe/Warsaw") from None
    return name


def _compose(text: str, source_name: str) -> yaml.Node:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 1
        problem = error.problem or error.context or "malformed YAML"
        raise PlanError(f"{source_name}:{line}: YAML syntax error: {problem}; expected valid YAML") from None
    except yaml.YAMLError as error:
        raise PlanError(f"{source_name}:1: YAML error: {error}; expected valid YAML") from None
    if node is None:
        raise PlanError(f"{source_name}:1: the file is empty; expected a plan (model, gpu, workloads, capacity)")
    return node


def parse_plan(text: str, source_name: str) -> Plan:
    """The plan written in `text`; `source_name` names it in error messages."""
    root = _Field(_compose(text, source_name), "", source_name)
    top = root.mapping(_TOP_REQUIRED, _TOP_OPTIONAL)
    data = _data(top.get("data"))
    return Plan(
        name=top["name"].text() if "name" in top else Path(source_name).stem,
        timezone=_timezone(top["timezone"]) if "timezone" in top else "UTC",
        model=_model(top["model"]),
        gpu=_gpu(top["gpu"]),
        replica=_replica(top.get("replica")),
        workloads=_workloads(top["workloads"]),
        capacity=_capacity(top["capacity"]),
        redundancy=top["redundancy"].integer(minimum=0) if "redundancy" in top else 1,
        lead_time_seconds=(
            # Loading a model takes minutes; a day is already far past any real scale-up.
            top["lead_time_minutes"].number(strict=False, maximum=24 * 60) * 60.0
            if "lead_time_minutes" in top
            else 600.0
        ),
        data=data,
        overflow=_overflow(top.get("overflow"), data),
        fleet=_fleet(top["fleet"]) if "fleet" in top else None,
        source_path=source_name,
        source_text=text,
    )


def load_plan(path: str | Path) -> Plan:
    """Read and check a plan file; any problem raises PlanError (one line, exit code 2)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"{source}: no such file; expected a plan file (YAML)") from None
    except IsADirectoryError:
        raise PlanError(f"{source}: is a directory; expected a plan file (YAML)") from None
    except UnicodeDecodeError:
        raise PlanError(f"{source}: not UTF-8 text; expected a plan file (YAML)") from None
    except OSError as error:
        raise PlanError(f"{source}: cannot be read ({error.strerror}); expected a readable plan file") from None
    return parse_plan(text, source)
