"""A goodput or latency exactly on its target meets it: `>=` and `<=` read as the targets say.

From the user's side: `capcon bench import` of vllm bench serve results whose figures sit on the
boundary, the verdict and the shares printed. A share that falls is shown rounded down, so it never
reads as the share it missed (98.96 % once printed as `99.0% ... falls` against `>= 99.0%`).
"""

from __future__ import annotations

import json

from console.bench.boundary import meets_share, share_down_text, within
from console.cli import main

from .test_import import vllm_result, write

# A request right on a 40 ms TPOT target: (0.131 - 0.051) / 2 is 0.04000000000000001 in floating point.
ON_TARGET = (0.051, 0.131, 3)
SLOW_TTFT = (2.0, 2.08, 3)  # misses the 0.5 s TTFT target


def detailed(good: int, bad: int) -> dict:
    requests = [ON_TARGET] * good + [SLOW_TTFT] * bad
    return {
        "ttfts": [ttft for ttft, _, _ in requests],
        "latencies": [latency for _, latency, _ in requests],
        "output_lens": [length for _, _, length in requests],
        "itls": [[(latency - ttft) / 2] * 2 for ttft, latency, _ in requests],
        "errors": [""] * len(requests),
    }


def bench_import(capsys, *files, share="0.99"):
    argv = ["bench", "import", *files, "--ttft", "0.5", "--tpot", "0.04", "--goodput-share", share, "--no-history"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def step_line(out: str, rate: str) -> str:
    return next(line for line in out.splitlines() if line.lstrip().startswith(rate))


def test_a_step_at_exactly_the_share_holds_and_one_just_under_never_reads_as_it(tmp_path, capsys):
    at = write(tmp_path, "at.json", vllm_result(2.0, 100.0, 40.0, completed=1000, detailed=detailed(990, 10)))
    under = write(tmp_path, "under.json", vllm_result(4.0, 100.0, 40.0, completed=10_000, detailed=detailed(9896, 104)))
    out = bench_import(capsys, at, under)
    assert "goodput share >= 99.0%" in out
    held = step_line(out, "2.00")
    assert " 990 " in held and "99.0% (" in held and held.endswith("holds")  # TPOTs on the 40 ms target count
    fell = step_line(out, "4.00")
    assert "98.9% (" in fell and "99.0%" not in fell and fell.endswith("falls")  # 98.96 %, rounded down
    assert "capacity: 2.00 rps per replica on 1,000 requests, goodput 99.0%" in out


def test_p95s_only_with_failures_exactly_at_the_allowance_hold(tmp_path, capsys):
    # 10 of 100 failed against a 90 % share: 90 % of requests could still be good (100 * (1 - 0.9) is 9.99...).
    path = write(tmp_path, "p95.json", vllm_result(3.0, 400.0, 40.0, completed=90, failed=10))
    out = bench_import(capsys, path, share="0.9")
    assert "goodput share >= 90.0%" in out
    assert step_line(out, "3.00").endswith("holds")
    code = main(
        ["bench", "import", path, "--ttft", "0.5", "--tpot", "0.04", "--goodput-share", "0.9", "--json", "--no-history"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["steps"][0]["holds"] is True and report["capacity_rps"] == 3.0


def test_the_boundary_helpers_read_the_target_as_written():
    assert meets_share(9, 10, 0.9) and meets_share(99, 100, 0.99) and meets_share(693, 700, 0.99)
    assert not meets_share(9895, 10_000, 0.9896) and meets_share(9896, 10_000, 0.9896)
    assert within((0.131 - 0.051) / 2, 0.04) and not within(0.0401, 0.04)
    assert share_down_text(9896, 10_000) == "98.9%" and share_down_text(990, 1000) == "99.0%"
    assert share_down_text(99_049, 100_000, 2) == "99.04%"
