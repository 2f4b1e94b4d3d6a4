"""Fitting the simulator's GPU counter model (console/sim/gpu_calibration.py) to a reading of a real GPU.

Pure: it takes the reading script's JSON as a parsed document and returns the fit, its report and the
module text with the calibrated model rewritten; scripts/gpu_calibration.py reads and writes the files.

The reading holds known workloads (idle, one thread spinning, a plain memory read, a bf16 matmul, decode steps
at several batches, prefill, decode mixed with prefill): `summary` has the counters each phase read, in percent
(NVML's GPM API and GPU_UTIL give 0-100, where dcgm-exporter's DCGM_FI_PROF_* fields are ratios 0-1), and
`timing` what each phase achieved. Each factor is fitted through the origin (y = factor x x), as the simulator
applies it:

- dram_per_bandwidth over the read and decode phases: x = achieved TB/s / datasheet TB/s, y = DRAM active;
- tensor_per_flops over the matmul and prefill phases: x = achieved TFLOP/s / datasheet TFLOP/s, y = tensor
  active;
- sm_when_busy: the median SM active over the decode and prefill phases, which run kernels back to back.

A factor without a point to fit, or whose fit lands outside (0, 2], stays ideal (1.0), and the report says why.
"""

from __future__ import annotations

import ast
import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from console.plan.catalog import PRESETS
from console.plan.model import Gpu
from console.sim.gpu_calibration import IDEAL, CounterModel

TB = 1e12
TFLOP = 1e12
MAX_FACTOR = 2.0  # a counter reading twice the work's share of the datasheet is a wrong reading, not a GPU
NEAR_ZERO = 0.05  # SM active this low reads as "nothing ran"
IDLE_OFFSET = 0.02  # an idle counter above this is an offset a fit through the origin does not see

GPM_FIELDS = (
    "gr_engine_active",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "hmma_active",
    "dram_active",
    "fp32_active",
    "fp16_active",
)
PERCENT_FIELDS = (*GPM_FIELDS, "gpu_util", "mem_copy_util")
OTHER_SUMMARY_NUMBERS = ("samples", "power_w", "sm_clock_mhz", "fb_used_mib")
TIMING_NUMBERS = (
    "iterations",
    "seconds_per_iteration",
    "achieved_TBps",
    "achieved_TFLOPs",
    "bytes_per_step",
    "aggregate_tokens_per_second",
    "tokens_per_second",
)
FACTORS = ("dram_per_bandwidth", "tensor_per_flops", "sm_when_busy")

BEGIN_MARK = "# calibrated: begin\n"
END_MARK = "# calibrated: end\n"


class ReadingError(ValueError):
    """What in the reading is wrong, where, and what was expected: one line."""


@dataclass(frozen=True)
class Device:
    name: str | None
    driver: str | None
    torch: str | None
    memory_bytes: float | None


@dataclass(frozen=True)
class Reading:
    device: Device
    counters: dict[str, dict[str, float | None]]  # phase -> field -> value; percent fields as ratios 0-1
    timing: dict[str, dict[str, float | None]]  # phase -> field -> value
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Datasheet:
    bandwidth_tbps: float
    tflops: float
    basis: str  # "catalog H200-141GB" or "given"


@dataclass(frozen=True)
class Point:
    factor: str
    phase: str
    x: float  # share of the datasheet figure achieved (1.0 for SM active: kernels back to back)
    y: float  # the counter, as a ratio

    def model_y(self, factor: float) -> float:
        return factor * self.x


@dataclass(frozen=True)
class FactorFit:
    name: str
    value: float
    fitted: bool
    points: tuple[Point, ...]
    reason: str | None  # why it stayed ideal, when it did


@dataclass(frozen=True)
class Fit:
    reading: Reading
    datasheet: Datasheet
    factors: tuple[FactorFit, ...]
    caveats: tuple[str, ...]

    def factor(self, name: str) -> FactorFit:
        return next(f for f in self.factors if f.name == name)

    def model(self, read_on: str | None = None) -> CounterModel:
        values = {f.name: f.value for f in self.factors}
        return CounterModel(
            dram_per_bandwidth=values["dram_per_bandwidth"],
            tensor_per_flops=values["tensor_per_flops"],
            sm_when_busy=values["sm_when_busy"],
            source=self.source(read_on) if any(f.fitted for f in self.factors) else IDEAL.source,
        )

    def source(self, read_on: str | None) -> str:
        device = self.reading.device
        parts = [(device.name or "an unnamed GPU")[:80]]
        if device.driver:
            parts.append(f"driver {device.driver[:40]}")
        if read_on:
            parts.append(f"read {read_on}")
        said = ", ".join(parts)
        ideal = [f.name for f in self.factors if not f.fitted]
        return f"{said} ({', '.join(ideal)} left ideal)" if ideal else said


