"""The GPU's own counters during a benchmark step: the replica's dcgm-exporter page, read in the background.

`--dcgm URL` names the page; without it, a simulated replica (`capcon sim`) says where its
page is in its /version answer, and a real vLLM says nothing: then the counters are unknown
and the diagnosis is made from the reruns alone. The page's GPUs are paired with the replica
as the console pairs them (console/fleet/gpus.py): by pod, else by host when unambiguous.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from urllib.parse import urlsplit

from console.bench.diagnosis import GpuFigures
from console.fleet.gpus import ReplicaAddress, ReplicaGpu, gpu_by_replica
from console.sources.dcgm import DcgmSource
from console.targets import target_name

SIM_VERSION_KEY = "capcon_sim"  # the simulator's /version: {"capcon_sim": {"gpu_page": URL}}


def gpu_step(readings: Sequence[ReplicaGpu], note: str = "") -> GpuFigures:
    """Means over a step's readings of the replica's GPUs; a figure unknown in any reading is unknown."""
    known = [r for r in readings if r.gpus]
    if not known:
        why = note or (readings[-1].how if readings else "no reading of the GPU page")
        return GpuFigures(note=why)

    def mean(name: str) -> float | None:
        values = [getattr(r, name) for r in known]
        if any(v is None for v in values):
            return None
        return sum(values) / len(values)

    return GpuFigures(
        sm_active=mean("sm_active"),
        tensor_active=mean("tensor_active"),
        dram_active=mean("dram_active"),
        fb_used_bytes=mean("fb_used_bytes"),
        readings=len(known),
    )


def sim_gpu_page(version: object, base_url: str) -> str | None:
    """The GPU page a simulated replica advertises, when it is on the replica's own host (never elsewhere)."""
    if not isinstance(version, dict):
        return None
    said = version.get(SIM_VERSION_KEY)
    page = said.get("gpu_page") if isinstance(said, dict) else None
    if not isinstance(page, str) or not page.startswith("http://"):
        return None
    if urlsplit(page).hostname != urlsplit(base_url).hostname:
        return None
    return page


class GpuWatch:
    """Reads the page every `every` seconds; `take()` hands over the step's GpuFigures."""

    def __init__(self, page_url: str, replica_url: str, tensor_parallel: int | None, every: float) -> None:
        self.source = DcgmSource([page_url], timeout=max(1.0, every))
        parts = urlsplit(replica_url)
        self.replica = ReplicaAddress(target_name(replica_url), parts.hostname or "")
        self.tensor_parallel = tensor_parallel
        self.every = every
        self.readings: list[ReplicaGpu] = []
        self.error = ""
        self._task: asyncio.Task | None = None

    async def read_once(self) -> None:
        (result,) = await self.source.fetch()
        if result.error:
            self.error = result.error
            return
        paired = gpu_by_replica([self.replica], result.gpus, self.tensor_parallel)
        self.readings.append(paired[self.replica.name])

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.read_once()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="capcon-bench-gpu")

    async def take(self) -> GpuFigures:
        await self.read_once()
        taken, self.readings = self.readings, []
        figures = gpu_step(taken, note=f"the GPU page: {self.error}" if self.error and not taken else "")
        self.error = ""
        return figures

    async def stop(self) -> None:
        """Stop reading in the background (the source stays open for the next step)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def aclose(self) -> None:
        await self.stop()
        await self.source.aclose()
