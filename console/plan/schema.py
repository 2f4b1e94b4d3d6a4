"""Plan files: strict YAML -> `Plan` (SI units), every problem named by file, line and key path.

The YAML uses the units people write (GB, TB/s, TFLOP/s, minutes); the Plan holds SI.
GB and TB are decimal (10^9, 10^12 bytes), as in the datasheets and the method.
Errors read "FILE:LINE: key.path: what was wrong; expected ...". The first problem found
is reported: a plan that loads has none.

Every number is bounded to what a fleet can be (console/plan/limits.py, one table), the file
is read only if it is a regular file of at most 256 KB, and YAML nested deeper than 64 levels
is refused before it is composed, so no plan, however hostile, gets past here as a traceback.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from console.errors import UserError
from console.plan import catalog
from console.plan.limits import (
    LIMITS,
    MAX_ENV_NAME_LENGTH,
    MAX_NAME_LENGTH,
    MAX_NESTING,
    MAX_NOTE_LENGTH,
    MAX_PLAN_BYTES,
    MAX_PLAN_REPLICAS,
    MAX_WORKLOADS,
    MIN_PEAK_RPS,
    UNUSUAL,
    Limit,
    generic_path,
    guess_number,
    unusual_rule,
)
from console.plan.limits import number as bound_text
from console.plan.model import (
    DAYS,
    ESTIMATED,
    TENSOR_PARALLEL_SIZES,
    Actuator,
    Capacity,
    ComputePrecision,
    DataRules,
    FleetSource,
    GatewayAddress,
    Gpu,
    KvPrecision,
    Model,
    Overflow,
    OverflowMode,
    Plan,
    Replica,
    TargetGpus,
    Targets,
    TokenStats,
    WeightPrecision,
    Workload,
    WorkloadKind,
)
from console.plan.sizing import precision_flops
from console.plan.zones import ZoneNameError, zone_info
from console.targets import (
    TARGET_EXPECTED,
    masked_target,
    target_metrics_url,
)

WEIGHT_PRECISIONS: tuple[WeightPrecision, ...] = ("fp16", "bf16", "int8", "fp8", "int4")
KV_PRECISIONS: tuple[KvPrecision, ...] = ("fp16", "bf16", "fp8")
COMPUTE_PRECISIONS: tuple[ComputePrecision, ...] = ("bf16", "fp16", "fp8", "int8")
OVERFLOW_MODES: tuple[OverflowMode, ...] = ("bounded_queue", "hosted", "defer")
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = ("interactive", "deferrable")
_Choice = TypeVar("_Choice", bound=str)  # one of the Literal types above

# YAML 1.1 reads `70e9` as a string (its floats need a dot); plans may write it anyway.
_SCIENTIFIC = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)[eE][+-]?\d+$")
_COUNT = re.compile(r"^(\d+(\.\d*)?|\.\d+)\s*([kKmMbBtT])$")
_COUNT_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
_SHOWN_VALUE = 40  # a value echoed in an error: enough to recognise it, never a screenful
# libyaml when present: the pure-Python parser takes seconds for a plan-sized flood of nodes.
_LOADER = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader


_CONSTRUCTOR = yaml.constructor.SafeConstructor()


class PlanError(UserError):
    """A plan file that cannot be used as written."""


def _cut(text: str, quoted: bool = False) -> str:
    """`text` as an error shows it (quoted: as repr): whole up to 40 characters, else its start and length."""
    if len(text) <= _SHOWN_VALUE:
        return repr(text) if quoted else text
    start = text[:_SHOWN_VALUE]
    return f"{start!r}… ({len(text):,} characters)" if quoted else f"{start}… ({len(text):,} characters)"


def _odd_character(text: str, newlines: bool = False) -> str | None:
    """The first character a name may not hold (control characters, unpaired surrogates), or None."""
    return next((c for c in text if not c.isprintable() and not (newlines and c in "\n\t")), None)


class _Field:
    """One YAML node with its key path: typed reads that fail with the node's line.

    `meant` is the plan's `unusual:` list, one set shared by every field of a plan (filled once
    that key is read, before any number): the key paths whose unusual values are meant.
    """

    def __init__(self, node: yaml.Node, path: str, source: str, meant: set[str] | None = None):
        self.node = node
        self.path = path
        self.source = source
        self.meant = meant if meant is not None else set()

    @property
    def line(self) -> int:
        return self.node.start_mark.line + 1

    def fail(self, problem: str, expected: str) -> PlanError:
        where = f"{self.path}: " if self.path else ""
        return PlanError(f"{self.source}:{self.line}: {where}{problem}; expected {expected}")

    def unusual(self, reading: str, guess: str, usual: str) -> PlanError:
        """'60 is 60 s per token; did you mean 0.060 (60 ms)? expected at most 1 s per token, or ...'."""
        return PlanError(
            f"{self.source}:{self.line}: {self.path}: {self._shown()} is {reading}; did you mean {guess}? "
            f"expected {usual}, or {self.path} listed under unusual: if it is meant"
        )

    def _plain(self) -> bool:
        """A plain (unquoted) scalar: libyaml marks it with '', the Python parser with None."""
        return isinstance(self.node, yaml.ScalarNode) and not self.node.style

    def _shown(self) -> str:
        if isinstance(self.node, yaml.ScalarNode):
            return (_cut(self.node.value) or "nothing") if self._plain() else _cut(self.node.value, quoted=True)
        return "a list" if isinstance(self.node, yaml.SequenceNode) else "a mapping"

    def child(self, key: str | int, node: yaml.Node) -> _Field:
        path = f"{self.path}[{key}]" if isinstance(key, int) else (f"{self.path}.{key}" if self.path else key)
        return _Field(node, path, self.source, self.meant)

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
                raise self.child(_cut(key), key_node).fail("unknown key", "one of " + ", ".join(allowed))
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
        if length is not None and len(self.node.value) != length:
            raise self.fail(f"{len(self.node.value):,} values", what)
        return [self.child(i, node) for i, node in enumerate(self.node.value)]

    # Scalars ----------------------------------------------------------------------------

    def _scalar(self, expected: str) -> Any:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.fail(f"got {self._shown()}", expected)
        try:
            return _CONSTRUCTOR.construct_object(self.node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError):
            # An explicit tag (!!int abc, !!python/...) that does not hold, or an integer past
            # Python's 4,300 digits.
            tag = self.node.tag.replace("tag:yaml.org,2002:", "!!")
            shown = f"{tag} {_cut(self.node.value, quoted=True)}" if tag.startswith("!") else self._shown()
            raise self.fail(f"got {shown}", expected) from None

    def _bounded(self, value: int | float, limit: Limit, expected: str) -> int | float:
        """`value` if the limit holds; ints of any size are compared, never converted to float."""
        if value > limit.high:
            raise self.fail(f"got {self._shown()}", limit.at_most())
        if not limit.holds(value):
            raise self.fail(f"got {self._shown()}", expected)
        return value

    def _numeric(self, expected: str) -> int | float:
        """A YAML int (any size), a finite float or a plain 70e9; else the failure naming `expected`."""
        value = self._scalar(expected)
        if isinstance(value, str) and self._plain() and _SCIENTIFIC.match(value.strip()):
            value = float(value)  # 1e400 reads inf, refused below
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"got {self._shown()}", expected)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(f"got {self._shown()}", expected)
        return value

    def number(self, limit: Limit) -> float:
        """A finite number within `limit`, and outside UNUSUAL's region unless the plan says it is meant."""
        expected = limit.expected()
        value = self._numeric(expected)
        rule = unusual_rule(self.path)
        if rule is not None and rule.flags(value):
            if limit.high < value < 1e300:  # past the bound: refused either way, with the guess (400 digits: none)
                raise self.fail(f"got {self._shown()} (did you mean {rule.guess(value)}?)", limit.at_most())
            if limit.holds(value) and not self.meant & {self.path, generic_path(self.path)}:
                raise self.unusual(rule.reading(value), rule.guess(value), rule.expected)
        return float(self._bounded(value, limit, expected))

    def count(self, limit: Limit) -> float:
        """A large positive count within `limit`: a number, or a number with k/M/B/T (e.g. 70B)."""
        expected = limit.expected("a positive count such as 70e9 or 70B,")
        if self._plain():
            match = _COUNT.match(self.node.value.strip())
            if match:
                value = float(match.group(1)) * _COUNT_SCALE[match.group(3).lower()]  # 400 digits read inf
                if not math.isfinite(value):
                    raise self.fail(f"got {self._shown()}", limit.at_most())
                return float(round(self._bounded(value, limit, expected)))
        return float(self._bounded(self._numeric(expected), limit, expected))

    def integer(self, limit: Limit) -> int:
        expected = limit.expected()
        value = self._scalar(expected)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"got {self._shown()}", expected)
        return int(self._bounded(value, limit, expected))

    def text(self) -> str:
        value = self._scalar("text")
        if isinstance(value, (dict, list)) or value is None:
            raise self.fail(f"got {self._shown()}", "text")
        if isinstance(value, str) and not value.strip():
            raise self.fail("empty text", "text")
        return str(value)

    def name(self, max_length: int = MAX_NAME_LENGTH, newlines: bool = False) -> str:
        """Text that is shown (in the report, the console, the history): printable and of a sane length."""
        value = self.text()
        if len(value) > max_length:
            raise self.fail(
                f"{len(value):,} characters ({_cut(value, quoted=True)})", f"at most {max_length} characters"
            )
        odd = _odd_character(value, newlines)
        if odd is not None:
            raise self.fail(f"{odd!r} in {_cut(value, quoted=True)}", "printable text (no control characters)")
        return value

    def choice(self, options: tuple[_Choice, ...]) -> _Choice:
        expected = "one of " + ", ".join(options)
        value = self._scalar(expected)
        if isinstance(value, str):
            for option in options:
                if option == value.lower():
                    return option  # the option itself (equal to the value): typed as its Literal
        raise self.fail(f"got {self._shown()}", expected)

    def boolean(self) -> bool:
        value = self._scalar("true or false")
        if not isinstance(value, bool):
            raise self.fail(f"got {self._shown()}", "true or false")
        return value

    def is_null(self) -> bool:
        return isinstance(self.node, yaml.ScalarNode) and self.node.tag == "tag:yaml.org,2002:null"


