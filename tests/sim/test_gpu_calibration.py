"""Folding a reading of a real GPU's counters into the simulator's counter model.

The readings here are written in the reading script's JSON from a known model (DRAM active 0.9 x the share of
the datasheet bandwidth achieved, tensor active 0.8 x the share of the datasheet FLOP/s, SM active 0.95 while
busy), with seeded noise, in percent as NVML's GPM API gives them: the fit must recover the model, say what it
could not fit and why, refuse a bad file in one line, and the simulated GPUs must read the factors.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from console.metrics.dcgm import parse_dcgm
from console.sim.gpu import GpuWindow, render_page
from console.sim.gpu_calibration import CALIBRATED, IDEAL, IDEAL_SOURCE, CounterModel
from console.sim.gpu_fit import (
    ReadingError,
    calibrated_in,
    catalog_gpu,
    datasheet_for,
    fit_reading,
    parse_reading,
    with_calibrated,
)
from console.sim.shape import replica_shape

from .sim_plans import example_a

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_calibration.py"
MODULE = REPO / "console" / "sim" / "gpu_calibration.py"

H200_TBPS, H200_TFLOPS = 4.8, 989.0
TRUE_DRAM, TRUE_TENSOR, TRUE_SM = 0.9, 0.8, 0.95
SPINNING = "one thread spinning (torch.cuda._sleep)"
GPM = ("gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "hmma_active", "dram_active")


def _script():
    spec = importlib.util.spec_from_file_location("gpu_calibration_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT_MODULE = _script()


def summary_row(phase: str, sm: float, tensor: float, dram: float, util: float = 100) -> dict:
    """A summary row in percent, as the reading script writes it."""
    return {
        "phase": phase,
        "samples": 12,
        "gpu_util": util,
        "mem_copy_util": round(dram * 0.8),
        "power_w": 300.0,
        "sm_clock_mhz": 1980,
        "fb_used_mib": 30000,
        "gr_engine_active": sm,
        "sm_active": sm,
        "sm_occupancy": sm / 3,
        "tensor_active": tensor,
        "hmma_active": tensor,
        "dram_active": dram,
        "fp32_active": 1.0,
        "fp16_active": 0.5,
    }


def reading(seed: int = 7, noise: float = 0.01, spin_sm: float = 0.4) -> dict:
    """A whole reading of an H200 whose counters follow the known model, with Gaussian noise (a share of 1)."""
    rng = random.Random(seed)

    def noisy(value: float) -> float:
        return min(100.0, max(0.0, 100 * (value + rng.gauss(0, noise))))

    summary = [summary_row("idle", 0.0, 0.0, 0.1, util=0)]
    timing = []

    def phase(name: str, *, tbps: float = 0.0, tflops: float = 0.0, busy: float = 1.0) -> None:
        row = {"phase": name, "iterations": 200, "seconds_per_iteration": 0.01}
        if tbps:
            row["achieved_TBps"] = tbps
        if tflops:
            row["achieved_TFLOPs"] = tflops
        timing.append(row)
        summary.append(
            summary_row(
                name,
                noisy(TRUE_SM * busy),
                noisy(TRUE_TENSOR * tflops / H200_TFLOPS),
                noisy(TRUE_DRAM * tbps / H200_TBPS),
            )
        )

    phase("read 8.6 GB (sum)", tbps=4.26)
    phase("bf16 matmul 8192^3", tflops=700.0)
    for batch, tbps in ((1, 2.9), (8, 2.95), (32, 2.76), (128, 3.1), (256, 3.3)):
        phase(f"decode llama-3-8b batch {batch} ctx 2048", tbps=tbps, tflops=batch * 0.03)
    phase("prefill llama-3-8b 2048 tokens", tbps=1.2, tflops=552.0)
    timing.append({"phase": "mixed llama-3-8b 4x decode batch 128 + prefill 2048", "iterations": 50})
    summary.append(summary_row("mixed llama-3-8b 4x decode batch 128 + prefill 2048", 93.0, 40.0, 50.0))
    timing.append({"phase": SPINNING, "iterations": 20, "seconds_per_iteration": 0.05})
    summary.append(summary_row(SPINNING, 100 * spin_sm, 0.0, 0.0, util=100))
    return {
        "device": {"name": "NVIDIA H200", "memory_bytes": 150_000_000_000, "sms": 132, "torch": "2.8.0"},
        "fields": {"sm_active": "DCGM_FI_PROF_SM_ACTIVE", "gpu_util": "DCGM_FI_DEV_GPU_UTIL"},
        "summary": summary,
        "timing": timing,
        "notes": ["GPM supported: True"],
        "samples": [],
    }


def fitted(document: dict, bandwidth: float | None = None, tflops: float | None = None):
    parsed = parse_reading(document)
    return fit_reading(parsed, datasheet_for(parsed.device, bandwidth, tflops))


def run_main(*argv: str) -> tuple[int, str, str]:
    """The script's main in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = SCRIPT_MODULE.main(list(argv))
        except SystemExit as exit_:  # argparse refusing an option
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


