"""Which GPUs serve which replica, and the replica's GPU figures from them. Pure.

dcgm-exporter reports GPUs; the console shows replicas. A replica of tensor parallel N runs
on N GPUs. The pairing, in order:

0. by name: a replica whose GPUs the operator named (the plan's `{url, gpus: [2, 3]}`) takes
   those GPUs (by dcgm-exporter's `gpu` index, every MIG instance of each) of its host;
1. by pod: a replica whose pod is known (the only replica in it) (Prometheus' `pod`/`namespace` labels on its vLLM
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
    gpus: tuple[str, ...] = ()  # its GPUs' indices on its host, where the operator named them


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


class _Index:
    """The pages' GPUs by pod and by host, so each replica finds its own without a pass over every GPU."""

    def __init__(self, gpus: Sequence[GpuReading]) -> None:
        self.by_pod: dict[str, list[GpuReading]] = {}
        self.by_host: dict[str | None, list[GpuReading]] = {}
        for gpu in gpus:
            if gpu.pod is not None:
                self.by_pod.setdefault(gpu.pod, []).append(gpu)
            self.by_host.setdefault(gpu.host, []).append(gpu)

    def held_by_pod(self, replica: ReplicaAddress) -> list[GpuReading]:
        if replica.pod is None:
            return []
        return [
            g
            for g in self.by_pod.get(replica.pod, ())
            if replica.namespace is None or g.namespace is None or g.namespace == replica.namespace
        ]


def gpu_by_replica(
    replicas: Sequence[ReplicaAddress],
    gpus: Sequence[GpuReading],
    tensor_parallel: int | None = None,
) -> Mapping[str, ReplicaGpu]:
    """Each replica's GPU figures by name (see the module's rules); every replica named gets an entry."""
    index = _Index(gpus)
    out: dict[str, ReplicaGpu] = {}
    claimed: set[tuple[str, str | None]] = set()
    for replica in replicas:
        if replica.gpus:
            out[replica.name] = _by_name(replica, index, claimed)
    in_pod: dict[tuple[str, str | None], int] = {}
    for replica in replicas:
        if replica.name not in out and replica.pod is not None:
            in_pod[replica.pod, replica.namespace] = in_pod.get((replica.pod, replica.namespace), 0) + 1
    for replica in replicas:
        if replica.name in out or replica.pod is None:
            continue
        mine = [g for g in index.held_by_pod(replica) if g.key not in claimed]
        if mine and in_pod[replica.pod, replica.namespace] > 1:
            # Two servers in one pod: its GPUs cannot be split between them by the pod label.
            out[replica.name] = ReplicaGpu(
                how=f"{in_pod[replica.pod, replica.namespace]} replicas in pod {replica.pod}: "
                "which of its GPUs serve which is unknown (the plan's fleet.targets can name their GPUs)"
            )
            continue
        if mine:
            claimed.update(g.key for g in mine)
            out[replica.name] = replica_figures(mine, f"pod {replica.pod}")
    left = [r for r in replicas if r.name not in out]
    sharing: dict[str, int] = {}
    for replica in left:
        sharing[replica.host] = sharing.get(replica.host, 0) + 1
    for replica in left:
        out[replica.name] = _by_host(replica, sharing[replica.host], index, claimed, tensor_parallel)
    return out


def _by_name(replica: ReplicaAddress, index: _Index, claimed: set[tuple[str, str | None]]) -> ReplicaGpu:
    host = replica.host
    on_host = index.by_host.get(host, [])
    mine = [g for g in on_host if g.gpu in replica.gpus]
    taken = sorted({g.gpu for g in mine if g.key in claimed})
    if taken:  # named for another replica too: its work is not counted twice
        return ReplicaGpu(how=f"GPU {', '.join(taken)} of host {host} named for another replica as well")
    missing = [n for n in replica.gpus if not any(g.gpu == n for g in mine)]
    named = ", ".join(replica.gpus)
    if missing:
        return ReplicaGpu(
            how=f"GPU {', '.join(missing)} of host {host} not on the dcgm-exporter pages (the plan names GPU {named})"
        )
    claimed.update(g.key for g in mine)
    return replica_figures(mine, f"host {host}, GPU {named}")


def _by_host(
    replica: ReplicaAddress,
    sharing: int,
    index: _Index,
    claimed: set[tuple[str, str | None]],
    tensor_parallel: int | None,
) -> ReplicaGpu:
    host = replica.host
    candidates = [g for g in index.by_host.get(host, ()) if g.key not in claimed]
    if not candidates:
        return ReplicaGpu(how=f"no GPU of host {host} on the dcgm-exporter pages")
    if sharing > 1:
        return ReplicaGpu(
            how=f"{sharing} replicas share host {host} and no pod label pairs its GPUs with one of them "
            "(the plan's fleet.targets can name each one's pod or GPUs)"
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
        "which ones serve it is unknown (dcgm-exporter's pod labels, or the plan's fleet.targets, would say)"
    )
