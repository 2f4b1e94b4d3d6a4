"""NVIDIA dcgm-exporter's page -> one reading per GPU (or MIG instance): the GPU's own counters.

Pure: text in, frozen readings out. The series grammar (names, label sets, escapes, a
trailing timestamp, a page cut short) is the exposition reader's (console/metrics/exposition.py);
this module adds what dcgm-exporter's pages are as found in the field:

- the profiling fields `DCGM_FI_PROF_*` are ratios 0-1 (some exporters' HELP text says
  "(in %)" while the values are ratios), `DCGM_FI_DEV_GPU_UTIL` is percent 0-100 (read here
  as a 0-1 share), `DCGM_FI_DEV_FB_USED`/`_FREE` are MiB (read as bytes), clocks MHz (read
  as Hz), power W;
- the host label was renamed from `Hostname` to `hostname`: both are read;
- a GPU is its UUID, a MIG instance its UUID plus `GPU_I_ID` (instance ids repeat across GPUs);
  MIG instances carry no `DEV_GPU_UTIL`; empty `pod=""` labels mean no pod;
- a value that is not a number (`ERROR - FAILED TO CONVERT TO STRING`) or out of its range
  loses that one figure, counted in `errors`, never the page.

A field a page does not carry is None (unknown), never 0: many fleets run the default
counters file, where `DCGM_FI_PROF_SM_ACTIVE` is commented out. `parse_dcgm` raises only
`DcgmPageError`, for text that holds no dcgm-exporter sample at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from console.metrics.exposition import Labels, parse_labels, whole_lines

PREFIX = "DCGM_FI_"
MIB = 1024 * 1024
MHZ = 1e6
# A ratio printed with six decimals may round a hair past 1; more than this is not a ratio.
_RATIO_SLACK = 1e-3
_SHOWN = 80  # characters of a bad line kept for the message

# field name -> (reading attribute, how its value becomes the attribute's unit, upper bound in that unit)
_RATIO = ("ratio", 1.0 + _RATIO_SLACK)
_FIELDS: Mapping[str, tuple[str, str, float]] = {
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", *_RATIO),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", *_RATIO),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", *_RATIO),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", *_RATIO),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", *_RATIO),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", "percent", 100.0 + _RATIO_SLACK),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_copy_util", "percent", 100.0 + _RATIO_SLACK),
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", "mib", math.inf),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_bytes", "mib", math.inf),
    "DCGM_FI_DEV_POWER_USAGE": ("power_watts", "plain", math.inf),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_hz", "mhz", math.inf),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_hz", "mhz", math.inf),
}
READ_FIELDS = frozenset(_FIELDS)


class DcgmPageError(ValueError):
    """Text that is not a dcgm-exporter page (no `DCGM_FI_` sample in it)."""


@dataclass(frozen=True)
class GpuReading:
    """One GPU, or one MIG instance of it, as one page showed it. Shares 0-1, bytes, Hz, W; None unknown."""

    uuid: str
    gpu: str = ""  # the exporter's index on its node, as text ("0")
    mig_instance: str | None = None  # GPU_I_ID
    mig_profile: str | None = None  # GPU_I_PROFILE, e.g. "2g.20gb"
    model_name: str = ""
    host: str | None = None  # the Hostname / hostname label (the node only where NODE_NAME is set)
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    gr_engine_active: float | None = None
    gpu_util: float | None = None  # DCGM_FI_DEV_GPU_UTIL as a share (it reads high on a mostly idle GPU)
    mem_copy_util: float | None = None
    fb_used_bytes: float | None = None
    fb_free_bytes: float | None = None
    power_watts: float | None = None
    sm_clock_hz: float | None = None
    mem_clock_hz: float | None = None

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.uuid, self.mig_instance)


@dataclass(frozen=True)
class DcgmPage:
    gpus: tuple[GpuReading, ...]
    errors: int = 0  # lines of read fields whose value or labels could not be used
    first_error: str = ""
    cut: bool = False  # the page ended inside a line (that line was not read)
    fields: frozenset[str] = field(default_factory=frozenset)  # read fields the page carried at all


def _label(labels: Labels, *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:  # an empty label is no label (dcgm-exporter writes pod="" for a GPU no pod holds)
            return value
    return None


def _converted(kind: str, value: float) -> float:
    if kind == "percent":
        return min(value, 100.0) / 100.0
    if kind == "ratio":
        return min(value, 1.0)
    if kind == "mib":
        return value * MIB
    if kind == "mhz":
        return value * MHZ
    return value


def _number(text: str) -> float | None:
    """The sample's value (an integer timestamp may follow); None when it is not a number."""
    parts = text.split()
    if not parts or len(parts) > 2:
        return None
    if len(parts) == 2 and not parts[1].lstrip("-").isdigit():
        return None
    try:
        return float(parts[0])
    except ValueError:
        return None