# --- the fit ----------------------------------------------------------------------------------------------------


def test_the_fit_recovers_the_model_the_reading_was_written_from():
    fit = fitted(reading(noise=0.01))
    model = fit.model("2026-05-01")
    assert model.dram_per_bandwidth == pytest.approx(TRUE_DRAM, abs=0.02)
    assert model.tensor_per_flops == pytest.approx(TRUE_TENSOR, abs=0.02)
    assert model.sm_when_busy == pytest.approx(TRUE_SM, abs=0.02)
    # The read phase and the five decodes for DRAM; the matmul and prefill for tensor; the mixed phase in none.
    assert [len(fit.factor(name).points) for name in ("dram_per_bandwidth", "tensor_per_flops", "sm_when_busy")] == [
        6,
        2,
        6,
    ]
    assert model.source == "NVIDIA H200, read 2026-05-01"
    assert fit.datasheet.basis == "catalog H200-141GB"


def test_the_script_prints_the_phases_it_used_and_the_model(tmp_path):
    path = tmp_path / "reading.json"
    path.write_text(json.dumps(reading()))
    code, out, err = run_main(str(path), "--read-on", "2026-05-01")
    assert code == 0, err
    table = [line for line in out.splitlines() if line.startswith("dram_per_bandwidth ")]
    assert len(table) == 6 and "read 8.6 GB (sum)" in table[0]
    x, y, model_y, residual = map(float, table[0].split()[-4:])  # the read phase's x, y, model y and residual
    assert x == pytest.approx(4.26 / H200_TBPS, abs=0.001)
    assert residual == pytest.approx(y - model_y, abs=0.002)
    [said] = [line for line in out.splitlines() if line.strip().startswith("dram_per_bandwidth = ")]
    assert float(said.split()[2]) == pytest.approx(TRUE_DRAM, abs=0.02) and "fitted over 6 phases" in said
    assert model_y == pytest.approx(float(said.split()[2]) * x, abs=0.002)
    assert "source: NVIDIA H200, read 2026-05-01" in out

    code, out, _ = run_main(str(path), "--json")
    document = json.loads(out)
    assert document["model"]["tensor_per_flops"] == pytest.approx(TRUE_TENSOR, abs=0.02)
    assert {p["phase"] for p in document["points"] if p["factor"] == "tensor_per_flops"} == {
        "bf16 matmul 8192^3",
        "prefill llama-3-8b 2048 tokens",
    }


def test_percents_become_ratios():
    parsed = parse_reading(reading(noise=0.0))
    idle = parsed.counters["idle"]
    assert idle["dram_active"] == pytest.approx(0.001) and idle["gpu_util"] == 0.0
    spin = parsed.counters[SPINNING]
    assert spin["gpu_util"] == 1.0 and spin["sm_active"] == pytest.approx(0.4)
    read = parsed.counters["read 8.6 GB (sum)"]
    assert read["dram_active"] == pytest.approx(TRUE_DRAM * 4.26 / H200_TBPS)
    assert read["power_w"] == 300.0  # not a percent: as read


def test_null_gpm_values_leave_every_factor_ideal_and_say_why():
    document = reading()
    for row in document["summary"]:
        row.update(dict.fromkeys(GPM))
    document["notes"] = ["GPM supported: False"]
    fit = fitted(document)
    assert fit.model() == IDEAL
    for factor in fit.factors:
        assert not factor.fitted and "null at every phase" in factor.reason
    assert any("GPM is not supported" in caveat for caveat in fit.caveats)
    assert sum("left ideal (1.0)" in caveat for caveat in fit.caveats) == 3


