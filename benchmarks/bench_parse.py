"""Parse one /metrics page with capcon's parser and with prometheus_client's, in the same run.

    python benchmarks/bench_parse.py PAGE [--rounds N]

Checks that both read the same value for every `vllm:` sample, then prints the
time per parse of each and, last, `speedup_vs_prometheus_client: N`.

"steady" is the scraper's normal case: the same series as the previous refresh
(capcon caches each distinct series text). "cold" clears that cache before each
parse: a first scrape, or a page whose every label set is new.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.parser import text_string_to_metric_families

from console.metrics import exposition


def reference(text: str) -> list:
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(("vllm:", "vllm_"))
    ]


def comparable(samples) -> list:
    return sorted(
        (name, tuple(sorted(dict(labels).items())), "NaN" if math.isnan(v) else repr(v)) for name, labels, v in samples
    )


def per_call(function, text: str, repeat: int, before=None) -> float:
    best = []
    for _ in range(5):
        total = 0.0
        for _ in range(repeat):
            if before:
                before()
            start = time.perf_counter()
            function(text)
            total += time.perf_counter() - start
        best.append(total / repeat)
    return statistics.median(best)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", help="a /metrics page saved as text")
    parser.add_argument("--rounds", type=int, default=40, help="parses per timing round (5 rounds)")
    args = parser.parse_args()
    text = Path(args.page).read_text()

    ours = [s for s in exposition.parse(text).samples if s[0].startswith("vllm:")]
    theirs = reference(text)
    if comparable(ours) != comparable(theirs):
        missing = set(comparable(theirs)) ^ set(comparable(ours))
        print(f"DISAGREE on {len(missing)} samples, e.g. {sorted(missing)[:3]}")
        return 1
    print(
        f"page: {Path(args.page).name}, {len(text)} bytes, {len(ours)} vllm: samples; both parsers agree on every one"
    )

    baseline = per_call(lambda t: list(text_string_to_metric_families(t)), text, max(args.rounds // 4, 5))
    steady = per_call(exposition.parse, text, args.rounds)
    cold = per_call(exposition.parse, text, args.rounds, before=exposition.clear_caches)
    print(f"prometheus_client.parser: {baseline * 1e3:.3f} ms per page")
    print(f"capcon cold (no cached series): {cold * 1e3:.3f} ms per page  (x{baseline / cold:.1f})")
    print(f"capcon steady (series seen before): {steady * 1e3:.3f} ms per page")
    print(f"speedup_vs_prometheus_client: {baseline / steady:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