# Sections ----------------------------------------------------------------------------------


_MODEL_REQUIRED = ("name", "parameters", "layers", "kv_heads", "head_dim", "weight_precision", "kv_precision")
_MODEL_OPTIONAL = ("attention_heads", "hidden_size", "max_model_len", "compute_precision")
_MODEL_KEYS = _MODEL_REQUIRED + _MODEL_OPTIONAL


def _model(f: _Field) -> Model:
    m = f.mapping(_MODEL_REQUIRED, _MODEL_OPTIONAL)

    def whole(key: str) -> int:
        return m[key].integer(LIMITS[f"model.{key}"])

    def optional_whole(key: str) -> int | None:
        return whole(key) if key in m else None

    model = Model(
        name=m["name"].name(),
        parameters=m["parameters"].count(LIMITS["model.parameters"]),
        layers=whole("layers"),  # required keys: `mapping` has refused a model without them
        kv_heads=whole("kv_heads"),
        head_dim=whole("head_dim"),
        weight_precision=m["weight_precision"].choice(WEIGHT_PRECISIONS),
        kv_precision=m["kv_precision"].choice(KV_PRECISIONS),
        attention_heads=optional_whole("attention_heads"),
        hidden_size=optional_whole("hidden_size"),
        max_model_len=optional_whole("max_model_len"),
        compute_precision=m["compute_precision"].choice(COMPUTE_PRECISIONS) if "compute_precision" in m else None,
    )
    if model.compute_precision in ("fp8", "int8") and model.weight_precision in ("fp16", "bf16"):
        raise m["compute_precision"].fail(
            f"{model.weight_precision} weights cannot run {model.compute_precision} GEMMs",
            f"weight_precision: {model.compute_precision} for a checkpoint quantised to 8 bits (vLLM's "
            "--quantization fp8 quantises bf16 weights at load), or compute_precision bf16",
        )
    if model.attention_heads is not None and model.attention_heads % model.kv_heads:
        raise m["attention_heads"].fail(
            f"{model.attention_heads} attention heads do not group into {model.kv_heads} KV heads",
            "a multiple of kv_heads",
        )
    return model


