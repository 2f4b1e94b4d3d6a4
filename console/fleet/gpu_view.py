"""The fleet's GPU counters in its view: each replica's, and the fleet's means. Pure.

A poll reads the fleet's dcgm-exporter pages beside its replicas (console.live.gpu_watch); this
module pairs the GPUs it found with the replicas of the same poll (console.fleet.gpus: by pod,
else by host when unambiguous) and gives the fleet-wide figures. A page that failed leaves its
GPUs out, so the replicas they serve read unknown, never 0; the failures are kept, in words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from console.fleet.gpus import ReplicaAddress, ReplicaGpu, gpu_by_replica
from console.metrics.dcgm import GpuReading
from console.metrics.figures import Figures

# The four figures a replica shows (shares 0-1, bytes); the fleet's are their means over the replicas that know them.
GPU_FIGURES = ("sm_active", "tensor_active", "dram_active", "fb_used_bytes")


@dataclass(frozen=True)
class GpuPages:
    """One read of the fleet's dcgm-exporter pages: every GPU they named, and the pages that failed."""

    gpus: tuple[GpuReading, ...]
    pages: int  # pages read (failed ones included)
    errors: tuple[str, ...] = ()  # "host:port: why" of each page that failed (no secret in it)
    # Replica name -> (pod, namespace), where the caller knows it (a simulated fleet names its pods).
    pods: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    # Replica name -> its GPUs' indices on its host, where the operator named them (the plan's fleet.targets).
    gpu_indices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetGpu:
    """The GPU figures of one poll: per replica by name, and the fleet's means."""

    by_replica: Mapping[str, ReplicaGpu]
    fleet: ReplicaGpu
    pages: int
    errors: tuple[str, ...] = ()

    def replica(self, name: str) -> ReplicaGpu | None:
        return self.by_replica.get(name)

    def fleet_dict(self) -> dict:
        out = {key: getattr(self.fleet, key) for key in GPU_FIGURES}
        known = sum(1 for g in self.by_replica.values() if g.gpus)
        return {
            **out,
            "gpus": self.fleet.gpus,
            "replicas_paired": known,
            "pages": self.pages,
            "page_errors": list(self.errors),
        }


def _host(url: str) -> str:
    try:
        return urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    except ValueError:
        return ""


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def fleet_means(replicas: Sequence[ReplicaGpu]) -> ReplicaGpu:
    """The fleet's figures: each the mean over the replicas that know it (unknown when none does)."""
    paired = [r for r in replicas if r.gpus]
    return ReplicaGpu(
        sm_active=_mean([r.sm_active for r in paired]),
        tensor_active=_mean([r.tensor_active for r in paired]),
        dram_active=_mean([r.dram_active for r in paired]),
        fb_used_bytes=_mean([r.fb_used_bytes for r in paired]),
        gpus=sum(r.gpus for r in paired),
        how=f"mean over {len(paired)} of {len(replicas)} replicas",
    )


def fleet_gpu(replicas: Sequence[Figures], pages: GpuPages, tensor_parallel: int | None = None) -> FleetGpu:
    """The replicas of a poll paired with the GPUs its pages named (console.fleet.gpus' rules)."""
    addresses = []
    for replica in replicas:
        pod, namespace = pages.pods.get(replica.name, (None, None))
        addresses.append(
            ReplicaAddress(replica.name, _host(replica.url), pod, namespace, pages.gpu_indices.get(replica.name, ()))
        )
    paired = gpu_by_replica(addresses, pages.gpus, tensor_parallel)
    if pages.errors and not pages.gpus:
        # Nothing read at all: say why on every replica rather than "no GPU of host ...".
        failed = ReplicaGpu(how=f"dcgm-exporter pages not read: {pages.errors[0]}")
        paired = dict.fromkeys(paired, failed)
    return FleetGpu(paired, fleet_means(list(paired.values())), pages.pages, pages.errors)
