"""A small Prometheus registry that writes text format 0.0.4 exactly as `prometheus_client` does.

Written here rather than borrowed so the simulated fleet needs no extra runtime
dependency and observing a histogram stays cheap (a fleet observes thousands of
inter-token latencies a second). The output matches `prometheus_client`'s
`generate_latest`: counters as `<name>_total` plus a `<name>_created` gauge,
histograms with cumulative `_bucket` lines, `_count`, `_sum` and `_created`,
labels sorted by name, floats written as Go writes them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

INF = float("inf")


def format_float(value: float) -> str:
    """`prometheus_client.utils.floatToGoString`."""
    value = float(value)
    if value == INF:
        return "+Inf"
    if value == -INF:
        return "-Inf"
    if value != value:
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def format_labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape_label(labels[key])}"' for key in sorted(labels)) + "}"


_Child = TypeVar("_Child")


class _Family(ABC, Generic[_Child]):
    """One metric family; its children (one per label set) are all of the family's own kind."""

    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()):
        self.name = name
        self.documentation = _escape_help(documentation)
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _Child] = {}
        self._created: dict[tuple[str, ...], float] = {}

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(labels[name]) for name in self.labelnames)

    def _labels(self, key: tuple[str, ...]) -> dict[str, str]:
        return dict(zip(self.labelnames, key))

    def _header(self, name: str, kind: str) -> str:
        return f"# HELP {name} {self.documentation}\n# TYPE {name} {kind}\n"

    def _created_block(self, name: str) -> str:
        lines = [self._header(f"{name}_created", "gauge")]
        for key, created in self._created.items():
            lines.append(f"{name}_created{format_labels(self._labels(key))} {format_float(created)}\n")
        return "".join(lines)

    @abstractmethod
    def render(self) -> str:
        """The family's lines in text format 0.0.4."""


class Counter(_Family["CounterChild"]):
    def child(self, created: float, **labels: str) -> CounterChild:
        key = self._key(labels)
        if key not in self._children:
            self._children[key] = CounterChild()
            self._created[key] = created
        return self._children[key]

    def render(self) -> str:
        total = f"{self.name}_total"
        lines = [self._header(total, "counter")]
        for key, child in self._children.items():
            lines.append(f"{total}{format_labels(self._labels(key))} {format_float(child.value)}\n")
        return "".join(lines) + self._created_block(self.name)


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        self.value += amount


class Gauge(_Family["GaugeChild"]):
    def child(self, **labels: str) -> GaugeChild:
        key = self._key(labels)
        if key not in self._children:
            self._children[key] = GaugeChild()
        return self._children[key]

    def render(self) -> str:
        lines = [self._header(self.name, "gauge")]
        for key, child in self._children.items():
            lines.append(f"{self.name}{format_labels(self._labels(key))} {format_float(child.value)}\n")
        return "".join(lines)


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)


class Histogram(_Family["HistogramChild"]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Iterable[float]):
        super().__init__(name, documentation, labelnames)
        bounds = sorted(float(b) for b in buckets)
        if bounds and bounds[-1] == INF:
            bounds.pop()
        self.bounds = tuple(bounds)

    def child(self, created: float, **labels: str) -> HistogramChild:
        key = self._key(labels)
        if key not in self._children:
            self._children[key] = HistogramChild(self.bounds)
            self._created[key] = created
        return self._children[key]

    def render(self) -> str:
        lines = [self._header(self.name, "histogram")]
        edges = [format_float(b) for b in self.bounds] + ["+Inf"]
        for key, child in self._children.items():
            labels = self._labels(key)
            running = 0.0
            for edge, count in zip(edges, child.counts):
                running += count
                lines.append(f"{self.name}_bucket{format_labels({**labels, 'le': edge})} {format_float(running)}\n")
            plain = format_labels(labels)
            lines.append(f"{self.name}_count{plain} {format_float(running)}\n")
            lines.append(f"{self.name}_sum{plain} {format_float(child.sum)}\n")
        return "".join(lines) + self._created_block(self.name)


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        # A value equal to a bound belongs to that bucket (le is "less than or equal").
        self.counts[bisect_left(self.bounds, value)] += count
        self.sum += value * count

    @property
    def count(self) -> int:
        return sum(self.counts)


class _Renders(Protocol):
    def render(self) -> str: ...


_AnyFamily = TypeVar("_AnyFamily", bound=_Renders)


class Registry:
    def __init__(self) -> None:
        self.families: list[_Renders] = []

    def register(self, family: _AnyFamily) -> _AnyFamily:
        self.families.append(family)
        return family

    def render(self) -> str:
        return "".join(family.render() for family in self.families)
