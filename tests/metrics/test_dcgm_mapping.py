"""GPUs to replicas (console/fleet/gpus.py): by pod, by host when unambiguous, unknown with a reason otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.fleet.gpus import ReplicaAddress, gpu_by_replica
from console.metrics.dcgm import MIB, GpuReading, parse_dcgm, with_host

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"


def gpu(uuid: str, host: str = "n1", pod: str | None = None, sm: float | None = 0.5, **more) -> GpuReading:
    return GpuReading(uuid=uuid, host=host, pod=pod, sm_active=sm, tensor_active=0.2, dram_active=0.6, **more)


def test_a_tensor_parallel_replica_takes_its_pods_gpus_from_a_real_format_page():
    page = parse_dcgm((PAGES / "h100x3_k8s_vllm-tp2.prom").read_text())
    replica = ReplicaAddress("10.0.0.5:8000", "10.0.0.5", pod="llama-70b-decode-0", namespace="llm")
    (figures,) = gpu_by_replica([replica], page.gpus, tensor_parallel=2).values()
    assert figures.gpus == 2 and figures.how == "pod llama-70b-decode-0"
    assert figures.sm_active == pytest.approx((0.734102 + 0.729957) / 2)
    assert figures.fb_used_bytes == 2 * 74166 * MIB
    assert figures.as_dict()["dram_active"] == pytest.approx((0.655210 + 0.651876) / 2)


def test_by_host_a_node_with_one_vllm_pod_and_a_free_gpu():
    page = parse_dcgm((PAGES / "h100x3_k8s_vllm-tp2.prom").read_text())
    replica = ReplicaAddress("node-a7:8000", "node-a7")
    (figures,) = gpu_by_replica([replica], page.gpus, tensor_parallel=2).values()
    assert figures.gpus == 2 and figures.how == "host node-a7, pod llama-70b-decode-0"


def test_by_the_address_the_page_was_read_at():
    gpus = [with_host(gpu("GPU-1", host="exporter-pod-xyz"), "10.0.0.9")]
    (figures,) = gpu_by_replica([ReplicaAddress("10.0.0.9:8000", "10.0.0.9")], gpus, tensor_parallel=1).values()
    assert figures.sm_active == 0.5 and figures.how == "host 10.0.0.9"


def test_more_gpus_on_the_host_than_the_replica_uses_is_unknown_not_diluted():
    gpus = [gpu(f"GPU-{i}") for i in range(8)]
    (figures,) = gpu_by_replica([ReplicaAddress("n1:8000", "n1")], gpus, tensor_parallel=4).values()
    assert figures.sm_active is None and figures.gpus == 0
    assert "8 GPUs for a replica of tensor parallel 4" in figures.how


def test_two_replicas_on_one_host_need_pod_labels():
    gpus = [gpu("GPU-0", pod="a"), gpu("GPU-1", pod="b")]
    unpaired = gpu_by_replica([ReplicaAddress("n1:8000", "n1"), ReplicaAddress("n1:8001", "n1")], gpus, 1)
    assert all(f.sm_active is None and "share host n1" in f.how for f in unpaired.values())
    paired = gpu_by_replica([ReplicaAddress("n1:8000", "n1", pod="a"), ReplicaAddress("n1:8001", "n1", pod="b")], gpus)
    assert [f.how for f in paired.values()] == ["pod a", "pod b"]


def test_unknown_on_one_gpu_is_unknown_for_the_replica_never_zero():
    gpus = [gpu("GPU-0", pod="a"), gpu("GPU-1", pod="a", sm=None)]
    (figures,) = gpu_by_replica([ReplicaAddress("n1:8000", "n1", pod="a")], gpus, 2).values()
    assert figures.sm_active is None and figures.tensor_active == pytest.approx(0.2)
    assert figures.fb_used_bytes is None


def test_a_replica_without_gpus_on_the_pages_says_so():
    (figures,) = gpu_by_replica([ReplicaAddress("n2:8000", "n2")], [gpu("GPU-0")]).values()
    assert figures.as_dict() == {
        "sm_active": None,
        "tensor_active": None,
        "dram_active": None,
        "fb_used_bytes": None,
        "gpus": 0,
        "paired_by": "no GPU of host n2 on the dcgm-exporter pages",
    }


def test_namespaces_keep_same_named_pods_apart():
    gpus = [gpu("GPU-0", pod="vllm-0", namespace="a", sm=0.1), gpu("GPU-1", pod="vllm-0", namespace="b", sm=0.9)]
    (figures,) = gpu_by_replica([ReplicaAddress("x:8000", "x", pod="vllm-0", namespace="b")], gpus).values()
    assert figures.sm_active == 0.9 and figures.gpus == 1


# ---- GPUs named by the operator (the plan's fleet.targets {url, gpus: [...]}) ----


def test_two_tensor_parallel_replicas_on_one_host_take_the_gpus_the_plan_names():
    gpus = [gpu(f"GPU-{i}", host="n1", gpu=str(i), sm=i / 10) for i in range(8)]
    replicas = [
        ReplicaAddress("n1:8000", "n1", gpus=("2", "3")),
        ReplicaAddress("n1:8001", "n1", gpus=("4", "5")),
        ReplicaAddress("n1:8002", "n1"),  # not named: the host's four other GPUs are too many for it
    ]
    paired = gpu_by_replica(replicas, gpus, tensor_parallel=2)
    assert paired["n1:8000"].sm_active == pytest.approx(0.25) and paired["n1:8000"].how == "host n1, GPU 2, 3"
    assert paired["n1:8001"].sm_active == pytest.approx(0.45) and paired["n1:8001"].gpus == 2
    assert paired["n1:8002"].sm_active is None and "4 GPUs for a replica of tensor parallel 2" in paired["n1:8002"].how


def test_a_named_gpu_missing_from_the_pages_leaves_the_replica_unknown_with_which():
    gpus = [gpu("GPU-0", gpu="0"), gpu("GPU-1", gpu="1")]
    (figures,) = gpu_by_replica([ReplicaAddress("n1:8000", "n1", gpus=("1", "7"))], gpus).values()
    assert figures.sm_active is None and figures.gpus == 0
    assert "GPU 7 of host n1 not on the dcgm-exporter pages" in figures.how


def test_a_named_gpu_split_by_mig_gives_all_its_instances():
    gpus = [gpu(f"GPU-0-{i}", gpu="0", mig_instance=str(i), sm=0.2 * (i + 1)) for i in range(3)]
    gpus.append(gpu("GPU-1", gpu="1", sm=0.9))
    (figures,) = gpu_by_replica([ReplicaAddress("n1:8000", "n1", gpus=("0",))], gpus).values()
    assert figures.gpus == 3 and figures.sm_active == pytest.approx(0.4)


def test_named_gpus_win_over_pod_labels_and_a_gpu_is_never_counted_for_two():
    gpus = [gpu("GPU-0", gpu="0", pod="a"), gpu("GPU-1", gpu="1", pod="a")]
    named = ReplicaAddress("n1:8000", "n1", pod="a", gpus=("0",))
    twice = ReplicaAddress("n1:8001", "n1", gpus=("0",))
    paired = gpu_by_replica([named, twice], gpus)
    assert paired["n1:8000"].gpus == 1 and paired["n1:8000"].how == "host n1, GPU 0"
    assert paired["n1:8001"].gpus == 0 and "named for another replica" in paired["n1:8001"].how


hosts = st.sampled_from(["n1", "n2"])
pods = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
indices = st.sampled_from(["0", "1", "2", "3"])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(hosts, pods, indices, st.one_of(st.none(), st.sampled_from(["0", "1"]))), max_size=10),
    st.lists(st.tuples(hosts, pods, st.lists(indices, max_size=2, unique=True)), max_size=6),
    st.one_of(st.none(), st.integers(1, 4)),
)
def test_no_gpu_is_ever_credited_to_two_replicas(gpu_rows, replica_rows, tensor_parallel):
    """Whatever the pages and the names say, the replicas' GPU counts never exceed the GPUs there are, and a
    replica paired with GPUs has every figure of theirs (never a 0 for an unknown)."""
    readings = list(
        {
            (host, index, mig): gpu(f"GPU-{host}-{index}-{mig}", host=host, pod=pod, gpu=index, mig_instance=mig)
            for host, pod, index, mig in gpu_rows
        }.values()
    )
    replicas = [
        ReplicaAddress(f"{host}:{8000 + i}", host, pod=pod, gpus=tuple(named))
        for i, (host, pod, named) in enumerate(replica_rows)
    ]
    paired = gpu_by_replica(replicas, readings, tensor_parallel)
    assert set(paired) == {r.name for r in replicas}
    assert sum(f.gpus for f in paired.values()) <= len(readings)
    for figures in paired.values():
        assert (figures.gpus == 0) == (figures.sm_active is None), figures
        assert figures.how