_GPU_FIGURES = ("memory_gb", "bandwidth_tb_s", "tflops_bf16", "price_per_hour")
_GPU_EIGHT_BIT = ("tflops_fp8", "tflops_int8")  # optional: a GPU without them computes at 16 bits


def _gpu(f: _Field) -> Gpu:
    g = f.mapping((), ("preset", "name") + _GPU_FIGURES + _GPU_EIGHT_BIT)
    base: Gpu | None = None
    if "preset" in g:
        wanted = g["preset"].text()
        base = catalog.find_preset(wanted)
        if base is None:
            raise g["preset"].fail(
                f"unknown GPU preset {_cut(wanted, quoted=True)}", "one of " + ", ".join(catalog.PRESETS)
            )
    else:
        for key in _GPU_FIGURES:
            if key not in g:
                raise f.fail(
                    f"missing key {key!r}",
                    "a preset, or memory_gb, bandwidth_tb_s, tflops_bf16 and price_per_hour",
                )

    def figure(key: str, scale: float, fallback: float | None) -> float:
        if key in g:
            return g[key].number(LIMITS[f"gpu.{key}"]) * scale
        if fallback is None:  # no preset: each figure was required just above
            raise f.fail(
                f"missing key {key!r}", "a preset, or memory_gb, bandwidth_tb_s, tflops_bf16 and price_per_hour"
            )
        return float(fallback)

    def eight_bit(key: str, fallback: float | None) -> float | None:
        return g[key].number(LIMITS[f"gpu.{key}"]) * catalog.TFLOP if key in g else fallback

    name = g["name"].name() if "name" in g else (base.name if base else "custom GPU")
    return Gpu(
        name=name,
        memory_bytes=figure("memory_gb", catalog.GB, base.memory_bytes if base else None),
        bandwidth_bytes_per_second=figure(
            "bandwidth_tb_s", catalog.TB, base.bandwidth_bytes_per_second if base else None
        ),
        flops_per_second=figure("tflops_bf16", catalog.TFLOP, base.flops_per_second if base else None),
        price_per_hour=figure("price_per_hour", 1.0, base.price_per_hour if base else None),
        fp8_flops_per_second=eight_bit("tflops_fp8", base.fp8_flops_per_second if base else None),
        int8_flops_per_second=eight_bit("tflops_int8", base.int8_flops_per_second if base else None),
    )


_ANY_WHOLE = Limit(-math.inf, math.inf, whole=True)


def _replica(f: _Field | None, gpu: Gpu) -> Replica:
    # vLLM's default batch cap depends on the GPU: the plan's replica is the engine it would start.
    if f is None:
        return Replica(tensor_parallel=None, max_num_seqs=catalog.default_max_num_seqs(gpu))
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
                tp = node.integer(_ANY_WHOLE)
            except PlanError:
                raise node.fail(f"got {node._shown()}", expected) from None
            if tp not in TENSOR_PARALLEL_SIZES:
                raise node.fail(f"got {node._shown()}", expected)
    defaults = Replica(tensor_parallel=None)

    def figure(key: str, default: float) -> float:
        return r[key].number(LIMITS[f"replica.{key}"]) if key in r else default

    def whole(key: str, default: int) -> int:
        return r[key].integer(LIMITS[f"replica.{key}"]) if key in r else default

    return Replica(
        tensor_parallel=tp,
        usable_memory_share=figure("usable_memory_share", defaults.usable_memory_share),
        overhead_bytes_per_gpu=figure("overhead_gb_per_gpu", 0.0) * catalog.GB,
        bandwidth_efficiency=figure("bandwidth_efficiency", defaults.bandwidth_efficiency),
        compute_efficiency=figure("compute_efficiency", defaults.compute_efficiency),
        max_num_seqs=whole("max_num_seqs", catalog.default_max_num_seqs(gpu)),
        block_size=whole("block_size", defaults.block_size),
    )


def _hours(f: _Field) -> tuple[float, ...]:
    items = f.sequence(24, "24 values, one per hour from 00:00")
    return tuple(item.number(LIMITS["workloads[].arrivals"]) for item in items)


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
    tokens = TokenStats(**{key: t[key].number(LIMITS["workloads[].tokens"]) for key in t})
    if tokens.input_p95 < tokens.input_mean:
        raise t["input_p95"].fail(f"p95 {tokens.input_p95:g} is below the mean {tokens.input_mean:g}", "p95 >= mean")
    if tokens.output_max < tokens.output_mean:
        raise t["output_max"].fail(f"max {tokens.output_max:g} is below the mean {tokens.output_mean:g}", "max >= mean")
    g = w["targets"].mapping(("ttft_p95_seconds", "tpot_p95_seconds"), ("e2e_p95_seconds", "goodput_share"))

    def target(key: str) -> float:
        return g[key].number(LIMITS[f"workloads[].targets.{key}"])

    targets = Targets(
        ttft_p95_seconds=target("ttft_p95_seconds"),
        tpot_p95_seconds=target("tpot_p95_seconds"),
        e2e_p95_seconds=None
        if "e2e_p95_seconds" not in g or g["e2e_p95_seconds"].is_null()
        else target("e2e_p95_seconds"),
        goodput_share=target("goodput_share") if "goodput_share" in g else 0.99,
    )
    rps = _arrivals(w["arrivals"])
    peak = max(max(day) for day in rps)
    if peak <= 0:
        raise w["arrivals"].fail("every hour is 0 rps", "the busiest-five-minute rps of at least one hour")
    if peak < MIN_PEAK_RPS:
        raise w["arrivals"].fail(
            f"the busiest hour is {peak:g} rps",
            f"at least {bound_text(MIN_PEAK_RPS)} requests per second in the busiest hour (or leave the workload out)",
        )
    return Workload(
        name=w["name"].name(),
        kind=w["kind"].choice(WORKLOAD_KINDS),
        rps_by_hour=rps,
        tokens=tokens,
        targets=targets,
        queue_seconds=w["queue_seconds"].number(LIMITS["workloads[].queue_seconds"]) if "queue_seconds" in w else 0.5,
        burstiness=w["burstiness"].number(LIMITS["workloads[].burstiness"]) if "burstiness" in w else 1.0,
    )


