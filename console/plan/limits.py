"""What a plan's figures can be: one table of bounds, checked by the loader (console/plan/schema.py).

Every number a plan gives is bounded to what a fleet can be, so that a mistyped or hostile
value (a 400-digit integer, 1e300 rps, a capacity of 1e-300) is refused with one line naming
it and the bound, instead of sizing a fleet of 10^300 replicas. The bounds are generous: each
is one or more orders of magnitude past today's largest models, GPUs and fleets. Units are
the plan's own (GB, TB/s, TFLOP/s, minutes), as the YAML writes them.

A bound is checked as `low <= value <= high` (`low < value` where `low_open`). A value above
the bound reads "got 1e300; expected at most 1000000 requests per second"; any other problem
gives the whole range.

Inside the bounds, UNUSUAL marks where a value stops meaning what its field means and starts
looking like a unit slip: a TPOT target of 60 (seconds a token; meant as ms), 3350 TB/s (GB/s),
a price of 0. The loader refuses such a value with its reading and a guess at what was meant
("60 is 60 s per token; did you mean 0.060 (60 ms)?") unless the plan lists the key under
`unusual:`; past the hard bound the same guess is added to the bound's message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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


def seconds_words(value: float) -> str:
    """'60 s', '1500 s (25 min)', '90000 s (25 h)': seconds as written, with a larger unit where it reads better."""
    shown = f"{number(value)} s"
    if value >= 2 * 3600:
        return f"{shown} ({value / 3600:.3g} h)"
    if value >= 120:
        return f"{shown} ({value / 60:.3g} min)"
    return shown


def guess_number(value: float) -> str:
    """A guess as a plan would write it: 0.060, 0.0015, 1.5, 85.9, 2.05."""
    if 0.01 <= value < 1 and round(value, 3) == value:
        return f"{value:.3f}"  # 0.060 as the shipped plans write a TPOT
    return f"{value:.3g}" if value < 1000 else number(float(f"{value:.3g}"))  # 2500, 1e9: never 2.5e+03


def _from_ms(value: float) -> str:
    return f"{guess_number(value / 1000)} ({number(value)} ms)"


@dataclass(frozen=True)
class Unusual:
    """Values inside a field's bound that read as a unit slip: above `high`, or at most `low` (a price of 0)."""

    high: float = math.inf
    reading: Callable[[float], str] = seconds_words  # what the value says in the field's unit: "60 s per token"
    guess: Callable[[float], str] = _from_ms  # what was probably meant, as the plan would write it
    low: float = -math.inf
    expected: str = ""  # the usual range in words: "at most 1 s per token"

    def flags(self, value: float) -> bool:
        return value > self.high or value <= self.low


def _mib_or_bytes(value: float) -> str:
    if value >= 1e6:
        return f"{guess_number(value / 1e9)} ({number(value)} bytes)"
    return f"{guess_number(value * 2**20 / 1e9)} ({number(value)} MiB is {guess_number(value * 2**20 / 1e9)} GB)"


def _tflops(value: float) -> str:
    if value >= 1e9:
        return f"{guess_number(value / 1e12)} ({number(value)} FLOP/s)"
    return f"{guess_number(value / 1000)} ({number(value)} GFLOP/s)"


def _price(value: float) -> str:
    if value <= 0:
        return "the price of a GPU-hour, such as 2.5 (leave the key out to take a preset's)"
    return f"{guess_number(value / 730)} ({number(value)} a month over 730 hours)"


def _per_token(value: float) -> str:
    return f"{seconds_words(value)} per token"


