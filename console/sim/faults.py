"""Faults a simulated replica can be given on demand, the way real replicas fail.

- `down`: the server stops listening (connection refused) until cleared;
  clearing it restarts the replica as a new process would: counters from zero,
  a new start time.
- `restart`: down and straight back up (a crash loop's one turn, a rolling deploy).
- `slow`: every engine step takes `slow_factor` times as long (thermal throttling,
  a noisy neighbour): latency rises, throughput falls.
- `metrics_error`: `/metrics` answers HTTP 500.
- `metrics_hang`: `/metrics` never answers (until cleared or stopped).
- `metrics_garbage`: `/metrics` answers 200 with text that is not Prometheus exposition.
"""

from __future__ import annotations

from typing import Literal

FaultKind = Literal["down", "restart", "slow", "metrics_error", "metrics_hang", "metrics_garbage"]
FAULT_KINDS: tuple[str, ...] = ("down", "restart", "slow", "metrics_error", "metrics_hang", "metrics_garbage")
METRICS_FAULTS = ("metrics_error", "metrics_hang", "metrics_garbage")
DEFAULT_SLOW_FACTOR = 3.0

GARBAGE_PAGE = (
    "<html><body><h1>502 Bad Gateway</h1></body></html>\n"
    'vllm:num_requests_running{engine="0" 12 oops\n'
    "\x00\x01 this is not a metrics page\n"
)


def check_kind(kind: str) -> str:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault {kind!r}: expected one of {', '.join(FAULT_KINDS)}")
    return kind
