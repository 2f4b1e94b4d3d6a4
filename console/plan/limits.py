"""What a plan's figures can be: one table of bounds, checked by the loader (console/plan/schema.py).

Every number a plan gives is bounded to what a fleet can be, so that a mistyped or hostile
value (a 400-digit integer, 1e300 rps, a capacity of 1e-300) is refused with one line naming
it and the bound, instead of sizing a fleet of 10^300 replicas. The bounds are generous: each
is one or more orders of magnitude past today's largest models, GPUs and fleets. Units are
the plan's own (GB, TB/s, TFLOP/s, minutes), as the YAML writes them.

A bound is checked as `low <= value <= high` (`low < value` where `low_open`). A value above
the bound reads "got 1e300; expected at most 1000000 requests per second"; any other problem
gives the whole range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    low: float
    high: float
    unit: str = ""  # what the number counts, after it in messages: "requests per second"
    low_open: bool = False  # the low bound itself is refused (a number > 0)
    whole: bool = False  # a whole number (layers, heads)

    def holds(self, value: float) -> bool:
        """`value` within the bound; exact for Python ints of any size (compared, never converted)."""
        above_low = value > self.low if self.low_open else value >= self.low
        return above_low and value <= self.high

    def expected(self, what: str | None = None) -> str:
        """'a number > 0 and <= 1000000 requests per second', 'a whole number >= 1 and <= 1000 layers'."""
        what = what or ("a whole number" if self.whole else "a number")
        low = f"> {number(self.low)}" if self.low_open else f">= {number(self.low)}"
        return f"{what} {low} and <= {number(self.high)}{self._unit()}"

    def at_most(self) -> str:
        return f"at most {number(self.high)}{self._unit()}"

    def _unit(self) -> str:
        return f" {self.unit}" if self.unit else ""


def number(value: float) -> str:
    """A number as a message shows it: 1000000, 0.001, 1e14, 1e300, nan (never 1e+06 or 300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) < 10**7:
            return str(value)
        if value.bit_length() > 1000:  # past float; str() of it may refuse (4,300 digits)
            sign = "a negative" if value < 0 else "a"
            return f"{sign} number of about {int(value.bit_length() * 0.30103):,} digits"
        value = float(value)
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e7:  # float(): a bool has no is_integer before Python 3.12
        return str(int(value))
    mantissa, e, exponent = f"{value:g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if e else mantissa


RPS = Limit(0.0, 1e6, "requests per second")
TOKENS = Limit(1.0, 1e8, "tokens")
SHARE = Limit(0.0, 1.0, low_open=True)
EFFICIENCY = Limit(0.01, 1.0, "(a share of the datasheet figure)")

# The table: key path (list items written []) -> bound. README "Plan files" shows the same table.
LIMITS: dict[str, Limit] = {
    "model.parameters": Limit(1e6, 1e14, "parameters"),
    "model.layers": Limit(1, 1000, "layers", whole=True),
    "model.kv_heads": Limit(1, 1024, "KV heads", whole=True),
    "model.head_dim": Limit(1, 4096, whole=True),
    "model.attention_heads": Limit(1, 4096, "attention heads", whole=True),
    "model.hidden_size": Limit(1, 1_000_000, whole=True),
    "model.max_model_len": Limit(1, 1e8, "tokens", whole=True),
    "gpu.memory_gb": Limit(0.0, 10_000, "GB", low_open=True),
    "gpu.bandwidth_tb_s": Limit(0.001, 1000, "TB/s"),
    "gpu.tflops_bf16": Limit(0.001, 100_000, "TFLOP/s"),
    "gpu.price_per_hour": Limit(0.0, 10_000, "dollars per GPU-hour"),
    "replica.usable_memory_share": SHARE,
    "replica.overhead_gb_per_gpu": Limit(0.0, 10_000, "GB"),
    "replica.bandwidth_efficiency": EFFICIENCY,
    "replica.compute_efficiency": EFFICIENCY,
    "replica.max_num_seqs": Limit(1, 16_384, "requests", whole=True),
    "replica.block_size": Limit(1, 1024, "tokens", whole=True),
    "workloads[].arrivals": RPS,  # each hour's busiest-five-minute rps
    "workloads[].tokens": TOKENS,  # input_mean, input_p95, output_mean, output_max
    "workloads[].targets.ttft_p95_seconds": Limit(0.001, 3600, "seconds"),
    "workloads[].targets.tpot_p95_seconds": Limit(0.0001, 60, "seconds"),
    "workloads[].targets.e2e_p95_seconds": Limit(0.001, 86_400, "seconds"),
    "workloads[].targets.goodput_share": SHARE,
    "workloads[].queue_seconds": Limit(0.0, 3600, "seconds"),
    "workloads[].burstiness": Limit(0.01, 100, "(a gamma shape; 1 is Poisson)"),
    "capacity.rps_per_replica": Limit(0.001, 100_000, "requests per second per replica"),
    "capacity.throughput_tokens_per_second": Limit(0.001, 1e9, "output tokens per second per replica"),
    "redundancy": Limit(0, 100, "spare replicas", whole=True),
    "lead_time_minutes": Limit(0.0, 24 * 60, "minutes"),  # loading a model takes minutes; a day is far past it
    "overflow.max_queue": Limit(1, 1_000_000, "requests", whole=True),
    "overflow.max_wait_seconds": Limit(0.0, 86_400, "seconds", low_open=True),
    "overflow.hosted_price_per_million": Limit(0.0, 1e6, "dollars per million tokens"),
}

# Across fields.
MIN_PEAK_RPS = 0.001  # a workload's busiest hour: below this it never needs a replica
MAX_WORKLOADS = 100
MAX_PLAN_REPLICAS = 100_000  # ceil(peak / capacity): past this the plan describes no one fleet
# Text: names are shown in the report, the console and the history.
MAX_NAME_LENGTH = 200
MAX_NOTE_LENGTH = 2000
MAX_ENV_NAME_LENGTH = 64  # an environment variable's name; past this it is more likely a key pasted in
# The file: a plan is a few KB (the shipped ones 2-5 KB); YAML nests about 6 levels deep.
MAX_PLAN_BYTES = 256 * 1024
MAX_NESTING = 64
