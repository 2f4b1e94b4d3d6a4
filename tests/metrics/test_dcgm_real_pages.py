"""The parser on real dcgm-exporter pages captured in the field, where they are found beside the repository.

They are not part of the project (several carry no licence), so a fresh clone skips this file;
the project's own pages (tests/fixtures/dcgm/) hold the same quirks for every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from console.metrics.dcgm import MIB, parse_dcgm

REAL = Path(__file__).resolve().parents[3] / "shared" / "dcgm" / "pages"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="real dcgm-exporter pages not found beside the repository")


def read(name: str):
    return parse_dcgm((REAL / name).read_text(errors="replace"))


def test_every_real_page_parses_with_its_gpus_named():
    for path in sorted(REAL.glob("*.prom")):
        parsed = parse_dcgm(path.read_text(errors="replace"))
        assert parsed.gpus, path.name
        assert all(g.uuid.startswith("GPU-") for g in parsed.gpus), path.name


def test_a800_mig_and_profiling_ratios():
    parsed = read("a800x8_mig-gpu0_dcp_johns-blog.prom")
    instances = [g for g in parsed.gpus if g.mig_instance is not None]
    assert {g.mig_instance for g in instances} == {"3", "5", "6"} and len({g.uuid for g in instances}) == 1
    assert all(g.gpu_util is None for g in instances)  # MIG instances carry no GPU_UTIL
    assert all(g.tensor_active is not None and 0 <= g.tensor_active <= 1 for g in parsed.gpus)
    assert all(g.sm_active is None for g in parsed.gpus)  # SM active not in that counters file
    assert len(parsed.gpus) == 3 + 7


def test_lowercase_hostname_and_pods():
    parsed = read("mixed-ada-a30mig_k8s_lowercase-hostname_pr736.excerpt.prom")
    assert {g.host for g in parsed.gpus} == {"dcgm-exporter-wwwjh"}
    assert any(g.pod and g.pod.startswith("triton-server") for g in parsed.gpus)


def test_h100_node_with_a_vllm_pod():
    parsed = read("h100x8_k8s-vllm-dynamo_aicr.prom")
    assert len(parsed.gpus) == 8
    assert sum(1 for g in parsed.gpus if g.pod) == 1
    assert all(g.gpu_util is not None for g in parsed.gpus)


def test_gb200_memory_in_bytes():
    parsed = read("gb200x4_eks_aicr-format.prom")
    assert all(g.fb_free_bytes is not None and g.fb_free_bytes > 100_000 * MIB for g in parsed.gpus)