def _workloads(f: _Field) -> tuple[Workload, ...]:
    items = f.sequence(what="a list of workloads")
    if not items:
        raise f.fail("no workloads", "at least one interactive workload")
    if len(items) > MAX_WORKLOADS:
        raise f.fail(f"{len(items):,} workloads", f"at most {MAX_WORKLOADS} (one per feature of the served model)")
    workloads = tuple(_workload(item) for item in items)
    seen: set[str] = set()
    for item, workload in zip(items, workloads):
        if workload.name in seen:
            raise item.fail(f"workload name {workload.name!r} used twice", "a unique name per workload")
        seen.add(workload.name)
    if not any(w.kind == "interactive" for w in workloads):
        raise f.fail("no interactive workload", "at least one workload of kind interactive (it sizes the fleet)")
    return workloads


_CAPACITY_KEYS = ("rps_per_replica", "source", "note", "throughput_tokens_per_second", "throughput_source")

# What estimates a capacity no one measured (console/bench/estimate.py sweeps the plan's simulated
# replica). It gets the plan with a provisional capacity (one replica for the whole interactive peak)
# and returns the capacity to put in its place; the plan package itself runs no simulator.
CapacityEstimator = Callable[[Plan], Capacity]
_UNSET = Capacity(math.nan, ESTIMATED)  # only until the estimate is in: never leaves parse_plan


def _capacity(f: _Field | None) -> Capacity | None:
    """The measured capacity; None when the plan names no rps_per_replica (it is then estimated)."""
    if f is None or f.is_null():  # `capacity:` with nothing under it reads as no capacity
        return None
    c = f.mapping((), _CAPACITY_KEYS)
    throughput = (
        c["throughput_tokens_per_second"].number(LIMITS["capacity.throughput_tokens_per_second"])
        if "throughput_tokens_per_second" in c
        else None
    )
    if "throughput_source" in c and throughput is None:
        raise c["throughput_source"].fail(
            "a throughput_source without throughput_tokens_per_second", "both, or neither"
        )
    throughput_source = c["throughput_source"].name() if "throughput_source" in c else ("manual" if throughput else "")
    if "rps_per_replica" not in c:
        for key in ("source", "note"):
            if key in c:
                raise c[key].fail(f"{key} without rps_per_replica", "rps_per_replica with its source, or neither")
        if throughput is None:
            raise f.fail(
                "no rps_per_replica",
                "capacity.rps_per_replica with its source (measure it: capcon bench), or no capacity section "
                "(the planner then estimates it)",
            )
        return Capacity(
            rps_per_replica=math.nan,  # replaced by the estimate
            source=ESTIMATED,
            throughput_tokens_per_second=throughput,
            throughput_source=throughput_source,
        )
    if "source" not in c:
        raise f.fail("missing key 'source'", "source to be set (manual, or the benchmark that measured it)")
    source = c["source"].name()
    if source == ESTIMATED:
        raise c["source"].fail(
            f"source {ESTIMATED!r} with a number", "the source of a measured capacity (manual, capcon bench, ...)"
        )
    return Capacity(
        rps_per_replica=c["rps_per_replica"].number(LIMITS["capacity.rps_per_replica"]),
        source=source,
        note=c["note"].name(MAX_NOTE_LENGTH, newlines=True) if "note" in c else "",
        throughput_tokens_per_second=throughput,
        throughput_source=throughput_source,
    )


def _check_compute_precision(plan: Plan, model: _Field) -> None:
    """A compute precision the GPU has tensor cores for (an A100 has no FP8: vLLM runs FP8 weights as W8A16)."""
    wanted = plan.model.compute_precision
    if wanted is None or precision_flops(plan.gpu, wanted) is not None:
        return
    field = model.mapping((), tuple(_MODEL_KEYS))["compute_precision"]
    raise field.fail(
        f"{plan.gpu.name} has no {wanted.upper()} tensor cores in the catalog",
        f"bf16 (the weights are dequantised), or gpu.tflops_{wanted} with the datasheet's dense figure",
    )


def _peak_interactive_rps(plan: Plan) -> float:
    return max(sum(w.rps_by_hour[d][h] for w in plan.interactive) for d in range(7) for h in range(24))


def _check_fleet_size(plan: Plan, capacity: _Field | None) -> None:
    """ceil(interactive peak / capacity) replicas: past MAX_PLAN_REPLICAS the plan describes no one fleet."""
    peak = _peak_interactive_rps(plan)
    replicas = math.ceil(peak / plan.capacity.rps_per_replica - 1e-9)
    if replicas <= MAX_PLAN_REPLICAS:
        return
    problem = (
        f"{bound_text(plan.capacity.rps_per_replica)} rps per replica for the peak of {bound_text(peak)} rps "
        f"needs {replicas:,} replicas"
    )
    expected = (
        f"at most {MAX_PLAN_REPLICAS} replicas for one plan (a larger capacity per replica, or one plan per fleet)"
    )
    if capacity is None or plan.capacity.estimated:
        raise PlanError(f"{plan.source_path}:1: capacity (estimated): {problem}; expected {expected}")
    raise capacity.mapping((), _CAPACITY_KEYS)["rps_per_replica"].fail(problem, expected)


