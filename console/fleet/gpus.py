"""Which GPUs serve which replica, and the replica's GPU figures from them. Pure.

dcgm-exporter reports GPUs; the console shows replicas. A replica of tensor parallel N runs
on N GPUs. The pairing, in order:

1. by pod: a replica whose pod is known (Prometheus' `pod`/`namespace` labels on its vLLM
   series) takes the GPUs whose `pod` label (dcgm-exporter's Kubernetes mapping) names it;
2. by host: a replica not paired by pod takes the GPUs of its host (the address of the page
   read directly, else the page's `Hostname`/`hostname` label), when that is unambiguous:
   it is the only such replica on the host, and the host's GPUs not held by another replica
   are N (or all of one pod's GPUs when N are held by a single pod and the rest by none);
3. otherwise the replica's GPU figures are unknown, with the reason (never a guess: a
   replica credited with an idle neighbour's GPU would read half as busy as it is).

A replica's shares (SM, tensor, DRAM active) are the mean over its GPUs, its memory used the
sum; a figure unknown on any of its GPUs is unknown for the replica, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from console.metrics.dcgm import GpuReading


@dataclass(frozen=True)
class ReplicaAddress:
    name: str  # as the console names the replica (host:port)
    host: str  # the host of its URL
    pod: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class ReplicaGpu:
    """What one replica's GPUs say: shares 0-1 and bytes, None where unknown; `how` says why."""

    sm_active: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    fb_used_bytes: float | None = None
    gpus: int = 0
    how: str = ""  # "pod NAME", "host NAME", or why nothing was paired

    def as_dict(self) -> dict:
        return {
            "sm_active": self.sm_active,
            "tensor_active": self.tensor_active,
            "dram_active": self.dram_active,
            "fb_used_bytes": self.fb_used_bytes,
            "gpus": self.gpus,
            "paired_by": self.how,
        }


def _mean(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    known = [v for v in values if v is not None]
    return sum(known) / len(known)


def replica_figures(gpus: Sequence[GpuReading], how: str) -> ReplicaGpu:
    """One replica's figures from its GPUs (none: unknown)."""
    if not gpus:
        return ReplicaGpu(how=how)
    used = [g.fb_used_bytes for g in gpus]
    return ReplicaGpu(
        sm_active=_mean([g.sm_active for g in gpus]),
        tensor_active=_mean([g.tensor_active for g in gpus]),
        dram_active=_mean([g.dram_active for g in gpus]),
        fb_used_bytes=None if any(u is None for u in used) else sum(u for u in used if u is not None),
        gpus=len(gpus),
        how=how,
    )


def _held_by(gpu: GpuReading, replica: ReplicaAddress) -> bool:
    if replica.pod is None or gpu.pod != replica.pod:
        return False
    return replica.namespace is None or gpu.namespace is None or gpu.namespace == replica.namespace


def gpu_by_replica(
    replicas: Sequence[ReplicaAddress],
    gpus: Sequence[GpuReading],
    tensor_parallel: int | None = None,
) -> Mapping[str, ReplicaGpu]:
    """Each replica's GPU figures by name (see the module's rules); every replica named gets an entry."""
    out: dict[str, ReplicaGpu] = {}
    claimed: set[tuple[str, str | None]] = set()
    for replica in replicas:
        if replica.pod is None:
            continue
        mine = [g for g in gpus if _held_by(g, replica)]
        if mine:
            claimed.update(g.key for g in mine)
            out[replica.name] = replica_figures(mine, f"pod {replica.pod}")
    left = [r for r in replicas if r.name not in out]
    for replica in left:
        out[replica.name] = _by_host(replica, left, gpus, claimed, tensor_parallel)
    return out


def _by_host(
    replica: ReplicaAddress,
    left: Sequence[ReplicaAddress],
    gpus: Sequence[GpuReading],
    claimed: set[tuple[str, str | None]],
    tensor_parallel: int | None,
) -> ReplicaGpu:
    host = replica.host
    sharing = [r for r in left if r.host == host]
    candidates = [g for g in gpus if g.host == host and g.key not in claimed]
    if not candidates:
        return ReplicaGpu(how=f"no GPU of host {host} on the dcgm-exporter pages")
    if len(sharing) > 1:
        return ReplicaGpu(
            how=f"{len(sharing)} replicas share host {host} and no pod label pairs its GPUs with one of them"
        )
    pods = {g.pod for g in candidates if g.pod is not None}
    if len(pods) == 1:
        (pod,) = pods
        held = [g for g in candidates if g.pod == pod]
        if tensor_parallel is None or len(held) == tensor_parallel:
            return replica_figures(held, f"host {host}, pod {pod}")
    if tensor_parallel is None or len(candidates) == tensor_parallel:
        return replica_figures(candidates, f"host {host}")
    return ReplicaGpu(
        how=f"host {host} has {len(candidates)} GPUs for a replica of tensor parallel {tensor_parallel}: "
        "which ones serve it is unknown (dcgm-exporter's pod labels would say)"
    )
