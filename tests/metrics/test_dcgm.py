"""dcgm-exporter's page -> per-GPU readings, on the project's own pages written in the exporter's format.

Units as the exporter prints them (profiling ratios 0-1, GPU_UTIL percent, FB in MiB, clocks in
MHz) come out as shares, bytes and Hz; a field the page lacks is None, never 0; MIG instances
are told apart by UUID plus instance id; a value that is not a number loses one figure, not the page.
"""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.metrics.dcgm import MIB, DcgmPageError, GpuReading, parse_dcgm

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"


def page(name: str):
    return parse_dcgm((PAGES / name).read_text())


def by_gpu(parsed) -> dict[tuple[str, str | None], GpuReading]:
    return {(g.gpu, g.mig_instance): g for g in parsed.gpus}


def test_a_kubernetes_node_with_profiling_fields():
    parsed = page("h100x3_k8s_vllm-tp2.prom")
    assert parsed.errors == 0 and not parsed.cut
    gpus = by_gpu(parsed)
    assert sorted(gpus) == [("0", None), ("1", None), ("2", None)]
    busy = gpus[("0", None)]
    assert busy.uuid == "GPU-0a1b2c3d-0000-4000-8000-000000000001"
    assert busy.model_name == "NVIDIA H100 80GB HBM3"
    assert busy.host == "node-a7"
    assert (busy.pod, busy.namespace, busy.container) == ("llama-70b-decode-0", "llm", "vllm")
    assert busy.sm_active == pytest.approx(0.734102)
    assert busy.tensor_active == pytest.approx(0.182004)
    assert busy.dram_active == pytest.approx(0.655210)
    assert busy.gr_engine_active == pytest.approx(0.912345)
    assert busy.gpu_util == 1.0  # percent 100 -> share 1
    assert busy.fb_used_bytes == 74166 * MIB
    assert busy.fb_free_bytes == 6790 * MIB
    assert busy.power_watts == pytest.approx(512.331)
    assert busy.sm_clock_hz == 1980e6 and busy.mem_clock_hz == 2619e6
    idle = gpus[("2", None)]
    # pod="" is no pod; an idle GPU reads 0, which is a reading, not unknown.
    assert idle.pod is None and idle.namespace is None and idle.container is None
    assert idle.sm_active == 0.0 and idle.fb_used_bytes == 0.0


def test_mig_instances_lowercase_hostname_and_a_value_that_is_not_a_number():
    parsed = page("a100x2_mig_lowercase-hostname.prom")
    gpus = by_gpu(parsed)
    assert sorted(gpus) == [("0", "1"), ("0", "2"), ("1", None)]
    first, second, plain = gpus[("0", "1")], gpus[("0", "2")], gpus[("1", None)]
    assert first.uuid == second.uuid and first.key != second.key
    assert first.mig_profile == "3g.40gb" and plain.mig_profile is None
    assert first.host == plain.host == "dcgm-exporter-x7k2q"
    # MIG instances have no GPU_UTIL: unknown, not 0.
    assert first.gpu_util is None and second.gpu_util is None and plain.gpu_util == pytest.approx(0.97)
    # The instance's DRAM value was not a number: that one figure is unknown and counted; the page stays.
    assert first.dram_active is None and first.tensor_active == pytest.approx(0.412)
    assert plain.dram_active == pytest.approx(0.301777)
    assert parsed.errors == 1 and parsed.first_error.startswith("DCGM_FI_PROF_DRAM_ACTIVE")
    # A field the page does not carry at all is unknown for every GPU.
    assert all(g.sm_active is None for g in parsed.gpus)
    assert "DCGM_FI_PROF_SM_ACTIVE" not in parsed.fields and "DCGM_FI_PROF_DRAM_ACTIVE" in parsed.fields


