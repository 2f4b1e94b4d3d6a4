"""vLLM 0.32's `/metrics` page for one simulated replica: same families, HELP text, labels and buckets.

Family order, HELP strings, label sets and default buckets are those of a real
vLLM 0.32.0 capture (`vllm/v1/metrics/loggers.py`, `buckets.py`); the values come
from the engine through the `EngineObserver` hooks. Observations follow vLLM V1's
definitions (`vllm/v1/metrics/stats.py`): TTFT from arrival to the first token,
queue time from arrival to first scheduling, prefill from first scheduling to
the first token, decode from the first to the last token, TPOT per request as
decode time over tokens after the first.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Sequence

from console.metrics.vllm import ITL_BUCKETS, LATENCY_BUCKETS, TTFT_BUCKETS
from console.sim.engine import Engine, EngineObserver, SimRequest
from console.sim.exposition import Counter, Gauge, Histogram, HistogramChild, Registry
from console.sim.shape import ReplicaShape

ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
VLLM_VERSION = "0.32.0"


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's request-size buckets: 1, 2, 5, 10, 20, 50, ... up to max_value."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def cache_config_labels(shape: ReplicaShape, max_model_len: int, kv_dtype: str) -> dict[str, str]:
    """`CacheConfig.metrics_info()` as vLLM 0.32 prints it, with this replica's values."""
    capacity = shape.kv_capacity_tokens
    return {
        "_block_size_resolved": "True",
        "block_size": str(shape.block_size),
        "cache_dtype": kv_dtype,
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(shape.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": str(shape.usable_memory_share),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(capacity / max_model_len),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(capacity),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(shape.num_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


class VllmMetrics(EngineObserver):
    """The registry of one replica (one engine, label engine="0"), fed by its engine."""

    def __init__(
        self,
        model_name: str,
        shape: ReplicaShape,
        max_model_len: int,
        created: float,
        kv_dtype: str = "auto",
        engine_index: str = "0",
    ):
        self.created = created
        self.registry = registry = Registry()
        labels = {"model_name": model_name, "engine": engine_index}
        names = ("engine", "model_name")  # label names; values in `labels`
        t = created

        def counter(name: str, text: str, extra: Sequence[str] = ()) -> Counter:
            return registry.register(Counter(name, text, (*names, *extra)))

        def gauge(name: str, text: str, extra: Sequence[str] = ()) -> Gauge:
            return registry.register(Gauge(name, text, (*names, *extra)))

        def histogram(name: str, text: str, buckets: Iterable[float]) -> HistogramChild:
            return registry.register(Histogram(name, text, names, buckets)).child(t, **labels)

        python = registry.register(
            Gauge(
                "python_info",
                "Python platform information",
                ("implementation", "major", "minor", "patchlevel", "version"),
            )
        )
        major, minor, patch = platform.python_version_tuple()
        python.child(
            implementation=platform.python_implementation(),
            major=major,
            minor=minor,
            patchlevel=patch,
            version=platform.python_version(),
        ).set(1)
        start = registry.register(
            Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
        )
        start.child().set(created)

        mfu = "(for Model Flops Utilization calculations)."
        counter("vllm:estimated_flops_per_gpu", f"Estimated number of floating point operations per GPU {mfu}").child(
            t, **labels
        )
        counter("vllm:estimated_read_bytes_per_gpu", f"Estimated number of bytes read from memory per GPU {mfu}").child(
            t, **labels
        )
        counter(
            "vllm:estimated_write_bytes_per_gpu", f"Estimated number of bytes written to memory per GPU {mfu}"
        ).child(t, **labels)
        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.").child(
            **labels
        )
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.").child(**labels)
        by_reason = gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.",
            ("reason",),
        )
        self.waiting_capacity = by_reason.child(reason="capacity", **labels)
        by_reason.child(reason="deferred", **labels)
        sleep = gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            ("sleep_state",),
        )
        sleep.child(sleep_state="awake", **labels).set(1)
        sleep.child(sleep_state="weights_offloaded", **labels)
        sleep.child(sleep_state="discard_all", **labels)
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.").child(**labels)
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        ).child(t, **labels)
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        ).child(t, **labels)
        external = (
            "External prefix cache {} from KV connector cross-instance cache sharing, in terms of number of {} tokens."
        )
        counter("vllm:external_prefix_cache_queries", external.format("queries", "queried")).child(t, **labels)
        counter("vllm:external_prefix_cache_hits", external.format("hits", "cached")).child(t, **labels)
        counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.").child(
            t, **labels
        )
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.").child(t, **labels)
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.").child(
            t, **labels
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").child(t, **labels)
        by_source = counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", ("source",))
        self.prompt_computed = by_source.child(t, source="local_compute", **labels)
        self.prompt_cache_hit = by_source.child(t, source="local_cache_hit", **labels)
        by_source.child(t, source="external_kv_transfer", **labels)
        self.prompt_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        ).child(t, **labels)
        cached_by_source = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to "
            "DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; "
            "sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            ("source",),
        )
        for source in ("device", "host", "p2p", "disk", "external_unspecified"):
            cached_by_source.child(t, source=source, **labels)
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.").child(
            t, **labels
        )
        success = counter("vllm:request_success", "Count of successfully processed requests.", ("finished_reason",))
        self.success = {reason: success.child(t, finished_reason=reason, **labels) for reason in FINISHED_REASONS}
        rejections = registry.register(
            Counter(
                "vllm:admission_rejections",
                "Number of admission attempts rejected by a queue limit, by reason.",
                ("model_name", "reason"),
            )
        )
        self.rejections = {
            reason: rejections.child(t, model_name=model_name, reason=reason)
            for reason in ("max_num_queued_reqs", "max_num_queued_tokens")
        }
        sizes = build_1_2_5_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", sizes
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", sizes
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_TOKEN_BUCKETS
        )
        self.max_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            sizes,
        )
        self.params_n = histogram("vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS)
        self.params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", sizes
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS
        )
        self.inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            LATENCY_BUCKETS,
        )
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            LATENCY_BUCKETS,
        )
        self.decode = histogram(
            "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS
        )
        self.num_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            PREEMPTION_BUCKETS,
        )
        self.prefill_kv_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            sizes,
        )
        # An Info stand-in: every CacheConfig field as a label, plus engine (no model_name).
        config = {**cache_config_labels(shape, max_model_len, kv_dtype), "engine": engine_index}
        info = registry.register(
            Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", tuple(config))
        )
        info.child(**config).set(1)
        self.http_requests = registry.register(
            Counter(
                "http_requests",
                "Total number of requests by method, status and handler.",
                ("handler", "method", "status"),
            )
        )

    # ---- engine hooks ----------------------------------------------------------------------

    def on_step(self, tokens: int, end: float) -> None:
        self.iteration_tokens.observe(tokens)

    def on_prefix_query(self, request: SimRequest, queried: int, hits: int) -> None:
        self.prefix_queries.inc(queried)
        self.prefix_hits.inc(hits)

    def on_first_token(self, request: SimRequest) -> None:
        ttft = request.ttft
        assert ttft is not None, "the engine stamps the first token before this hook"
        self.ttft.observe(ttft)
        # vLLM counts a request's prompt once, when its prefill first completes (not again on recompute).
        self.prompt_tokens.inc(request.prompt_tokens)
        self.prompt_computed.inc(request.prompt_tokens - request.cached_tokens)

    def on_tokens(self, count: int) -> None:
        self.generation_tokens.inc(count)

    def on_inter_token(self, seconds: float, count: int) -> None:
        self.itl.observe(seconds, count)

    def on_preemption(self, request: SimRequest) -> None:
        self.preemptions.inc()

    def on_finished(self, request: SimRequest) -> None:
        reason, finished_at = request.finished_reason, request.finished_at
        assert reason is not None and finished_at is not None, "the engine stamps the finish before this hook"
        self.success[reason].inc()
        if request.finished_reason in ("abort", "error") and request.first_token is None:
            return
        self.request_prompt_tokens.observe(request.prompt_tokens)
        self.request_generation_tokens.observe(request.generated)
        self.max_generation_tokens.observe(request.generated)
        self.params_n.observe(1)
        self.params_max_tokens.observe(request.max_tokens)
        self.prefill_kv_computed.observe(request.prompt_tokens - request.cached_tokens)
        self.num_preemptions.observe(request.preemptions)
        scheduled = request.first_scheduled if request.first_scheduled is not None else request.arrival
        first = request.first_token if request.first_token is not None else finished_at
        last = request.last_token if request.last_token is not None else finished_at
        self.e2e.observe(finished_at - request.arrival)
        self.queue.observe(scheduled - request.arrival)
        self.inference.observe(last - scheduled)
        self.prefill.observe(first - scheduled)
        self.decode.observe(last - first)
        self.tpot.observe(request.tpot or 0.0)

    # ---- the page --------------------------------------------------------------------------

    def count_http(self, handler: str, method: str, status: int, created: float) -> None:
        self.http_requests.child(created, handler=handler, method=method, status=f"{status // 100}xx").inc()

    def render(self, engine: Engine) -> str:
        self.running.set(engine.num_running)
        self.waiting.set(engine.num_waiting)
        self.waiting_capacity.set(engine.num_waiting)
        self.kv_usage.set(engine.kv_usage)
        return self.registry.render()
