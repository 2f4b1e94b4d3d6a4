"""GPU presets and per-precision byte sizes (docs/method.md, 'Sizing a replica').

Figures are the vendors' datasheet numbers: memory as printed (decimal GB, the
unit the method's arithmetic uses), peak memory bandwidth, and dense tensor
throughput at BF16, FP8 and INT8 where the GPU has them (the datasheets print the
sparse figure first; dense is half of it). Prices are illustrative on-demand rates per GPU-hour: set your own in
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
    # BF16 Tensor Core 1,979 TFLOPS with sparsity, so 989 dense; FP8 and INT8 3,958 with sparsity, 1,979 dense.
    "H100-80GB-SXM": Gpu("H100-80GB-SXM", 80 * GB, 3.35 * TB, 989 * TFLOP, 3.00, 1979 * TFLOP, 1979 * TFLOP),
    # Same datasheet, H100 PCIe column: 80 GB HBM2e, 2 TB/s, BF16 1,513 TFLOPS with sparsity
    # (756 dense), FP8 and INT8 3,026 (1,513 dense). The "80 GB, about 2 TB/s" GPU of worked example A.
    "H100-80GB-PCIe": Gpu("H100-80GB-PCIe", 80 * GB, 2.0 * TB, 756 * TFLOP, 2.50, 1513 * TFLOP, 1513 * TFLOP),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: 141 GB HBM3e, 4.8 TB/s,
    # BF16 1,979 TFLOPS with sparsity (989 dense), FP8 and INT8 3,958 (1,979 dense).
    "H200-141GB": Gpu("H200-141GB", 141 * GB, 4.8 * TB, 989 * TFLOP, 3.80, 1979 * TFLOP, 1979 * TFLOP),
    # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: 80 GB HBM2e, 2,039 GB/s,
    # BF16 Tensor Core 312 TFLOPS dense (624 with sparsity), INT8 624 dense; no FP8 (Ampere).
    "A100-80GB": Gpu("A100-80GB", 80 * GB, 2.039 * TB, 312 * TFLOP, 1.80, None, 624 * TFLOP),
    # NVIDIA L40S datasheet: 48 GB GDDR6 with ECC, 864 GB/s, BF16 Tensor Core 733 TFLOPS
    # with sparsity, 362.05 dense; FP8 and INT8 1,466 with sparsity, 733 dense.
    "L40S-48GB": Gpu("L40S-48GB", 48 * GB, 0.864 * TB, 362.05 * TFLOP, 1.00, 733 * TFLOP, 733 * TFLOP),
    # NVIDIA L4 Tensor Core GPU datasheet: 24 GB GDDR6, 300 GB/s, BF16 Tensor Core
    # 242 TFLOPS with sparsity, 121 dense; FP8 and INT8 485 with sparsity, 242.5 dense.
    "L4-24GB": Gpu("L4-24GB", 24 * GB, 0.300 * TB, 121 * TFLOP, 0.50, 242.5 * TFLOP, 242.5 * TFLOP),
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


GIB = 1024**3


def _large_gpu(gpu: Gpu) -> bool:
    # vLLM's rule (EngineArgs.get_batch_defaults): 70 GiB and more, except A100s, get the larger batch defaults.
    return gpu.memory_bytes >= 70 * GIB and "a100" not in _key(gpu.name)


def default_max_num_seqs(gpu: Gpu) -> int:
    """vLLM's API-server default cap on running requests on `gpu`: 1024 on H100/H200-class memory, else 256."""
    return 1024 if _large_gpu(gpu) else 256


def default_max_num_batched_tokens(gpu: Gpu) -> int:
    """vLLM's API-server default token budget per step: 16384 from 160 GiB, 8192 from 70 GiB (not A100), else 2048."""
    if gpu.memory_bytes >= 160 * GIB:
        return 16384
    return 8192 if _large_gpu(gpu) else 2048


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_BY_KEY = {_key(name): gpu for name, gpu in PRESETS.items()}


def find_preset(name: str) -> Gpu | None:
    """The preset called `name`, ignoring case, spaces, dashes and underscores; None if unknown."""
    return _BY_KEY.get(_key(name))