def test_a_factor_without_readings_stays_ideal_while_the_others_fit():
    document = reading()
    document["timing"] = [row for row in document["timing"] if "matmul" not in row["phase"]]
    document["summary"] = [
        {**row, "tensor_active": None} if row["phase"].startswith("prefill") else row for row in document["summary"]
    ]
    fit = fitted(document, tflops=H200_TFLOPS)
    tensor = fit.factor("tensor_per_flops")
    assert (tensor.value, tensor.fitted) == (1.0, False)
    assert "no matmul or prefill phase" in tensor.reason
    assert fit.factor("dram_per_bandwidth").fitted
    assert "(tensor_per_flops left ideal)" in fit.model("2026-05-01").source


def test_the_spinning_threads_gpu_util_quirk_is_reported():
    quirky = fitted(reading(spin_sm=0.01))
    said = [caveat for caveat in quirky.caveats if "DCGM_FI_DEV_GPU_UTIL read 100 %" in caveat]
    assert len(said) == 1 and "SM active read 0.010" in said[0]
    busy = fitted(reading(spin_sm=0.4))  # SM active follows the spinning thread: nothing to say
    assert not any("GPU_UTIL" in caveat for caveat in busy.caveats)


def test_one_point_and_a_wild_fit_are_said():
    document = reading()
    decodes = [row["phase"] for row in document["timing"] if row["phase"].startswith("decode")]
    document["timing"] = [row for row in document["timing"] if row["phase"] not in decodes]
    assert any("dram_per_bandwidth rests on one phase" in caveat for caveat in fitted(document).caveats)

    wild = reading()
    for row in wild["timing"]:
        if "achieved_TBps" in row:
            row["achieved_TBps"] = 0.01  # DRAM active 60-80 % at 0.2 % of the bandwidth: 300x
    dram = fitted(wild).factor("dram_per_bandwidth")
    assert (dram.value, dram.fitted) == (1.0, False) and "outside (0, 2]" in dram.reason


def test_an_idle_offset_and_a_figure_beyond_the_datasheet_are_said():
    document = reading()
    document["summary"][0]["dram_active"] = 6.0
    document["timing"][0]["achieved_TBps"] = 5.5  # above the H200's 4.8 TB/s
    caveats = fitted(document).caveats
    assert any(caveat.startswith("idle reads dram_active 0.060") for caveat in caveats)
    assert any("achieved more than the datasheet figure" in caveat for caveat in caveats)


@pytest.mark.parametrize(
    "name, memory, preset",
    [
        ("NVIDIA H200", None, "H200-141GB"),
        ("NVIDIA H100 80GB HBM3", None, "H100-80GB-SXM"),
        ("NVIDIA H100 PCIe", None, "H100-80GB-PCIe"),
        ("NVIDIA A100-SXM4-80GB", None, "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40e9, None),
        ("NVIDIA L40S", None, "L40S-48GB"),
        ("NVIDIA L4", None, "L4-24GB"),
        ("NVIDIA H100 NVL", None, None),
        ("NVIDIA GB200", None, None),
    ],
)
def test_the_datasheet_comes_from_the_catalog_by_the_devices_name(name, memory, preset):
    gpu = catalog_gpu(name, memory)
    assert (gpu.name if gpu else None) == preset


def test_a_gpu_outside_the_catalog_needs_its_figures_given():
    document = reading()
    document["device"]["name"] = "NVIDIA GB200"
    with pytest.raises(ReadingError, match="expected --bandwidth-tbps and --tflops"):
        fitted(document)
    fit = fitted(document, bandwidth=H200_TBPS, tflops=H200_TFLOPS)
    assert fit.datasheet.basis == "given"
    assert fit.model().dram_per_bandwidth == pytest.approx(TRUE_DRAM, abs=0.02)


# --- bad files ------------------------------------------------------------------------------------------------


def with_string_dram(document: dict) -> dict:
    document["summary"][3]["dram_active"] = "high"
    return document


@pytest.mark.parametrize(
    "content, said",
    [
        ("", "empty; expected the reading script's JSON"),
        ("{not json", "not JSON (line 1 column 2"),
        ("[1, 2]", "the top level: expected an object with device, summary and timing, got a list"),
        (json.dumps(with_string_dram(reading())), 'summary[3] ("decode llama-3-8b batch 1 ctx 2048").dram_active: expected a number 0-100 or null, got a string'),
        (json.dumps({**reading(), "timing": {"phase": "idle"}}), "timing: expected a list of phases, got an object"),
        (None, "no such file"),
    ],
    ids=["empty", "not-json", "wrong-shape", "string-for-number", "timing-not-a-list", "missing"],
)  # fmt: skip
def test_a_bad_file_is_refused_in_one_line_with_exit_2(tmp_path, content, said):
    path = tmp_path / "reading.json"
    if content is not None:
        path.write_text(content)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"{path}: ") and said in done.stderr


