"""Warnings in words for a sized plan: what will go wrong at the peak, judged on the expected figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from console.plan import units

if TYPE_CHECKING:
    from console.plan.model import Plan
    from console.plan.sizing import Sizing

KV_MARGIN_WANTED = 0.10
DECODE_MARGIN_WANTED = 0.10  # rps a replica carries at the TPOT target, over its share of the peak
PREFILL_SHARE_BURSTS = 0.50  # of the replica's compute: prefill bursts then stall decode steps
CONTEXT_SHARE_WARN = 0.10  # one request at max_model_len holding this share of the KV budget
DISAGREEMENT = 2.0  # the capacity this many times over or under the roofline's rate is warned of


def warnings_for(plan: Plan, s: Sizing) -> tuple[str, ...]:
    found = [
        *_fit(plan, s),
        *_kv(s),
        *_decode(s),
        *_prefill(s),
        *_redundancy(s),
        *_context(plan, s),
        *_capacity(s),
    ]
    return tuple(found)


def _fit(plan: Plan, s: Sizing) -> list[str]:
    if s.weights_fit:
        return []
    how = "even at tensor_parallel 8" if s.tensor_parallel_auto else f"at tensor_parallel {s.gpus_per_replica}"
    return [
        f"does not fit: {units.data(s.weight_bytes)} of weights exceed the {units.data(s.usable_bytes_per_replica)} "
        f"usable on {s.gpus_per_replica} x {s.gpu_name} {how}, leaving no KV cache; use more GPUs per replica, "
        f"a smaller weight precision than {plan.model.weight_precision} or a GPU with more memory"
    ]


def _kv(s: Sizing) -> list[str]:
    if not s.weights_fit or s.expected_kv_margin_share is None:
        return []
    if s.expected_kv_margin_share < 0:
        speed = "even at ideal speed" if (s.kv_margin_share or 0) < 0 else "at expected speed"
        return [
            f"KV cache short: {speed} the peak keeps {units.count(s.expected_concurrency)} requests in flight per "
            f"replica needing {units.data(s.expected_kv_needed_bytes)} of KV, over the "
            f"{units.data(s.kv_budget_bytes)} budget; vLLM will preempt and recompute requests (cap context, "
            f"use FP8 KV, or add GPUs per replica)"
        ]
    if s.expected_kv_margin_share < KV_MARGIN_WANTED:
        return [
            f"thin KV margin: at expected speed the peak needs {units.data(s.expected_kv_needed_bytes)} of the "
            f"{units.data(s.kv_budget_bytes)} KV budget ({units.share(s.expected_kv_margin_share)} left)"
        ]
    return []


def _decode(s: Sizing) -> list[str]:
    found = []
    wanted_stream = 1.0 / s.tpot_target_seconds
    if s.expected_stream_tokens_per_second < wanted_stream:
        found.append(
            f"streaming under target: at {units.share(s.bandwidth_efficiency)} of datasheet bandwidth a decode step "
            f"takes {units.seconds(s.expected_decode_step_seconds)}, {units.tokens_rate(s.expected_stream_tokens_per_second)} "
            f"per stream, under the {units.tokens_rate(wanted_stream)} the p95 TPOT target of "
            f"{units.seconds(s.tpot_target_seconds)} needs (ideal: {units.tokens_rate(s.stream_tokens_per_second)})"
        )
    if s.expected_aggregate_decode_tokens_per_second < s.required_decode_tokens_per_second:
        found.append(
            f"decode cannot keep up: at expected speed a replica decodes "
            f"{units.tokens_rate(s.expected_aggregate_decode_tokens_per_second)} at its batch limit, under the "
            f"{units.tokens_rate(s.required_decode_tokens_per_second)} its share of the peak needs; queues will grow"
        )
    if s.expected_rps_at_tpot_target < s.per_replica_peak_rps * (1 + DECODE_MARGIN_WANTED):
        found.append(
            f"no decode margin: at expected speed a replica keeps streams within the TPOT target up to about "
            f"{units.rps(s.expected_rps_at_tpot_target)}, and the peak puts {units.rps(s.per_replica_peak_rps)} on each "
            f"of {s.replicas_for_peak} (ideal: {units.rps(s.rps_at_tpot_target)})"
        )
    return found


def _prefill(s: Sizing) -> list[str]:
    found = []
    if s.expected_prefill_compute_share > PREFILL_SHARE_BURSTS:
        beyond = (
            "; more than the replica can compute, so prompts will queue" if s.expected_prefill_compute_share > 1 else ""
        )
        found.append(
            f"prefill will push streaming under target during bursts: the peak's {units.flops(s.prefill_flops_per_second)} "
            f"of prefill per replica is {units.share(s.prefill_compute_share)} of its datasheet compute and "
            f"{units.share(s.expected_prefill_compute_share)} at the expected {units.share(s.compute_efficiency)}{beyond}"
        )
    if s.expected_queue_and_prefill_seconds > s.ttft_target_seconds:
        found.append(
            f"first token late: queue allowance {units.seconds(s.queue_seconds)} + prefill "
            f"{units.seconds(s.expected_prefill_seconds)} at expected compute is over the p95 TTFT target of "
            f"{units.seconds(s.ttft_target_seconds)}"
        )
    return found


def _redundancy(s: Sizing) -> list[str]:
    if s.redundancy > 0:
        return []
    return [
        f"no redundancy: {s.replicas_for_peak} replicas carry the peak with none to spare; losing one (a node "
        f"failure or a rolling deploy) leaves {units.rps((s.replicas_for_peak - 1) * s.rps_per_replica_measured)} "
        f"of capacity for {units.rps(s.peak_rps)}; set redundancy: 1 (N+1)"
    ]


def _context(plan: Plan, s: Sizing) -> list[str]:
    if not s.weights_fit:
        return []
    cap = plan.model.max_model_len
    suggested = int(s.long_request_tokens)
    if cap is None:
        return [
            f"context cap advised: no model.max_model_len, so a few long requests can take much of the KV cache; "
            f"cap it near p95 input + max output ({suggested:,} tokens)"
        ]
    held = cap * s.kv_bytes_per_token
    if held > CONTEXT_SHARE_WARN * s.kv_budget_bytes:
        return [
            f"context cap advised: one request at max_model_len {cap:,} holds {units.data(held)}, "
            f"{units.share(held / s.kv_budget_bytes)} of the KV budget; p95 input + max output is {suggested:,} tokens"
        ]
    if s.long_request_tokens > cap:
        return [
            f"context cap below the workload: p95 input + max output is {suggested:,} tokens, over max_model_len "
            f"{cap:,}; those requests will be rejected or cut"
        ]
    return []


def _capacity(s: Sizing) -> list[str]:
    """The capacity and the roofline more than DISAGREEMENT apart, either way, with the limit each sees."""
    if s.roofline_rps <= 0:
        return []
    ratio = s.rps_per_replica_measured / s.roofline_rps
    if 1 / DISAGREEMENT <= ratio <= DISAGREEMENT:
        return []
    sees = {
        "estimated": "the simulated replica's sweep (prefill stalls, queueing and the latency tail at the goodput share)",
        "measured": "the bench's goodput at the targets",
        "hand-written": "what was written in the plan",
    }[s.capacity_origin]
    roofline = (
        f"the roofline's {units.rps(s.roofline_rps)} (it sees {s.roofline_limit}: decode at the TPOT target "
        f"allows {units.rps(s.expected_rps_at_tpot_target)}, compute {units.rps(s.expected_compute_rps)})"
    )
    if ratio > DISAGREEMENT:
        return [
            f"{s.capacity_origin} capacity looks optimistic: {units.rps(s.rps_per_replica_measured)} per replica "
            f"({s.capacity_source}; {sees}) is {ratio:.1f}x {roofline}, which no replica exceeds by much; "
            f"{'re-measure' if s.capacity_origin == 'measured' else 'measure'} goodput on real prompts"
        ]
    return [
        f"{s.capacity_origin} capacity is {1 / ratio:.1f}x under the roofline: {units.rps(s.rps_per_replica_measured)} "
        f"per replica ({s.capacity_source}; {sees}) against {roofline}; the latency targets, not the GPU's rates, "
        "bind: look at the TTFT target against long prompts' prefill and at the goodput share"
    ]