# Key path -> where its values look like a unit slip. Every threshold is a few times past today's
# largest real value (an H200's 4.8 TB/s, a B200's 2,250 dense TFLOP/s, 288 GB a GPU) and far below
# what the other unit gives (3350 GB/s read as TB/s), so the two do not meet.
UNUSUAL: dict[str, Unusual] = {
    "workloads[].targets.tpot_p95_seconds": Unusual(1.0, _per_token, expected="at most 1 s per token"),
    "workloads[].targets.ttft_p95_seconds": Unusual(
        600.0, lambda v: f"{seconds_words(v)} to the first token", expected="at most 600 s (10 minutes)"
    ),
    "workloads[].targets.e2e_p95_seconds": Unusual(
        86_400.0, lambda v: f"{seconds_words(v)} end to end", expected="at most 86400 s (a day)"
    ),
    "workloads[].queue_seconds": Unusual(
        3600.0, lambda v: f"{seconds_words(v)} in the queue", expected="at most 3600 s (an hour)"
    ),
    "overflow.max_wait_seconds": Unusual(
        3600.0, lambda v: f"{seconds_words(v)} in the queue", expected="at most 3600 s (an hour)"
    ),
    "lead_time_minutes": Unusual(
        180.0,
        lambda v: f"{number(v)} minutes ({v / 60:.3g} h) to bring a replica up",
        lambda v: f"{guess_number(v / 60)} ({number(v)} seconds)",
        expected="at most 180 minutes",
    ),
    "gpu.memory_gb": Unusual(2048.0, lambda v: f"{number(v)} GB a GPU", _mib_or_bytes, expected="at most 2048 GB"),
    "replica.overhead_gb_per_gpu": Unusual(
        200.0, lambda v: f"{number(v)} GB a GPU", _mib_or_bytes, expected="at most 200 GB"
    ),
    "gpu.bandwidth_tb_s": Unusual(
        50.0,
        lambda v: f"{number(v)} TB/s",
        lambda v: f"{guess_number(v / 1000)} ({number(v)} GB/s)",
        expected="at most 50 TB/s",
    ),
    "gpu.tflops_bf16": Unusual(20_000.0, lambda v: f"{number(v)} TFLOP/s", _tflops, expected="at most 20000 TFLOP/s"),
    # 8-bit tensor cores run at about twice the 16-bit rate.
    "gpu.tflops_fp8": Unusual(40_000.0, lambda v: f"{number(v)} TFLOP/s", _tflops, expected="at most 40000 TFLOP/s"),
    "gpu.tflops_int8": Unusual(40_000.0, lambda v: f"{number(v)} TFLOP/s", _tflops, expected="at most 40000 TFLOP/s"),
    "gpu.price_per_hour": Unusual(
        200.0,
        lambda v: "a GPU for free: every cost reads 0" if v <= 0 else f"{number(v)} dollars a GPU-hour",
        _price,
        low=0.0,
        expected="a price over 0 and at most 200 dollars per GPU-hour",
    ),
}
# Across fields: a workload's mean prompt longer than the model's context (model.max_model_len).
INPUT_OVER_CONTEXT = "workloads[].tokens.input_mean"


def unusual_rule(path: str) -> Unusual | None:
    """The rule for a key path as errors name it (workloads[2].queue_seconds), or None."""
    return UNUSUAL.get(generic_path(path))


def generic_path(path: str) -> str:
    """workloads[2].targets.ttft_p95_seconds -> workloads[].targets.ttft_p95_seconds."""
    out, depth = [], 0
    for character in path:
        if character == "[":
            depth += 1
            out.append("[]")
        elif character == "]":
            depth -= 1
        elif depth == 0:
            out.append(character)
    return "".join(out)


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
    "gpu.tflops_fp8": Limit(0.001, 100_000, "TFLOP/s"),
    "gpu.tflops_int8": Limit(0.001, 100_000, "TFLOP/s"),
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
    "workloads[].targets.e2e_p95_seconds": Limit(0.001, 7 * 86_400, "seconds"),  # past a day: UNUSUAL
    "workloads[].targets.goodput_share": SHARE,
    "workloads[].queue_seconds": Limit(0.0, 86_400, "seconds"),  # past an hour: UNUSUAL
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
