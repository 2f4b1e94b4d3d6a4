"""A simulated replica's GPUs as NVIDIA dcgm-exporter shows them, derived from the engine's own steps.

Pure: it reads the engine's work per GPU (console/sim/engine.py `gpu_work`) at the times it is
given. Each step of the engine reads the weights and the live KV from device memory
(bandwidth-bound decode) and spends 2 x parameters / TP FLOPs per token (compute-bound
prefill), at the plan's roofline. Over a sampling window, as DCGM averages its profiling fields:

- DRAM active = dram_per_bandwidth x bytes read / (datasheet bandwidth x window): a decode-heavy
  replica reads near its bandwidth efficiency (0.5-0.7), an idle one 0;
- tensor active = tensor_per_flops x FLOPs / (datasheet FLOP/s x window): prefill drives it, a
  batch of decodes barely;
- SM active = sm_when_busy x time a step's kernels ran / window (the host's per-step overhead
  excluded); `DCGM_FI_DEV_GPU_UTIL` and the graphics engine read the busy share itself (GPU_UTIL in
  percent): high on a replica that is busy doing little, as the real one reads;
- memory used is what vLLM reserves at start (the plan's usable share of the GPU), and does
  not move with load: the KV cache is allocated up front, so KV usage is the figure that moves.

The three factors are console/sim/gpu_calibration.py's `CALIBRATED` model unless a window is given another:
1.0 each (the ideal mapping) until a reading of a real GPU's counters at known workloads is folded in by
scripts/gpu_calibration.py (docs/sim.md, 'Calibrating the GPU counters'). Every GPU of a tensor-parallel
replica does an equal share of each step, so they read alike.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from console.sim.gpu_calibration import CALIBRATED, CounterModel
from console.sim.shape import ReplicaShape

WINDOW_SECONDS = 1.0  # DCGM averages profiling fields over its sampling period
MAX_READINGS = 1024  # readers far more often than the window: the oldest go (the window shortens a little)
MIB = 1024 * 1024
DRIVER_VERSION = "580.105.08"
NAMESPACE = "capcon-sim"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Work = Callable[[float], tuple[float, float, float]]  # now -> (busy seconds, bytes read, FLOPs) per GPU


@dataclass(frozen=True)
class GpuShares:
    sm_active: float
    tensor_active: float
    dram_active: float
    busy: float  # share of the window a kernel ran: GPU_UTIL and the graphics engine, whatever SM active reads


def _clamped(value: float) -> float:
    return min(1.0, max(0.0, value))


class GpuWindow:
    """The engine's cumulative work sampled over time; `shares(now)` averages the last window."""

    def __init__(self, shape: ReplicaShape, window: float = WINDOW_SECONDS, model: CounterModel = CALIBRATED) -> None:
        self.shape = shape
        self.window = window
        self.model = model
        self._readings: deque[tuple[float, float, float, float]] = deque()
        self._source: object = None

    def shares(self, now: float, work: Work, source: object = None) -> GpuShares:
        """Shares over the last `window` seconds up to `now` (over what was seen, at first); `source` is the
        engine: a new one (a restart) starts a new series, as the real counters do not carry a dead process' work."""
        if source is not self._source:
            self._readings.clear()
            self._source = source
        busy, read, flops = work(now)
        readings = self._readings
        if readings and now < readings[-1][0]:
            readings.clear()  # time went back: a new clock
        readings.append((now, busy, read, flops))
        while len(readings) > 2 and (readings[1][0] <= now - self.window or len(readings) > MAX_READINGS):
            readings.popleft()
        then, busy0, read0, flops0 = readings[0]
        elapsed = now - then
        if elapsed <= 0:
            return GpuShares(0.0, 0.0, 0.0, 0.0)
        shape, model = self.shape, self.model
        busy_share = (busy - busy0) / elapsed
        bandwidth_share = (read - read0) / (shape.bandwidth_bytes_per_second * elapsed)
        flops_share = (flops - flops0) / (shape.flops_per_second * elapsed)
        return GpuShares(
            sm_active=_clamped(model.sm_when_busy * busy_share),
            tensor_active=_clamped(model.tensor_per_flops * flops_share),
            dram_active=_clamped(model.dram_per_bandwidth * bandwidth_share),
            busy=_clamped(busy_share),
        )


def gpu_uuid(replica: int, gpu: int, seed: int = 0) -> str:
    """A stable UUID in NVIDIA's form for a simulated GPU."""
    digest = hashlib.sha256(f"capcon-sim:{seed}:{replica}:{gpu}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def pod_name(replica: int) -> str:
    return f"capcon-sim-{replica}"


_FAMILIES = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data."),
)


def render_page(shape: ReplicaShape, replica: int, shares: GpuShares, gpu_name: str, seed: int = 0) -> str:
    """dcgm-exporter's /metrics for the replica's GPUs: its families, labels and number formats."""
    total_mib = shape.gpu_memory_bytes / MIB
    used_mib = round(total_mib * shape.usable_memory_share)
    free_mib = max(0, round(total_mib) - used_mib)
    values = {
        "DCGM_FI_DEV_GPU_UTIL": str(round(shares.busy * 100)),
        "DCGM_FI_DEV_FB_FREE": str(free_mib),
        "DCGM_FI_DEV_FB_USED": str(used_mib),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": f"{shares.busy:f}",
        "DCGM_FI_PROF_SM_ACTIVE": f"{shares.sm_active:f}",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": f"{shares.tensor_active:f}",
        "DCGM_FI_PROF_DRAM_ACTIVE": f"{shares.dram_active:f}",
    }
    model = gpu_name.replace("\\", "").replace('"', "").replace("\n", " ")
    labels = [
        f'gpu="{gpu}",UUID="{gpu_uuid(replica, gpu, seed)}",pci_bus_id="00000000:{0x18 + gpu:02X}:00.0",'
        f'device="nvidia{gpu}",modelName="{model}",Hostname="{pod_name(replica)}",'
        f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}",container="vllm",namespace="{NAMESPACE}",pod="{pod_name(replica)}"'
        for gpu in range(shape.tensor_parallel)
    ]
    lines = []
    for name, help_text in _FAMILIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{{{label}}} {values[name]}" for label in labels)
    return "\n".join(lines) + "\n"
