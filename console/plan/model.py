"""The plan as frozen dataclasses: what `schema.load_plan` returns.

Units are SI throughout: bytes, seconds, FLOP/s, bytes/s, requests/s, dollars.
Every other part of capcon (sizing, the simulator, the console) reads these
types and never the YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

WeightPrecision = Literal["fp16", "bf16", "int8", "fp8", "int4"]
KvPrecision = Literal["fp16", "bf16", "fp8"]
# The precision the GEMMs run at: FP8 weights on Hopper run W8A8 FP8 GEMMs, 4-bit weights are dequantised to bf16.
ComputePrecision = Literal["fp16", "bf16", "fp8", "int8"]
WorkloadKind = Literal["interactive", "deferrable"]
OverflowMode = Literal["bounded_queue", "hosted", "defer"]

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# The tensor-parallel sizes a plan may name and the planner chooses from.
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Model:
    name: str
    parameters: float  # count, e.g. 70e9
    layers: int
    kv_heads: int
    head_dim: int
    weight_precision: WeightPrecision
    kv_precision: KvPrecision
    attention_heads: int | None = None
    hidden_size: int | None = None
    max_model_len: int | None = None  # tokens; the context cap, when the plan sets one
    # None: from the weights and the GPU (console/plan/sizing.compute_precision); set for weight-only
    # quantisation (W8A16, W4A16: bf16) or to say what the kernels really run.
    compute_precision: ComputePrecision | None = None


@dataclass(frozen=True)
class Gpu:
    name: str  # preset name, or the plan's own label
    memory_bytes: float
    bandwidth_bytes_per_second: float
    flops_per_second: float  # dense bf16
    price_per_hour: float  # dollars per GPU-hour
    # Dense tensor throughput at 8 bits; None where the GPU has no such tensor cores (no FP8 before Ada/Hopper).
    fp8_flops_per_second: float | None = None
    int8_flops_per_second: float | None = None


@dataclass(frozen=True)
class Replica:
    tensor_parallel: int | None  # None: choose automatically (1, 2, 4, 8)
    usable_memory_share: float = 0.90
    overhead_bytes_per_gpu: float = 0.0  # CUDA context, activations, TP buffers
    # Fractions of the datasheet figures a real engine reaches; defaults from the
    # H200 roofline calibration (decode 0.52-0.73 of bandwidth, prefill ~0.57).
    bandwidth_efficiency: float = 0.70
    compute_efficiency: float = 0.57
    max_num_seqs: int = 256  # vLLM's batch cap; the loader sets vLLM's default for the GPU (1024 on H100/H200)
    block_size: int = 16  # tokens per KV block; used by the simulator


@dataclass(frozen=True)
class TokenStats:
    input_mean: float
    input_p95: float
    output_mean: float
    output_max: float


@dataclass(frozen=True)
class Targets:
    ttft_p95_seconds: float
    tpot_p95_seconds: float
    e2e_p95_seconds: float | None = None
    goodput_share: float = 0.99


@dataclass(frozen=True)
class Workload:
    name: str
    kind: WorkloadKind
    # 7 x 24: rps by day (Monday first) and hour, busiest five minutes of the hour.
    rps_by_hour: tuple[tuple[float, ...], ...]
    tokens: TokenStats
    targets: Targets
    # Waiting before prefill starts, as the plan assumes it: example A's "about 1 s queue + prefill" is
    # this allowance plus the prefill time the sizing computes (docs/method.md, 'Concurrency by Little's law').
    queue_seconds: float = 0.5
    # Gaps between arrivals are gamma-distributed with this shape (vLLM bench's --burstiness):
    # 1 = Poisson, below 1 burstier. Used by the simulator's traffic generator.
    burstiness: float = 1.0

    @property
    def peak_rps(self) -> float:
        return max(max(day) for day in self.rps_by_hour)

    @property
    def mean_rps(self) -> float:
        return sum(sum(day) for day in self.rps_by_hour) / (7 * 24)


# `capacity.source` of a capacity no one measured: the planner swept the plan's simulated replica
# (console/bench/estimate.py). Every figure resting on it is reported as an estimate.
ESTIMATED = "estimate"


@dataclass(frozen=True)
class Capacity:
    rps_per_replica: float  # measured at the goodput target (or estimated: source ESTIMATED)
    source: str  # "manual", the benchmark that measured it, or ESTIMATED
    note: str = ""
    # Output tokens/s of one replica given all it can batch (`capcon bench --throughput`): what sizes
    # deferrable work in GPU-hours. None: deferrable work is counted in interactive equivalents.
    throughput_tokens_per_second: float | None = None
    throughput_source: str = ""  # who measured it, and when
    # An estimate's band: the lowest and highest capacity over the sweeps it ran (None: measured, or no band).
    low: float | None = None
    high: float | None = None

    @property
    def estimated(self) -> bool:
        return self.source == ESTIMATED


@dataclass(frozen=True)
class Overflow:
    mode: OverflowMode = "bounded_queue"
    max_queue: int = 64  # requests waiting per replica before rejecting
    max_wait_seconds: float = 5.0
    hosted_model: str | None = None
    hosted_url: str | None = None
    # Names of environment variables, never their values: a plan file is shared and recorded.
    hosted_key_env: str | None = None  # the hosted endpoint's API key
    hosted_price_per_million: float | None = None  # dollars per million hosted tokens
    deferrable_keys_env: str | None = None  # client API keys (comma-separated) whose requests are deferrable
    admin_token_env: str | None = None  # the gateways' admin API token (`capcon overflow`, the console's switch)
    # Who carries out a switch; None: the fleet's gateways, when the plan lists any.
    actuators: tuple[Actuator, ...] | None = None


ActuatorKind = Literal["gateway", "webhook", "command"]


@dataclass(frozen=True)
class Actuator:
    """One way a policy switch is carried out: the gateways' admin APIs, a signed webhook, or a command."""

    kind: ActuatorKind
    url: str = ""  # webhook
    secret_env: str | None = None  # webhook: the NAME of the variable holding the HMAC secret
    argv: tuple[str, ...] = ()  # command
    timeout_seconds: float = 10.0


