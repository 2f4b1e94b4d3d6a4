"""How a simulated GPU's profiling counters follow from its work: the factors, and where they come from.

The simulator knows what each step of its engine reads and computes; a real GPU's DCGM counters are not that
work divided by the datasheet figures, quite. DRAM active counts the cycles the memory interface is busy, which
a stream of reads keeps busy for a little more or less than its share of peak bandwidth; tensor active counts
the cycles the tensor pipe is issued to; SM active counts the cycles an SM has a warp, which kernels back to back
keep near but not at 1. `CounterModel` holds one factor for each, and `CALIBRATED` is the model the simulator
uses: ideal (every factor 1) until someone reads a real GPU's counters at known workloads and folds the reading
in with `scripts/gpu_calibration.py READING --write` (docs/sim.md, 'Calibrating the GPU counters').
"""

from __future__ import annotations

from dataclasses import dataclass

IDEAL_SOURCE = "ideal: no reading of a real GPU yet"


@dataclass(frozen=True)
class CounterModel:
    dram_per_bandwidth: float  # DRAM active per share of the datasheet bandwidth achieved
    tensor_per_flops: float  # tensor active per share of the datasheet FLOP/s achieved
    sm_when_busy: float  # SM active while the GPU runs kernels back to back
    source: str  # where the factors come from: a reading (GPU, driver, date) or none


IDEAL = CounterModel(dram_per_bandwidth=1.0, tensor_per_flops=1.0, sm_when_busy=1.0, source=IDEAL_SOURCE)

# The model the simulator uses. `scripts/gpu_calibration.py READING --write` rewrites the lines between the two
# marker comments from a reading of a real GPU; by hand, edit the four values there.
# calibrated: begin
CALIBRATED = CounterModel(
    dram_per_bandwidth=1.0,
    tensor_per_flops=1.0,
    sm_when_busy=1.0,
    source="ideal: no reading of a real GPU yet",
)
# calibrated: end
