"""When each request of a benchmark step is sent: Poisson or gamma-burst arrivals at a fixed rate.

As `vllm bench serve` draws them: gaps Gamma(k, 1 / (rate k)) with k the burstiness
(1 = Poisson, below 1 burstier, above 1 more even), summed, then scaled so the last
request goes at exactly count / rate seconds. Two benchmarks at the same rate and
count then offer the same load, whatever their random draws; an infinite burstiness
spaces them evenly (1 / rate apart), the same instants in both. An infinite rate sends
everything at once (the throughput mode; a concurrency cap then paces it).
"""

from __future__ import annotations

import math
import random


def arrival_offsets(count: int, rate: float, burstiness: float, rng: random.Random) -> list[float]:
    """Seconds from the step's start at which each of `count` requests is sent."""
    if count < 1:
        return []
    if rate == math.inf:
        return [0.0] * count  # all at once, as `--request-rate inf`: the throughput mode
    if rate <= 0 or not math.isfinite(rate):
        raise ValueError("rate must be a finite number greater than 0")
    if burstiness == math.inf:  # evenly spaced, as vLLM's benchmark takes an infinite burstiness
        return [(index + 1) / rate for index in range(count)]
    if not burstiness > 0:
        raise ValueError("burstiness must be a number greater than 0")
    theta = 1.0 / (rate * burstiness)
    offsets: list[float] = []
    total = 0.0
    for _ in range(count):
        total += rng.gammavariate(burstiness, theta)
        offsets.append(total)
    scale = (count / rate) / total if total > 0 else 1.0
    return [offset * scale for offset in offsets]
