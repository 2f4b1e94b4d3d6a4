"""The GPU counters in the fleet's view: pairing with the poll's replicas, the fleet's means, unknown never 0,
and the saturation flag naming the GPU figure that led to its reading (memory-bound, compute-bound)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.fleet.flags import Thresholds, gpu_bound
from console.fleet.gpu_view import GpuPages, fleet_gpu
from console.fleet.gpus import ReplicaGpu
from console.fleet.view import advance
from console.metrics.dcgm import GpuReading
from console.metrics.figures import Figures
from tests.fleet.builders import fleet, replica

T = Thresholds()


def at(name: str, url: str, **figures) -> Figures:
    return replace(replica(name, **figures), url=url)


def gpu(uuid: str, host: str, pod: str | None = None, **shares) -> GpuReading:
    return GpuReading(uuid=uuid, host=host, pod=pod, **shares)


def test_replicas_pair_by_host_and_by_the_pods_a_caller_names():
    replicas = [
        at("a", "http://10.0.0.1:8000/metrics"),
        at("b", "http://10.0.0.9:8000/metrics"),
        at("c", "http://10.0.0.9:8001/metrics"),
    ]
    pages = GpuPages(
        (
            gpu("G1", "10.0.0.1", sm_active=0.8, tensor_active=0.2, dram_active=0.6, fb_used_bytes=1e9),
            gpu("G2", "10.0.0.9", pod="pod-b", sm_active=0.2, tensor_active=0.1, dram_active=0.1, fb_used_bytes=2e9),
            gpu("G3", "10.0.0.9", pod="pod-c"),  # a page without the profiling fields
        ),
        pages=2,
        pods={"b": ("pod-b", None), "c": ("pod-c", None)},
    )
    paired = fleet_gpu(replicas, pages, tensor_parallel=1)
    assert paired.replica("a").how == "host 10.0.0.1" and paired.replica("a").dram_active == 0.6
    assert paired.replica("b").how == "pod pod-b" and paired.replica("b").sm_active == 0.2
    unknown = paired.replica("c")
    assert unknown.gpus == 1 and (unknown.sm_active, unknown.dram_active, unknown.fb_used_bytes) == (None, None, None)
    # The fleet's figures are means over the replicas that know them; a replica without them is not a 0.
    assert paired.fleet.sm_active == pytest.approx(0.5) and paired.fleet.fb_used_bytes == pytest.approx(1.5e9)
    assert paired.fleet_dict()["replicas_paired"] == 3 and paired.fleet_dict()["pages"] == 2


def test_a_fleet_whose_pages_all_failed_reads_unknown_with_the_reason():
    paired = fleet_gpu([replica("a")], GpuPages((), pages=1, errors=("gpu-0:9400: HTTP 500",)))
    assert paired.replica("a").sm_active is None and "HTTP 500" in paired.replica("a").how
    assert paired.fleet.sm_active is None and paired.fleet.gpus == 0


@pytest.mark.parametrize(
    "kv, shares, words",
    [
        (0.95, {"dram_active": 0.5, "sm_active": 0.99}, "memory-bound: DRAM active 50 %"),  # at the threshold
        (
            0.40,
            {"dram_active": 0.49, "sm_active": 0.9, "tensor_active": 0.7},
            "compute-bound: SM active 90 % with KV 40 %",
        ),
        (
            0.40,
            {"dram_active": 0.2, "sm_active": 0.3, "tensor_active": 0.6},
            "compute-bound: tensor active 60 % with KV 40 %",
        ),
        (0.86, {"dram_active": 0.2, "sm_active": 0.9}, ""),  # busy, but the KV cache is not free
        (0.40, {"dram_active": 0.2, "sm_active": 0.4, "tensor_active": 0.1}, ""),  # nothing near a limit
        (0.40, {}, ""),  # the page carried no profiling field: nothing to say
        (None, {"sm_active": 0.9}, ""),  # KV unknown: compute-bound cannot be told
    ],
)
def test_the_gpu_reading_names_the_figure_that_led_there(kv, shares, words):
    assert gpu_bound(kv, ReplicaGpu(gpus=1, **shares), T) == words


def test_the_saturation_flag_says_memory_bound_from_the_gpu_counters():
    figures = fleet(at("a", "http://h:8000/metrics", waiting=5.0, kv_usage=0.5, preemptions_per_second=0.0))
    pages = GpuPages((gpu("G1", "h", sm_active=1.0, tensor_active=0.05, dram_active=0.66),), pages=1)
    view = advance(None, "f", figures, None, 1000.0, gpus=pages)
    (pending,) = [p for p in view.pending if p.kind == "saturation"]
    assert pending.why == "5 waiting, KV 50 %, memory-bound: DRAM active 66 %"
    without = advance(None, "f", figures, None, 1000.0)
    assert [p.why for p in without.pending if p.kind == "saturation"] == ["5 waiting, KV 50 %"]
    assert view.row("a").gpu.dram_active == 0.66 and without.row("a").gpu is None and without.gpu is None


share = st.one_of(st.none(), st.floats(0.0, 1.0))


@given(kv=share, sm=share, tensor=share, dram=share)
def test_any_gpu_figures_give_one_reading_or_none(kv, sm, tensor, dram):
    words = gpu_bound(kv, ReplicaGpu(sm_active=sm, tensor_active=tensor, dram_active=dram, gpus=1), T)
    assert words in ("",) or words.startswith(("memory-bound: DRAM", "compute-bound: "))
    if words.startswith("compute"):
        assert kv is not None and kv < T.kv_clear and (dram is None or dram < T.dram_bound_share)