# --- writing the model ----------------------------------------------------------------------------------------


def test_write_rewrites_the_calibrated_block_of_the_copy_it_is_given(tmp_path, monkeypatch):
    shipped = MODULE.read_bytes()
    copy = tmp_path / "gpu_calibration.py"
    copy.write_bytes(shipped)
    path = tmp_path / "reading.json"
    path.write_text(json.dumps(reading()))
    code, _, err = run_main(str(path), "--write", "--into", str(copy), "--read-on", "2026-05-01")
    assert code == 0, err
    assert MODULE.read_bytes() == shipped  # the project's own module is left alone
    written = copy.read_text()
    model = calibrated_in(written)
    assert model.dram_per_bandwidth == pytest.approx(TRUE_DRAM, abs=0.02)
    assert model.sm_when_busy == pytest.approx(TRUE_SM, abs=0.02)
    assert model.source == "NVIDIA H200, read 2026-05-01"
    # Only the block between the markers moved, and the module still loads and holds what the block says.
    before, after = shipped.decode().split("# calibrated: begin")[0], written.split("# calibrated: begin")[0]
    assert before == after
    assert written.split("# calibrated: end")[1] == shipped.decode().split("# calibrated: end")[1]
    spec = importlib.util.spec_from_file_location("written_calibration", copy)
    loaded = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, loaded)  # a dataclass looks its module up while it is made
    spec.loader.exec_module(loaded)
    assert (loaded.CALIBRATED.dram_per_bandwidth, loaded.CALIBRATED.source) == (
        model.dram_per_bandwidth,
        model.source,
    )


def test_write_refuses_when_nothing_was_fitted_or_the_target_has_no_block(tmp_path):
    copy = tmp_path / "gpu_calibration.py"
    copy.write_bytes(MODULE.read_bytes())
    nothing = reading()
    for row in nothing["summary"]:
        row.update(dict.fromkeys(GPM))
    path = tmp_path / "reading.json"
    path.write_text(json.dumps(nothing))
    code, _, err = run_main(str(path), "--write", "--into", str(copy))
    assert code == 1 and "no factor was fitted" in err
    assert copy.read_bytes() == MODULE.read_bytes()

    path.write_text(json.dumps(reading()))
    elsewhere = tmp_path / "other.py"
    elsewhere.write_text("X = 1\n")
    code, _, err = run_main(str(path), "--write", "--into", str(elsewhere))
    assert code == 1 and "calibrated: begin" in err
    assert elsewhere.read_text() == "X = 1\n"


def test_a_source_with_quotes_and_newlines_round_trips_through_the_module():
    model = CounterModel(0.91, 0.8, 0.95, 'NVIDIA "H200"\nread\\ 2026-05-01 \ufffd')
    assert calibrated_in(with_calibrated(MODULE.read_text(), model)) == model


# --- the simulated GPUs under a model ---------------------------------------------------------------------------


def test_a_calibrated_model_scales_what_the_simulated_gpus_read():
    shape = replica_shape(example_a())

    def work(now: float) -> tuple[float, float, float]:
        """Busy half the time, reading at 0.6 of the bandwidth and computing at 0.3 of the FLOP/s, from t=0."""
        return 0.5 * now, 0.6 * shape.bandwidth_bytes_per_second * now, 0.3 * shape.flops_per_second * now

    calibrated = CounterModel(dram_per_bandwidth=0.9, tensor_per_flops=0.8, sm_when_busy=0.95, source="a test")
    ideal, scaled = GpuWindow(shape, model=IDEAL), GpuWindow(shape, model=calibrated)
    for now in (0.0, 0.5, 1.0, 1.5):
        plain, read = ideal.shares(now, work), scaled.shares(now, work)
    assert (plain.dram_active, plain.tensor_active, plain.sm_active) == pytest.approx((0.6, 0.3, 0.5))
    assert (read.dram_active, read.tensor_active, read.sm_active) == pytest.approx((0.54, 0.24, 0.475))
    assert read.busy == plain.busy == pytest.approx(0.5)
    # On the page: SM active scaled, GPU_UTIL and the graphics engine the busy share, as a real GPU reads them.
    page = parse_dcgm(render_page(shape, 0, read, "NVIDIA H200"))
    assert len(page.gpus) == shape.tensor_parallel and page.errors == 0
    for gpu in page.gpus:
        assert (gpu.sm_active, gpu.tensor_active, gpu.dram_active) == pytest.approx((0.475, 0.24, 0.54))
        assert (gpu.gpu_util, gpu.gr_engine_active) == pytest.approx((0.5, 0.5))