def test_default_counters_have_no_profiling_fields():
    (t4,) = page("t4x1_default-counters.prom").gpus
    assert (t4.sm_active, t4.tensor_active, t4.dram_active) == (None, None, None)
    assert t4.gpu_util == 1.0 and t4.fb_used_bytes == 14819 * MIB and t4.host == "3f2a9c81d0e4"


LABELS = 'gpu="0",UUID="GPU-x",Hostname="h"'


@pytest.mark.parametrize(
    "line, expected",
    [
        (f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} 0.5 1700000000000", 0.5),  # a timestamp after the value
        (f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} 1.0000004", 1.0),  # six decimals rounding past 1
        (f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} 42", None),  # a percent where a ratio belongs: not a ratio
        (f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} -0.1", None),
        (f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} NaN", None),
        (f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} +Inf", None),
        (f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} 0.5 soon", None),
    ],
)
def test_values_out_of_their_range_are_unknown(line, expected):
    parsed = parse_dcgm(f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 40\n{line}\n")
    (gpu,) = parsed.gpus
    assert gpu.sm_active == expected
    assert parsed.errors == (0 if expected is not None else 1)


def test_a_page_cut_short_does_not_read_its_last_line():
    parsed = parse_dcgm(f"DCGM_FI_DEV_FB_USED{{{LABELS}}} 100\nDCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} 0.7")
    (gpu,) = parsed.gpus
    assert parsed.cut and gpu.sm_active is None and gpu.fb_used_bytes == 100 * MIB


def test_a_line_without_uuid_is_an_error_and_a_repeated_series_counts_once():
    parsed = parse_dcgm(
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0"} 0.1\n'
        f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} 0.2\n"
        f"DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} 0.9\n"
    )
    (gpu,) = parsed.gpus
    assert gpu.sm_active == 0.2 and parsed.errors == 1


@pytest.mark.parametrize("text", ["<html>Not Found</html>\n", "vllm:num_requests_running 3\n", "# HELP x y\n"])
def test_a_page_that_is_not_dcgm_exporters_is_refused_clearly(text):
    with pytest.raises(DcgmPageError, match="no DCGM_FI_ sample"):
        parse_dcgm(text)


def test_an_empty_page_has_no_gpus():
    assert parse_dcgm("").gpus == ()


FIGURES = [f.name for f in fields(GpuReading) if f.type in ("float | None",)]
_line_parts = st.sampled_from(
    [
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_",
        "{",
        "}",
        '"',
        "\\",
        "=",
        ",",
        " ",
        "\n",
        'UUID="GPU-1"',
        'GPU_I_ID="1"',
        'hostname=""',
        "0.5",
        "1e308",
        "-1",
        "NaN",
        "ERROR - FAILED TO CONVERT TO STRING",
        "# HELP ",
        "\x00",
        "é",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(_line_parts, max_size=60).map("".join), st.text(max_size=400)))
def test_hostile_text_gives_readings_in_range_or_the_modules_own_error(text):
    try:
        parsed = parse_dcgm(text)
    except DcgmPageError:
        return
    for gpu in parsed.gpus:
        assert gpu.uuid
        for name in FIGURES:
            value = getattr(gpu, name)
            assert value is None or (math.isfinite(value) and value >= 0)
        for share in (gpu.sm_active, gpu.tensor_active, gpu.dram_active, gpu.gpu_util):
            assert share is None or share <= 1.0


def test_a_big_page_reads_within_a_cpu_budget():
    """A page of 20,000 GPUs' lines reads in one pass: bounded work, no quadratic step."""
    from tests.cpu_time import HANG_CPU_SECONDS, cpu_seconds

    text = "".join(
        f'DCGM_FI_PROF_SM_ACTIVE{{gpu="{i}",UUID="GPU-{i}",Hostname="h{i % 7}"}} 0.{i % 10}\n' for i in range(20_000)
    )
    before = cpu_seconds()
    parsed = parse_dcgm(text)
    assert cpu_seconds() - before < HANG_CPU_SECONDS
    assert len(parsed.gpus) == 20_000