def _estimated(plan: Plan, measured: Capacity | None, estimate: CapacityEstimator | None) -> Plan:
    """`plan` with the estimator's capacity in place of the missing one (PlanError without an estimator)."""
    if estimate is None:
        raise PlanError(
            f"{plan.source_path}:1: capacity: no rps_per_replica; expected one measured with `capcon bench --plan "
            f"{plan.source_path} --write-plan` (this reader does not estimate it)"
        )
    provisional = Capacity(_peak_interactive_rps(plan), ESTIMATED)
    draft = replace(plan, capacity=provisional)
    found = estimate(draft)
    if measured is None:
        return replace(plan, capacity=found)
    return replace(
        plan,
        capacity=replace(
            found,
            throughput_tokens_per_second=measured.throughput_tokens_per_second,
            throughput_source=measured.throughput_source,
        ),
    )


def _url(f: _Field) -> str:
    value = f.text()
    if not re.match(r"^https?://[^\s/]+", value):
        raise f.fail(f"got {masked_target(value)!r}", "a URL such as http://10.0.0.5:8000")
    return value


def _target(f: _Field) -> str:
    value = f.text()
    try:
        target_metrics_url(value)
    except ValueError as problem:
        raise f.fail(f"got {masked_target(value)!r}: {problem}", TARGET_EXPECTED) from None
    return value


def _fleet(f: _Field) -> FleetSource:
    s = f.mapping((), ("targets", "prometheus_url", "selector", "gateways", "dcgm_targets"))
    if ("targets" in s) == ("prometheus_url" in s):
        raise f.fail("needs exactly one source", "targets (a list of URLs) or prometheus_url")
    if "selector" in s and "prometheus_url" not in s:
        raise s["selector"].fail("selector without prometheus_url", "selector only with prometheus_url")
    gateways = _gateways(s["gateways"]) if "gateways" in s else ()
    dcgm = _dcgm_targets(s["dcgm_targets"]) if "dcgm_targets" in s else ()
    if "targets" in s:
        items = s["targets"].sequence(what="a list of URLs")
        if not items:
            raise s["targets"].fail("an empty list", "at least one URL")
        entries = [_fleet_target(item) for item in items]
        _each_gpu_once(items, entries)
        return FleetSource(
            targets=tuple(url for url, _ in entries),
            target_gpus=tuple(gpus for _, gpus in entries if gpus is not None),
            gateways=gateways,
            dcgm_targets=dcgm,
        )
    return FleetSource(
        prometheus_url=_url(s["prometheus_url"]),
        selector=s["selector"].text() if "selector" in s else "",
        gateways=gateways,
        dcgm_targets=dcgm,
    )


_TARGET_ENTRY = "a URL, or {url: URL, pod: NAME} or {url: URL, gpus: [0, 1]} (which GPUs serve it)"
# Kubernetes' names: a pod a DNS subdomain (253), a namespace a DNS label (63), lower case, digits, '-' and '.'.
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_GPU_INDEX = Limit(0, 1023, whole=True)


def _fleet_target(f: _Field) -> tuple[str, TargetGpus | None]:
    """One of fleet.targets: a URL, or a mapping that also names the GPUs serving it (pod, or indices on its host)."""
    if isinstance(f.node, yaml.SequenceNode):
        raise f.fail("got a list", _TARGET_ENTRY)
    if not isinstance(f.node, yaml.MappingNode):
        return _target(f), None
    m = f.mapping(("url",), ("pod", "namespace", "gpus"))
    url = _target(m["url"])
    if ("pod" in m) == ("gpus" in m):
        raise f.fail(
            "both pod and gpus" if "pod" in m else "a mapping that names no GPU", "pod or gpus beside url, one of them"
        )
    if "namespace" in m and "pod" not in m:
        raise m["namespace"].fail("namespace without pod", "namespace only beside pod")
    if "pod" in m:
        namespace = _k8s_name(m["namespace"], 63) if "namespace" in m else None
        return url, TargetGpus(url, pod=_k8s_name(m["pod"], 253), namespace=namespace)
    indices = m["gpus"].sequence(what="a list of GPU indices on the target's host, such as [0, 1]")
    if not indices:
        raise m["gpus"].fail("an empty list", "at least one GPU index")
    gpus = tuple(str(index.integer(_GPU_INDEX)) for index in indices)
    if len(set(gpus)) != len(gpus):
        raise m["gpus"].fail(f"GPU {next(g for g in gpus if gpus.count(g) > 1)} listed twice", "each GPU once")
    return url, TargetGpus(url, gpus=gpus)


def _each_gpu_once(items: list[_Field], entries: list[tuple[str, TargetGpus | None]]) -> None:
    """A GPU of a host named for two targets would count its work twice: refused with both places."""
    held: dict[tuple[str, str], int] = {}
    for i, (url, named) in enumerate(entries):
        host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
        for gpu in named.gpus if named is not None else ():
            if (host, gpu) in held:
                raise items[i].fail(
                    f"GPU {gpu} of host {host} also named by fleet.targets[{held[host, gpu]}]",
                    "each GPU named for one target",
                )
            held[host, gpu] = i


def _k8s_name(f: _Field, max_length: int) -> str:
    value = f.name(max_length)
    if not _K8S_NAME.match(value):
        raise f.fail(f"got {_cut(value, quoted=True)}", "a Kubernetes name: lower-case letters, digits, '-' and '.'")
    return value