@dataclass(frozen=True)
class GatewayAddress:
    """A `capcon gateway` in front of the fleet: its main listener (/metrics) and its admin listener."""

    url: str
    admin_url: str | None = None  # None: watched, not switched


@dataclass(frozen=True)
class DataRules:
    prompts_may_leave: bool = False
    location: str = ""


@dataclass(frozen=True)
class TargetGpus:
    """Which GPUs serve one of the fleet's targets, where the pages cannot tell by themselves: several replicas
    on one host. `pod` (and `namespace`): the pod dcgm-exporter's Kubernetes mapping names on its GPUs; `gpus`:
    their indices on the host's dcgm-exporter page (its `gpu` label), e.g. ("2", "3") for a replica on GPUs 2-3."""

    url: str
    pod: str | None = None
    namespace: str | None = None
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetSource:
    """Where the live fleet is: scrape targets or a Prometheus server."""

    targets: tuple[str, ...] = ()
    target_gpus: tuple[TargetGpus, ...] = ()  # the targets written {url, pod | gpus}: their GPUs named
    prometheus_url: str | None = None
    selector: str = ""  # PromQL label matchers, e.g. 'job="vllm"'
    gateways: tuple[GatewayAddress, ...] = ()  # capcon gateways in front of it (switched when admin_url is set)
    dcgm_targets: tuple[str, ...] = ()  # dcgm-exporter pages of the fleet's GPUs (their own counters)


@dataclass(frozen=True)
class Plan:
    name: str
    model: Model
    gpu: Gpu
    replica: Replica
    workloads: tuple[Workload, ...]
    capacity: Capacity
    redundancy: int = 1  # N+1
    lead_time_seconds: float = 600.0  # model load before a new replica serves
    data: DataRules = field(default_factory=DataRules)
    overflow: Overflow = field(default_factory=Overflow)
    fleet: FleetSource | None = None
    source_path: str = ""
    # The file's text as loaded: what the recorder stores (with its hash) as the plan in force.
    source_text: str = field(default="", compare=False, repr=False)
    # The clock the arrival profile's hours are written in (IANA name): the console reads
    # "this hour" of the plan in it.
    timezone: str = "UTC"

    @property
    def interactive(self) -> tuple[Workload, ...]:
        return tuple(w for w in self.workloads if w.kind == "interactive")
