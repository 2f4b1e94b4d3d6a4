"""An independent reading of raw /metrics text, for checking the console against it.

Deliberately not the project's parser or window math: a few regular expressions
over the text lines and a from-scratch `histogram_quantile` written from
Prometheus' documented semantics (buckets summed by `le`, linear interpolation
inside the bucket holding the rank, the lowest bucket starting at 0, a rank in
the +Inf bucket answering the highest finite bound).
"""

from __future__ import annotations

import math
import re

_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample line named exactly `name`, with its labels and value."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        found = _LINE.match(line)
        if found and found.group("name") == name:
            labels = dict(_LABEL.findall(found.group("labels") or ""))
            out.append((labels, float(found.group("value"))))
    return out


def total(text: str, name: str) -> float:
    """A counter or gauge summed over all its series (engines, finished reasons)."""
    return sum(value for _labels, value in samples(text, name))


def buckets(text: str, histogram: str) -> dict[float, float]:
    """Cumulative bucket counts of a histogram family, summed over engines, by upper bound."""
    out: dict[float, float] = {}
    for labels, value in samples(text, histogram + "_bucket"):
        bound = float(labels["le"])  # "+Inf" reads as inf
        out[bound] = out.get(bound, 0.0) + value
    return out


def bucket_delta(before: dict[float, float], after: dict[float, float]) -> dict[float, float]:
    return {bound: after[bound] - before.get(bound, 0.0) for bound in after}


def quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative bucket counts; None where it gives NaN."""
    bounds = sorted(cumulative)
    if not bounds or bounds[-1] != math.inf:
        return None
    counts = [cumulative[b] for b in bounds]
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(bounds) - 1:
        return bounds[-2]
    lower = bounds[index - 1] if index > 0 else 0.0
    below = counts[index - 1] if index > 0 else 0.0
    return lower + (bounds[index] - lower) * (rank - below) / (counts[index] - below)