def _split(line: str) -> tuple[str, str, str] | None:
    """`NAME{labels} value` -> (name, label text, value text); None when it has no such shape."""
    brace = line.find("{")
    space = line.find(" ")
    if brace >= 0 and (space < 0 or brace < space):
        close = line.rfind("}")
        if close < brace:
            return None
        return line[:brace], line[brace + 1 : close], line[close + 1 :]
    if space < 0:
        return None
    return line[:space], "", line[space:]


def parse_dcgm(text: str) -> DcgmPage:
    """Every GPU the page names, with the figures it gave for it. Linear in the page's length."""
    given = text
    text, cut = whole_lines(text)
    readings: dict[tuple[str, str | None], dict] = {}
    seen: set[tuple[str, str]] = set()
    errors = 0
    first_error = ""
    carried: set[str] = set()
    any_sample = False

    def bad(line: str) -> None:
        nonlocal errors, first_error
        errors += 1
        first_error = first_error or line[:_SHOWN]

    for raw in text.split("\n"):
        line = raw.strip()
        if not line.startswith(PREFIX):
            continue
        parts = _split(line)
        if parts is None:
            bad(line)
            continue
        name, label_text, value_text = parts
        any_sample = True
        spec = _FIELDS.get(name)
        if spec is None:
            continue
        attribute, kind, bound = spec
        labels = parse_labels(label_text)
        uuid = labels.get("UUID") if labels is not None else None
        if labels is None or not uuid:
            bad(line)
            continue
        instance = _label(labels, "GPU_I_ID")
        if (name, label_text) in seen:
            continue  # a repeated series: the first one counts, as in Prometheus
        seen.add((name, label_text))
        carried.add(name)
        entry = readings.get((uuid, instance))
        if entry is None:
            entry = readings[(uuid, instance)] = {
                "uuid": uuid,
                "gpu": labels.get("gpu", ""),
                "mig_instance": instance,
                "mig_profile": _label(labels, "GPU_I_PROFILE"),
                "model_name": labels.get("modelName", ""),
                "host": _label(labels, "hostname", "Hostname"),
                "pod": _label(labels, "pod"),
                "namespace": _label(labels, "namespace"),
                "container": _label(labels, "container"),
            }
        value = _number(value_text)
        if value is None or not math.isfinite(value) or value < 0 or value > bound:
            bad(line)
            continue
        if attribute not in entry:
            entry[attribute] = _converted(kind, value)
    if not any_sample and given.strip():
        raise DcgmPageError("no DCGM_FI_ sample in the page; expected dcgm-exporter's /metrics (Prometheus text)")
    gpus = tuple(GpuReading(**entry) for entry in readings.values())
    return DcgmPage(gpus, errors, first_error, cut, frozenset(carried))


def with_host(reading: GpuReading, host: str) -> GpuReading:
    """The reading with `host` set (a page read directly: its address names the node better than its label)."""
    return replace(reading, host=host)