def _dcgm_targets(f: _Field) -> tuple[str, ...]:
    """dcgm-exporter pages (host:port or URLs, e.g. each GPU node's :9400), checked as replica targets are."""
    items = f.sequence(what="a list of dcgm-exporter URLs")
    if not items:
        raise f.fail("an empty list", "at least one dcgm-exporter URL (or no dcgm_targets key)")
    return tuple(_target(item) for item in items)


MAX_GATEWAYS = 64
_GATEWAY_EXPECTED = "a gateway URL, or {url: ..., admin_url: ...} (its main and admin listeners)"


def _gateway_url(f: _Field) -> str:
    """http(s)://host:port, checked as a --target is (a gateway is asked for /metrics and its admin API)."""
    _url(f)
    return _target(f)


def _gateways(f: _Field) -> tuple[GatewayAddress, ...]:
    """`capcon gateway` instances in front of the fleet: a URL (watched only) or {url, admin_url} (also switched)."""
    items = f.sequence(what=f"a list of gateways, each {_GATEWAY_EXPECTED}")
    if not items:
        raise f.fail("an empty list", "at least one gateway (or no gateways key)")
    if len(items) > MAX_GATEWAYS:
        raise f.fail(f"{len(items):,} gateways", f"at most {MAX_GATEWAYS}")
    gateways = []
    for item in items:
        if isinstance(item.node, yaml.MappingNode):
            g = item.mapping(("url",), ("admin_url",))
            admin = g.get("admin_url")
            gateway = GatewayAddress(_gateway_url(g["url"]), _gateway_url(admin) if admin is not None else None)
        elif isinstance(item.node, yaml.ScalarNode):
            gateway = GatewayAddress(_gateway_url(item))
        else:
            raise item.fail("got a list", _GATEWAY_EXPECTED)
        if gateway in gateways:
            raise item.fail(f"{masked_target(gateway.url)!r} listed twice", "each gateway once")
        gateways.append(gateway)
    return tuple(gateways)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Prefixes of API keys as issued: such a value is a key pasted in place of its variable's name.
_KEY_PREFIXES = ("sk-", "sk_live_", "sk_test_", "rk_live_", "rk_test_")


def _env_name(f: _Field) -> str:
    """The name of an environment variable holding a secret; a value that may be the secret is refused unshown."""
    expected = (
        "the NAME of an environment variable, such as HOSTED_API_KEY; put the key itself in the "
        "environment, never in the plan"
    )
    # The value is never echoed: what is refused here may be a key.
    try:
        value = f.text()
    except PlanError:
        raise f.fail("not text (not shown)", expected) from None
    if value.strip().startswith(_KEY_PREFIXES) or value.strip().lower().startswith("bearer "):
        raise f.fail("the value looks like an API key (not shown)", expected)
    if len(value) > MAX_ENV_NAME_LENGTH:
        raise f.fail(f"{len(value):,} characters, longer than a variable name (not shown)", expected)
    if not _ENV_NAME.fullmatch(value):
        raise f.fail(f"not a variable name ({len(value):,} characters, not shown)", expected)
    return value


_OVERFLOW_KEYS = (
    "mode",
    "max_queue",
    "max_wait_seconds",
    "hosted_model",
    "hosted_url",
    "hosted_key_env",
    "hosted_price_per_million",
    "deferrable_keys_env",
    "admin_token_env",
    "actuators",
)
ACTUATOR_KINDS = ("gateway", "webhook", "command")
MAX_ACTUATORS = 16
MAX_ARGV = 64
_ACTUATOR_TIMEOUT = Limit(0.0, 300.0, "seconds", low_open=True)
_ACTUATOR_EXPECTED = (
    "gateway, {webhook: {url, secret_env, timeout_seconds}} or {command: {argv: [...], timeout_seconds}}"
)


def _actuator(f: _Field) -> Actuator:
    if isinstance(f.node, yaml.ScalarNode):
        if f.node.value != "gateway":
            raise f.fail(f"got {_cut(f.node.value, quoted=True)}", _ACTUATOR_EXPECTED)
        return Actuator("gateway")
    if not isinstance(f.node, yaml.MappingNode) or len(f.node.value) != 1:
        raise f.fail("not one actuator", _ACTUATOR_EXPECTED)
    one = f.mapping((), ACTUATOR_KINDS)
    kind, body = next(iter(one.items()))
    if kind == "gateway":
        if not body.is_null():
            raise body.fail("settings for gateway", "gateway alone (its gateways are fleet.gateways)")
        return Actuator("gateway")
    if kind == "webhook":
        w = body.mapping(("url", "secret_env"), ("timeout_seconds",))
        timeout = w["timeout_seconds"].number(_ACTUATOR_TIMEOUT) if "timeout_seconds" in w else 5.0
        return Actuator("webhook", url=_url(w["url"]), secret_env=_env_name(w["secret_env"]), timeout_seconds=timeout)
    c = body.mapping(("argv",), ("timeout_seconds",))
    words = c["argv"].sequence(what="a list of words: the program, then its arguments")
    if not words:
        raise c["argv"].fail("an empty list", "the program, then its arguments")
    if len(words) > MAX_ARGV:
        raise c["argv"].fail(f"{len(words):,} words", f"at most {MAX_ARGV}")
    timeout = c["timeout_seconds"].number(_ACTUATOR_TIMEOUT) if "timeout_seconds" in c else 10.0
    return Actuator("command", argv=tuple(w.name(max_length=4096) for w in words), timeout_seconds=timeout)


def _actuators(f: _Field) -> tuple[Actuator, ...]:
    items = f.sequence(what=f"a list of actuators, each {_ACTUATOR_EXPECTED}")
    if not items:
        raise f.fail("an empty list", "at least one actuator (or no actuators key: the fleet's gateways)")
    if len(items) > MAX_ACTUATORS:
        raise f.fail(f"{len(items):,} actuators", f"at most {MAX_ACTUATORS}")
    actuators = tuple(_actuator(item) for item in items)
    if sum(a.kind == "gateway" for a in actuators) > 1:
        raise f.fail("gateway listed twice", "each actuator once")
    return actuators