# --- reading the document -------------------------------------------------------------------------------------


def quoted(text: str, limit: int = 60) -> str:
    """A string from the reading, safe on one line."""
    return json.dumps(text if len(text) <= limit else text[:limit] + "...")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _number(value: object, where: str, low: float | None = None, high: float | None = None) -> float | None:
    """A finite number (within [low, high] when given) or None for null."""
    bounds = "" if low is None else f" {low:g}-{high:g}" if high is not None else f" >= {low:g}"
    expected = f"expected a number{bounds} or null"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReadingError(f"{where}: {expected}, got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or (low is not None and number < low) or (high is not None and number > high):
        raise ReadingError(f"{where}: {expected}, got {value!r:.40}")
    return number


def _clean(text: str) -> str:
    """A string from the reading that prints: a lone surrogate (JSON allows "\\ud800") becomes U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def _text(value: object, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return None if value is None else _clean(value)
    raise ReadingError(f"{where}: expected a string or null, got {_kind(value)}")


def _rows(document: dict, key: str) -> list[tuple[str, str, dict]]:
    """(where, phase, row) for each row of a list of {"phase": ...} objects; a phase appears once."""
    rows = document.get(key)
    if not isinstance(rows, list):
        got = "nothing" if key not in document else _kind(rows)
        raise ReadingError(f"{key}: expected a list of phases, got {got}")
    found, seen = [], set()
    for index, row in enumerate(rows):
        where = f"{key}[{index}]"
        if not isinstance(row, dict):
            raise ReadingError(f"{where}: expected an object with a phase, got {_kind(row)}")
        phase = row.get("phase")
        if not isinstance(phase, str):
            raise ReadingError(f"{where}.phase: expected a string, got {_kind(phase)}")
        phase = _clean(phase)
        if phase in seen:
            raise ReadingError(f"{where}.phase: {quoted(phase)} appears twice; expected each phase once")
        seen.add(phase)
        found.append((f"{where} ({quoted(phase, 40)})", phase, row))
    return found


def parse_reading(document: object) -> Reading:
    """The reading script's JSON, checked and with its percents turned into ratios; ReadingError says what is
    wrong, where, and what was expected."""
    if not isinstance(document, dict):
        raise ReadingError(f"the top level: expected an object with device, summary and timing, got {_kind(document)}")
    raw_device = document.get("device")
    if not isinstance(raw_device, dict):
        got = "nothing" if "device" not in document else _kind(raw_device)
        raise ReadingError(f"device: expected an object with the GPU's name, got {got}")
    device = Device(
        name=_text(raw_device.get("name"), "device.name"),
        driver=_text(raw_device.get("driver"), "device.driver"),
        torch=_text(raw_device.get("torch"), "device.torch"),
        memory_bytes=_number(raw_device.get("memory_bytes"), "device.memory_bytes", 0.0),
    )
    counters = {}
    for where, phase, row in _rows(document, "summary"):
        values: dict[str, float | None] = {}
        for field in PERCENT_FIELDS:
            percent = _number(row.get(field), f"{where}.{field}", 0.0, 100.0)
            values[field] = None if percent is None else percent / 100
        for field in OTHER_SUMMARY_NUMBERS:
            values[field] = _number(row.get(field), f"{where}.{field}")
        counters[phase] = values
    timing = {
        phase: {field: _number(row.get(field), f"{where}.{field}", 0.0) for field in TIMING_NUMBERS}
        for where, phase, row in _rows(document, "timing")
    }
    notes = document.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise ReadingError("notes: expected a list of strings")
    return Reading(device, counters, timing, tuple(_clean(note) for note in notes))


# --- the datasheet --------------------------------------------------------------------------------------------


def catalog_gpu(name: str | None, memory_bytes: float | None = None) -> Gpu | None:
    """The catalog's preset for a GPU as NVML names it ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA
    A100-SXM4-80GB", "NVIDIA L40S"); None for a GPU the catalog has no column for (an H100 NVL, an A100 PCIe)."""
    words = set(re.findall(r"[a-z0-9]+", (name or "").lower()))
    if "nvl" in words:
        return None  # the NVL boards have their own bandwidth and FLOP/s, not in the catalog
    if "h200" in words:
        return PRESETS["H200-141GB"]
    if "h100" in words:
        return PRESETS["H100-80GB-PCIe" if "pcie" in words else "H100-80GB-SXM"]
    if "a100" in words and "pcie" not in words:
        large = "80gb" in words or (memory_bytes is not None and memory_bytes > 60e9)
        return PRESETS["A100-80GB"] if large else None
    if "l40s" in words:
        return PRESETS["L40S-48GB"]
    if "l4" in words:
        return PRESETS["L4-24GB"]
    return None


def datasheet_for(device: Device, bandwidth_tbps: float | None, tflops: float | None) -> Datasheet:
    """The given figures, else the catalog's for the device; ReadingError when neither names one."""
    gpu = catalog_gpu(device.name, device.memory_bytes)
    if gpu is not None:
        given = bandwidth_tbps is not None or tflops is not None
        return Datasheet(
            bandwidth_tbps=bandwidth_tbps if bandwidth_tbps is not None else gpu.bandwidth_bytes_per_second / TB,
            tflops=tflops if tflops is not None else gpu.flops_per_second / TFLOP,
            basis=f"catalog {gpu.name}" + (", overridden where given" if given else ""),
        )
    if bandwidth_tbps is None or tflops is None:
        named = quoted(device.name) if device.name else "an unnamed GPU"
        raise ReadingError(
            f"device.name: the GPU catalog has no datasheet figures for {named} "
            f"(it has {', '.join(PRESETS)}); expected --bandwidth-tbps and --tflops"
        )
    return Datasheet(bandwidth_tbps, tflops, "given")


# --- the fit --------------------------------------------------------------------------------------------------


def phase_kind(phase: str) -> str:
    """idle, read, matmul, decode, prefill, mixed, spinning or other, from the reading script's phase names."""
    name = phase.strip().lower()
    if name == "idle":
        return "idle"
    if "spinning" in name:
        return "spinning"
    if "matmul" in name:
        return "matmul"
    for kind in ("read", "decode", "prefill", "mixed"):
        if name.startswith(kind):
            return kind
    return "other"


def through_origin(points: Sequence[Point]) -> float:
    """Least squares of y = factor x x: sum(x y) / sum(x^2); nan when the xs are all 0."""
    xx = math.fsum(p.x * p.x for p in points)
    xy = math.fsum(p.x * p.y for p in points)
    return xy / xx if xx > 0 and math.isfinite(xx) else math.nan


def _unsupported(reading: Reading, field: str) -> bool:
    return bool(reading.counters) and all(row[field] is None for row in reading.counters.values())


def _ratio_points(
    reading: Reading, factor: str, kinds: tuple[str, ...], achieved: str, datasheet: float, field: str
) -> tuple[list[Point], list[str]]:
    points, dropped = [], []
    for phase, times in reading.timing.items():
        if phase_kind(phase) not in kinds or phase not in reading.counters:
            continue
        value, counter = times[achieved], reading.counters[phase][field]
        if value is None or counter is None:
            continue
        x = value / datasheet
        if math.isfinite(x):
            points.append(Point(factor, phase, x, counter))
        else:
            dropped.append(phase)
    return points, dropped


def _judged(name: str, value: float, points: list[Point], missing: str, field: str, reading: Reading) -> FactorFit:
    if not points:
        if _unsupported(reading, field):
            reason = f"{field} is null at every phase (no GPM support on this GPU or driver)"
        else:
            reason = missing
        return FactorFit(name, 1.0, False, (), reason)
    if not (math.isfinite(value) and 0 < value <= MAX_FACTOR):
        shown = "nothing" if math.isnan(value) else f"{value:.3g}"
        reason = f"the fit gave {shown}, outside (0, {MAX_FACTOR:g}]: the reading looks wrong"
        return FactorFit(name, 1.0, False, tuple(points), reason)
    return FactorFit(name, value, True, tuple(points), None)


def fit_reading(reading: Reading, datasheet: Datasheet) -> Fit:
    """Each factor fitted over its phases, and the caveats the reading gives reason for."""
    caveats: list[str] = []
    dram, dropped_dram = _ratio_points(
        reading, "dram_per_bandwidth", ("read", "decode"), "achieved_TBps", datasheet.bandwidth_tbps, "dram_active"
    )
    tensor, dropped_tensor = _ratio_points(
        reading, "tensor_per_flops", ("matmul", "prefill"), "achieved_TFLOPs", datasheet.tflops, "tensor_active"
    )
    busy = [
        Point("sm_when_busy", phase, 1.0, row["sm_active"])
        for phase, row in reading.counters.items()
        if phase_kind(phase) in ("decode", "prefill") and row["sm_active"] is not None
    ]
    median = statistics.median(p.y for p in busy) if busy else math.nan
    factors = (
        _judged(
            "dram_per_bandwidth",
            through_origin(dram),
            dram,
            "no read or decode phase has both its TB/s and DRAM active",
            "dram_active",
            reading,
        ),
        _judged(
            "tensor_per_flops",
            through_origin(tensor),
            tensor,
            "no matmul or prefill phase has both its TFLOP/s and tensor active",
            "tensor_active",
            reading,
        ),
        _judged("sm_when_busy", median, busy, "no decode or prefill phase read SM active", "sm_active", reading),
    )
    for phase in dropped_dram + dropped_tensor:
        caveats.append(f"{quoted(phase)} left out: its achieved figure over the datasheet's is not a finite number")
    if any("gpm supported: false" in note.lower() for note in reading.notes):
        caveats.append("the reading's notes say GPM is not supported: the profiling fields cannot be read there")
    for fitted in factors:
        if not fitted.fitted:
            caveats.append(f"{fitted.name} left ideal (1.0): {fitted.reason}")
        elif len(fitted.points) < 2:
            caveats.append(f"{fitted.name} rests on one phase ({quoted(fitted.points[0].phase)}): read more")
    caveats += _beyond_datasheet(dram + tensor, datasheet)
    caveats += _idle_offsets(reading)
    caveats += _spinning_quirk(reading)
    return Fit(reading, datasheet, factors, tuple(caveats))


def _beyond_datasheet(points: list[Point], datasheet: Datasheet) -> list[str]:
    over = [p for p in points if p.x > 1.05]
    if not over:
        return []
    phases = ", ".join(quoted(p.phase, 40) for p in over)
    return [
        f"{phases} achieved more than the datasheet figure ({datasheet.bandwidth_tbps:g} TB/s, "
        f"{datasheet.tflops:g} TFLOP/s, {datasheet.basis}): check the figures"
    ]


def _idle_offsets(reading: Reading) -> list[str]:
    idle = next((row for phase, row in reading.counters.items() if phase_kind(phase) == "idle"), None)
    if idle is None:
        return []
    offsets = [
        f"{field} {value:.3f}"
        for field in ("dram_active", "tensor_active", "sm_active")
        if (value := idle[field]) is not None and value > IDLE_OFFSET
    ]
    if not offsets:
        return []
    return [f"idle reads {', '.join(offsets)}: an offset the fits through the origin do not model"]


def _spinning_quirk(reading: Reading) -> list[str]:
    for phase, row in reading.counters.items():
        util, sm = row["gpu_util"], row["sm_active"]
        if phase_kind(phase) == "spinning" and util is not None and util >= 0.9 and sm is not None and sm <= NEAR_ZERO:
            return [
                f"{quoted(phase)}: DCGM_FI_DEV_GPU_UTIL read {util * 100:.0f} % while SM active read {sm:.3f}: "
                "GPU_UTIL is the share of time any kernel runs, not how much of the GPU works (the known quirk; "
                "the simulator's GPU_UTIL is its busy share, SM active its busy share x sm_when_busy)"
            ]
    return []


# --- the report -----------------------------------------------------------------------------------------------


def report_lines(fit: Fit, read_on: str | None = None) -> list[str]:
    device, sheet = fit.reading.device, fit.datasheet
    about = ", ".join(
        part for part in (device.driver and f"driver {device.driver}", device.torch and f"torch {device.torch}") if part
    )
    title = (device.name or "an unnamed GPU") + (f" ({about})" if about else "")
    lines = [
        " ".join(title.split()),
        f"datasheet: {sheet.bandwidth_tbps:g} TB/s, {sheet.tflops:g} TFLOP/s ({sheet.basis})",
        "",
        f"{'factor':<20}{'phase':<46}{'x':>8}{'y':>8}{'model y':>9}{'residual':>10}",
    ]
    for factor in fit.factors:
        for point in factor.points:
            model_y = point.model_y(factor.value)
            phase = " ".join(point.phase.split())[:44]
            lines.append(
                f"{factor.name:<20}{phase:<46}{point.x:>8.3f}{point.y:>8.3f}{model_y:>9.3f}{point.y - model_y:>+10.3f}"
            )
    if not any(f.points for f in fit.factors):
        lines.append("(no phase carries both figures)")
    elif fit.factor("sm_when_busy").points:
        lines.append("(sm_when_busy: x = 1, kernels back to back; its model y is the median)")
    lines.append("")
    model = fit.model(read_on)
    lines.append("model:")
    for factor in fit.factors:
        how = "the median of" if factor.name == "sm_when_busy" else "fitted over"
        said = f"{how} {len(factor.points)} phases" if factor.fitted else "left ideal"
        lines.append(f"  {factor.name} = {factor.value:.3f}  ({said})")
    lines.append(f"  source: {model.source}")
    if fit.caveats:
        lines.append("caveats:")
        lines += [f"  - {caveat}" for caveat in fit.caveats]
    return lines


def report_json(fit: Fit, read_on: str | None = None) -> dict:
    model = fit.model(read_on)
    device = fit.reading.device
    return {
        "device": {"name": device.name, "driver": device.driver, "torch": device.torch},
        "datasheet": {
            "bandwidth_tbps": fit.datasheet.bandwidth_tbps,
            "tflops": fit.datasheet.tflops,
            "basis": fit.datasheet.basis,
        },
        "points": [
            {
                "factor": factor.name,
                "phase": point.phase,
                "x": point.x,
                "y": point.y,
                "model_y": point.model_y(factor.value),
                "residual": point.y - point.model_y(factor.value),
            }
            for factor in fit.factors
            for point in factor.points
        ],
        "model": {
            "dram_per_bandwidth": model.dram_per_bandwidth,
            "tensor_per_flops": model.tensor_per_flops,
            "sm_when_busy": model.sm_when_busy,
            "source": model.source,
        },
        "factors": {
            f.name: {"value": f.value, "fitted": f.fitted, "points": len(f.points), "reason": f.reason}
            for f in fit.factors
        },
        "caveats": list(fit.caveats),
    }


# --- the calibrated model in its module -----------------------------------------------------------------------


def calibrated_block(model: CounterModel) -> str:
    """The lines between the markers of console/sim/gpu_calibration.py, as ruff formats them."""
    fields = [f"    {name}={round(getattr(model, name), 3)!r}," for name in FACTORS]
    source = json.dumps(model.source)  # ASCII, escapes and all: a valid Python string literal
    return "CALIBRATED = CounterModel(\n" + "\n".join(fields) + f"\n    source={source},\n)\n"


def _block_span(text: str) -> tuple[int, int]:
    if text.count(BEGIN_MARK) != 1 or text.count(END_MARK) != 1:
        raise ValueError(f"expected one {BEGIN_MARK.strip()!r} and one {END_MARK.strip()!r} line")
    start = text.index(BEGIN_MARK) + len(BEGIN_MARK)
    end = text.index(END_MARK)
    if end < start:
        raise ValueError(f"expected {BEGIN_MARK.strip()!r} before {END_MARK.strip()!r}")
    return start, end


def with_calibrated(text: str, model: CounterModel) -> str:
    """The module's text with its calibrated model replaced; ValueError when its markers are not there."""
    start, end = _block_span(text)
    return text[:start] + calibrated_block(model) + text[end:]


def calibrated_in(text: str) -> CounterModel:
    """The calibrated model a module's text holds between its markers (read, not run)."""
    start, end = _block_span(text)
    tree = ast.parse(text[start:end])
    call = tree.body[0].value if tree.body and isinstance(tree.body[0], ast.Assign) else None
    if not isinstance(call, ast.Call):
        raise ValueError("expected CALIBRATED = CounterModel(...) between the markers")
    values = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg in (*FACTORS, "source")}
    return replace(IDEAL, **values)