def test_the_counters_stay_within_0_and_1_under_a_large_factor():
    shape = replica_shape(example_a())

    def work(now: float) -> tuple[float, float, float]:
        return now, 0.7 * shape.bandwidth_bytes_per_second * now, 0.0

    window = GpuWindow(shape, model=CounterModel(2.0, 2.0, 2.0, "a test"))
    window.shares(0.0, work)
    shares = window.shares(1.0, work)
    assert (shares.dram_active, shares.sm_active, shares.tensor_active) == (1.0, 1.0, 0.0)


def test_the_shipped_model_is_sane_honest_and_the_default():
    factors = (CALIBRATED.dram_per_bandwidth, CALIBRATED.tensor_per_flops, CALIBRATED.sm_when_busy)
    assert all(0 < f <= 2 for f in factors)
    if factors == (1.0, 1.0, 1.0):
        assert CALIBRATED.source == IDEAL_SOURCE
    else:
        assert "read " in CALIBRATED.source  # a reading's GPU and day
    assert calibrated_in(MODULE.read_text()) == CALIBRATED
    assert GpuWindow(replica_shape(example_a())).model is CALIBRATED


# --- any file -------------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)
PHASES = st.sampled_from(
    ["idle", "read 8.6 GB (sum)", "bf16 matmul 8192^3", "decode llama-3-8b batch 1 ctx 2048", "decode x",
     "prefill llama-3-8b 2048 tokens", SPINNING, "mixed"]
)  # fmt: skip
PLAUSIBLE = st.none() | st.floats(0, 100, allow_nan=False) | st.floats(0, 5, allow_nan=False) | st.integers(0, 100)
IMPLAUSIBLE = (
    st.floats(-1e6, -0.1) | st.floats(100.1, 1e300) | st.integers(-5, -1) | st.text(max_size=2) | st.booleans()
)


@st.composite
def shaped(draw) -> dict:
    """The reading's shape with plausible values in every field, or all but one (half the time): most phases in
    both lists, so that they fit, some in one only."""
    phases = draw(st.lists(PHASES, min_size=1, max_size=6, unique=True))
    counters = ("sm_active", "tensor_active", "dram_active", "gpu_util")
    summary = [{"phase": p, **{f: draw(PLAUSIBLE) for f in counters}} for p in phases if draw(st.integers(0, 4))]
    achieved = ("achieved_TBps", "achieved_TFLOPs")
    timing = [{"phase": p, **{f: draw(PLAUSIBLE) for f in achieved}} for p in phases if draw(st.integers(0, 4))]
    rows = [(row, counters) for row in summary] + [(row, achieved) for row in timing]
    if rows and draw(st.booleans()):
        row, fields = draw(st.sampled_from(rows))
        row[draw(st.sampled_from(fields))] = draw(IMPLAUSIBLE)
    name = draw(st.sampled_from(["NVIDIA H200", "NVIDIA L4", "Foo", None]))
    return {"device": {"name": name}, "summary": summary, "timing": timing}


def check_any_outcome(folder: Path, document: object, *options: str) -> None:
    """A model with every factor in (0, 2], or exit 2 with one line."""
    path = folder / "reading.json"
    path.write_text(json.dumps(document))
    code, out, err = run_main(str(path), "--json", *options)
    event(f"exit {code}")
    if code == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith(f"{path}: "), err
        return
    assert code == 0, err
    model = json.loads(out)["model"]
    for name in ("dram_per_bandwidth", "tensor_per_flops", "sm_when_busy"):
        assert math.isfinite(model[name]) and 0 < model[name] <= 2


@settings(max_examples=100, deadline=None)
@given(document=JSON_VALUES)
def test_any_json_gives_a_sane_model_or_one_line_and_exit_2(tmp_path_factory, document):
    check_any_outcome(tmp_path_factory.mktemp("any"), document, "--bandwidth-tbps", "4.8", "--tflops", "989")


@settings(max_examples=100, deadline=None)
@given(document=shaped(), given_figures=st.booleans())
def test_a_reading_shaped_file_with_any_values_gives_a_sane_model_or_one_line(
    tmp_path_factory, document, given_figures
):
    options = ("--bandwidth-tbps", "0.3", "--tflops", "121") if given_figures else ()
    check_any_outcome(tmp_path_factory.mktemp("shaped"), document, *options)