def _overflow(f: _Field | None, data: DataRules) -> Overflow:
    if f is None:
        return Overflow()
    o = f.mapping((), _OVERFLOW_KEYS)
    overflow = Overflow(
        mode=o["mode"].choice(OVERFLOW_MODES) if "mode" in o else "bounded_queue",
        max_queue=o["max_queue"].integer(LIMITS["overflow.max_queue"]) if "max_queue" in o else Overflow.max_queue,
        max_wait_seconds=(
            o["max_wait_seconds"].number(LIMITS["overflow.max_wait_seconds"])
            if "max_wait_seconds" in o
            else Overflow.max_wait_seconds
        ),
        hosted_model=o["hosted_model"].name() if "hosted_model" in o else None,
        hosted_url=_url(o["hosted_url"]) if "hosted_url" in o else None,
        hosted_key_env=_env_name(o["hosted_key_env"]) if "hosted_key_env" in o else None,
        hosted_price_per_million=(
            o["hosted_price_per_million"].number(LIMITS["overflow.hosted_price_per_million"])
            if "hosted_price_per_million" in o
            else None
        ),
        deferrable_keys_env=_env_name(o["deferrable_keys_env"]) if "deferrable_keys_env" in o else None,
        admin_token_env=_env_name(o["admin_token_env"]) if "admin_token_env" in o else None,
        actuators=_actuators(o["actuators"]) if "actuators" in o else None,
    )
    if overflow.hosted_url is None:
        for key in ("hosted_key_env", "hosted_price_per_million"):
            if key in o:
                raise o[key].fail(f"{key} without hosted_url", "hosted_url for the hosted endpoint as well")
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
        location=d["location"].name() if "location" in d else "",
    )


_TOP_REQUIRED = ("model", "gpu", "workloads")
_TOP_OPTIONAL = (
    "name",
    "timezone",
    "replica",
    "capacity",
    "redundancy",
    "lead_time_minutes",
    "data",
    "overflow",
    "fleet",
    "unusual",
)
MAX_UNUSUAL = 100
_INPUT_OVER_CONTEXT = "workloads[].tokens.input_mean"  # over model.max_model_len: checked across fields


def _unusual(f: _Field | None) -> set[str]:
    """`unusual: [workloads[0].targets.tpot_p95_seconds, gpu.memory_gb]`: values the plan means, unusual as they are.

    A path as an error names it, or with [] for every item (workloads[].queue_seconds).
    """
    if f is None:
        return set()
    known = (*UNUSUAL, _INPUT_OVER_CONTEXT)
    items = f.sequence(what="a list of key paths, such as [workloads[0].targets.tpot_p95_seconds]")
    if len(items) > MAX_UNUSUAL:
        raise f.fail(f"{len(items):,} key paths", f"at most {MAX_UNUSUAL}")
    meant = set()
    for item in items:
        path = item.name().strip()
        if generic_path(path) not in known:
            raise item.fail(f"{_cut(path, quoted=True)} has no unusual range", "one of " + ", ".join(known))
        meant.add(path)
    return meant


def _at(f: _Field, *keys: str | int) -> _Field:
    """The field under `f` at `keys`, in a tree the loader has already checked (the key is there)."""
    for key in keys:
        node = f.node
        if isinstance(key, int) and isinstance(node, yaml.SequenceNode):
            f = f.child(key, node.value[key])
        elif isinstance(node, yaml.MappingNode):
            f = f.child(key, next(v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key))
    return f


def _check_input_within_context(plan: Plan, workloads: _Field) -> None:
    """A mean prompt longer than the model's context: tokens counted as characters, or a context not given."""
    context = plan.model.max_model_len
    if context is None:
        return
    for i, w in enumerate(plan.workloads):
        mean = w.tokens.input_mean
        field = _at(workloads, i, "tokens", "input_mean")
        if mean <= context or workloads.meant & {field.path, _INPUT_OVER_CONTEXT}:
            continue
        needed = int(w.tokens.input_p95 + w.tokens.output_max)
        raise field.unusual(
            f"a mean prompt of {bound_text(mean)} tokens, over model.max_model_len ({context:,})",
            f"{guess_number(mean / 4)} (characters at about 4 a token), or max_model_len: {needed}",
            f"at most model.max_model_len ({context:,} tokens)",
        )


def _timezone(field: _Field) -> str:
    """An IANA zone name ("Europe/Warsaw"): the clock the plan's hours of the day are written in."""
    name = field.text()
    try:
        zone_info(name)
    except ZoneNameError as error:
        raise field.fail(error.problem, error.expected) from None
    return name


