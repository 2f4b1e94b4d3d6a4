"""GPU presets and per-precision byte sizes (docs/method.md, 'Sizing a replica').

Figures are the vendors' datasheet numbers: memory as printed (decimal GB, the
unit the method's arithmetic uses), peak memory bandwidth, and dense BF16
tensor throughput (the datasheets print the sparse figure first; dense is half
of it). Prices are illustrative on-demand rates per GPU-hour: set your own in
the plan (`gpu.price_per_hour`).
"""

from __future__ import annotations

import re

from console.plan.model import Gpu

GB = 1e9
TB = 1e12
TFLOP = 1e12

PRESETS: dict[str, Gpu] = {
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: 80 GB HBM3, 3.35 TB/s,
    # BF16 Tensor Core 1,979 TFLOPS with sparsity, so 989 dense.
    "H100-80GB-SXM": Gpu("H100-80GB-SXM", 80 * GB, 3.35 * TB, 989 * TFLOP, 3.00),
    # Same datasheet, H100 PCIe column: 80 GB HBM2e, 2 TB/s, BF16 1,513 TFLOPS with sparsity
    # (756 dense). The "80 GB, about 2 TB/s" GPU of worked example A (docs/method.md).
    "H100-80GB-PCIe": Gpu("H100-80GB-PCIe", 80 * GB, 2.0 * TB, 756 * TFLOP, 2.50),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: 141 GB HBM3e, 4.8 TB/s,
    # BF16 1,979 TFLOPS with sparsity (989 dense).
    "H200-141GB": Gpu("H200-141GB", 141 * GB, 4.8 * TB, 989 * TFLOP, 3.80),
    # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: 80 GB HBM2e, 2,039 GB/s,
    # BF16 Tensor Core 312 TFLOPS dense (624 with sparsity).
    "A100-80GB": Gpu("A100-80GB", 80 * GB, 2.039 * TB, 312 * TFLOP, 1.80),
    # NVIDIA L40S datasheet: 48 GB GDDR6 with ECC, 864 GB/s, BF16 Tensor Core 733 TFLOPS
    # with sparsity, 362.05 dense.
    "L40S-48GB": Gpu("L40S-48GB", 48 * GB, 0.864 * TB, 362.05 * TFLOP, 1.00),
    # NVIDIA L4 Tensor Core GPU datasheet: 24 GB GDDR6, 300 GB/s, BF16 Tensor Core
    # 242 TFLOPS with sparsity, 121 dense.
    "L4-24GB": Gpu("L4-24GB", 24 * GB, 0.300 * TB, 121 * TFLOP, 0.50),
}

# docs/method.md, 'Sizing a replica': FP16/BF16 2 bytes, INT8/FP8 1, 4-bit about 0.5 plus a little
# for scales. 0.5625 counts a 16-bit scale per group of 32 weights, which lands the expected ranges
# (8B: 4-5 GB, 70B: 35-40 GB, 400B: 200-230 GB).
WEIGHT_BYTES_PER_PARAMETER: dict[str, float] = {
    "fp16": 2.0,
    "bf16": 2.0,
    "int8": 1.0,
    "fp8": 1.0,
    "int4": 0.5625,
}

KV_BYTES_PER_ELEMENT: dict[str, int] = {"fp16": 2, "bf16": 2, "fp8": 1}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_KEY = {_key(name): gpu for name, gpu in PRESETS.items()}


def find_preset(name: str) -> Gpu | None:
    """The preset called `name`, ignoring case, spaces, dashes and underscores; None if unknown."""
    return _BY_KEY.get(_key(name))