_OPENERS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSERS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _check_nesting(text: str, source_name: str) -> None:
    """Refuse YAML nested deeper than MAX_NESTING before composing it (the Python composer recurses per level)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, _OPENERS):
            depth += 1
            if depth > MAX_NESTING:
                line = event.start_mark.line + 1 if event.start_mark else 1
                raise PlanError(
                    f"{source_name}:{line}: YAML nested more than {MAX_NESTING} "
                    f"levels deep; expected a plan (its keys nest 6 levels at most)"
                )
        elif isinstance(event, _CLOSERS):
            depth -= 1


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _compose(text: str, source_name: str) -> yaml.Node:
    try:
        _check_nesting(text, source_name)
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 1
        problem = _one_line(error.problem or error.context or "malformed YAML")
        if "nesting depth" in problem:  # libyaml's own limit (1,000 levels), met before ours
            raise PlanError(
                f"{source_name}:{line}: YAML nested more than {MAX_NESTING} levels deep; "
                f"expected a plan (its keys nest 6 levels at most)"
            ) from None
        raise PlanError(f"{source_name}:{line}: YAML syntax error: {problem}; expected valid YAML") from None
    except yaml.reader.ReaderError as error:  # a character YAML does not allow (control characters)
        line = text.count("\n", 0, max(0, error.position)) + 1
        character = chr(error.character) if isinstance(error.character, int) else error.character
        raise PlanError(
            f"{source_name}:{line}: YAML error: the character {character!r} is not allowed in YAML; "
            f"expected printable text (write control characters as escapes in double quotes)"
        ) from None
    except yaml.YAMLError as error:
        raise PlanError(f"{source_name}:1: YAML error: {_cut(_one_line(error))}; expected valid YAML") from None
    except UnicodeError:  # unpaired surrogates in text handed to parse_plan (a file is decoded strictly)
        raise PlanError(f"{source_name}:1: not UTF-8 text; expected a plan file (YAML)") from None
    if node is None:
        raise PlanError(f"{source_name}:1: the file is empty; expected a plan (model, gpu, workloads)")
    return node


def parse_plan(text: str, source_name: str, estimate: CapacityEstimator | None = None) -> Plan:
    """The plan written in `text`; `source_name` names it in error messages.

    A plan without a measured capacity gets `estimate`'s (PlanError when None).
    """
    if len(text) > MAX_PLAN_BYTES:
        raise PlanError(
            f"{source_name}:1: {len(text):,} characters; expected a plan of at most "
            f"{MAX_PLAN_BYTES // 1024} KB (a plan is a few KB)"
        )
    root = _Field(_compose(text, source_name), "", source_name)
    top = root.mapping(_TOP_REQUIRED, _TOP_OPTIONAL)
    root.meant.update(_unusual(top.get("unusual")))  # before any number is read: every field shares the set
    data = _data(top.get("data"))
    measured = _capacity(top.get("capacity"))
    needs_estimate = measured is None or measured.estimated
    plan = Plan(
        name=top["name"].name() if "name" in top else Path(source_name).stem,
        timezone=_timezone(top["timezone"]) if "timezone" in top else "UTC",
        model=_model(top["model"]),
        gpu=(gpu := _gpu(top["gpu"])),
        replica=_replica(top.get("replica"), gpu),
        workloads=_workloads(top["workloads"]),
        capacity=_UNSET if needs_estimate else measured,  # type: ignore[arg-type]  # measured is set here
        redundancy=top["redundancy"].integer(LIMITS["redundancy"]) if "redundancy" in top else 1,
        lead_time_seconds=(
            top["lead_time_minutes"].number(LIMITS["lead_time_minutes"]) * 60.0 if "lead_time_minutes" in top else 600.0
        ),
        data=data,
        overflow=_overflow(top.get("overflow"), data),
        fleet=_fleet(top["fleet"]) if "fleet" in top else None,
        source_path=source_name,
        source_text=text,
    )
    _check_compute_precision(plan, top["model"])
    _check_input_within_context(plan, top["workloads"])
    if needs_estimate:
        plan = _estimated(plan, measured, estimate)
    _check_fleet_size(plan, top.get("capacity"))
    return plan


_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def _read_bounded(path: str | Path, source: str) -> bytes:
    """The bytes of a regular file of at most MAX_PLAN_BYTES; PlanError for anything else.

    Opened without blocking (a FIFO would wait for a writer) and checked with fstat on the
    open file, so /dev/zero, a FIFO, a socket or a directory is refused before a byte is read,
    and a file that grows while it is read is cut at the cap and refused.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise PlanError(f"{source}: no such file; expected a plan file (YAML)") from None
    except IsADirectoryError:
        raise PlanError(f"{source}: is a directory; expected a plan file (YAML)") from None
    except ValueError:  # a NUL in the name
        raise PlanError(f"{source}: not a file name (it holds a NUL character); expected a plan file (YAML)") from None
    except OSError as error:
        try:
            kind = _kind(os.stat(path).st_mode)  # a socket cannot be opened: say what it is
        except (OSError, ValueError):
            kind = None
        if kind and kind != "not a regular file":
            raise PlanError(f"{source}: is {kind}, not a regular file; expected a plan file (YAML)") from None
        raise PlanError(f"{source}: cannot be read ({error.strerror}); expected a readable plan file") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise PlanError(f"{source}: is a directory; expected a plan file (YAML)")
        if not stat.S_ISREG(info.st_mode):
            raise PlanError(f"{source}: is {_kind(info.st_mode)}, not a regular file; expected a plan file (YAML)")
        too_big = PlanError(
            f"{source}: larger than {MAX_PLAN_BYTES // 1024} KB; expected a plan file of at most "
            f"{MAX_PLAN_BYTES // 1024} KB (a plan is a few KB)"
        )
        if info.st_size > MAX_PLAN_BYTES:
            raise too_big
        chunks, size = [], 0
        while size <= MAX_PLAN_BYTES:
            try:
                chunk = os.read(fd, MAX_PLAN_BYTES + 1 - size)
            except BlockingIOError:  # not for a regular file; refused rather than waited for
                raise PlanError(f"{source}: cannot be read without waiting; expected a plan file (YAML)") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_PLAN_BYTES:
            raise too_big
        return b"".join(chunks)
    except OSError as error:
        raise PlanError(f"{source}: cannot be read ({error.strerror}); expected a readable plan file") from None
    finally:
        os.close(fd)


def load_plan(path: str | Path, estimate: CapacityEstimator | None = None) -> Plan:
    """Read and check a plan file; any problem raises PlanError (one line, exit code 2).

    `estimate` fills in a capacity the file does not give (console.bench.estimate.load_plan passes it).
    """
    source = str(path)
    data = _read_bounded(path, source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise PlanError(f"{source}:{line}: not UTF-8 text; expected a plan file (YAML)") from None
    return parse_plan(text, source, estimate)
