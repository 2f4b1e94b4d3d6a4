"""The planner's capacity estimate against published measurements of the same configuration.

    .venv/bin/python benchmarks/bench_estimate.py [--json] [--input-mean 600]

Each row of tests/fixtures/capacity/published-rows.csv (MLPerf Inference v4.1 and v5.0, NVIDIA's closed
submissions; SGLang's and vLLM's own runs) becomes a plan: the row's model shape, weight and KV precision,
GPU, tensor parallelism, lengths and latency targets, and no capacity, so the planner estimates one
(console/bench/estimate.py) exactly as `capcon plan` would. How each kind of row is read
(tests/fixtures/capacity/README.md):

* an open-loop run that met its limits (MLPerf server, interactive): requests/s per replica is a capacity at
  TTFT p95 <= the published p95 and TPOT p95 <= the published p95. The plan asks for goodput 95 % at those two
  targets (a request counts when it meets both, which is at least as strict as the two p95s apart). Printed:
  the estimate with its band, the measured figure, their ratio, and the offline ceiling of the same
  configuration where one is published (no estimate may be above it);
* an offline run: the ceiling; printed beside the simulated replica's own offline throughput;
* a median-only run (SGLang's README, Poisson at 4 and 8 req/s): one point on the latency-rate curve, printed
  beside the simulated replica's median TTFT and TPOT at that rate.

What the rows do not say, assumed and printed: MLPerf's OpenOrca inputs (at most 1,024 tokens; their mean is
not in the logs: --input-mean, default 600, p95 1,000); outputs' maximum (1,024); v5.0's replica split
(taken from v4.1: TP2 on H100, TP1 on H200); the H100 form factor of SGLang's rows (SXM); engines' batch cap
(vLLM's default for the GPU).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from console.bench import estimate
from console.plan.schema import PlanError, parse_plan

ROWS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "capacity" / "published-rows.csv"
GPUS = {"H100-SXM-80GB": "H100-80GB-SXM", "H200-SXM-141GB": "H200-141GB", "A100-80GB": "A100-80GB"}
V41_TP = {"H100-80GB-SXM": 2, "H200-141GB": 1}  # v5.0's logs do not say; v4.1's configs do
SYSTEM_GPUS = 8  # every MLPerf row is a whole 8-GPU system
GOODPUT = 0.95


@dataclass(frozen=True)
class Row:
    raw: dict[str, str]

    @property
    def gpu(self) -> str:
        name = self.raw["gpu"].split(" (")[0]
        return GPUS.get(name, "H100-80GB-SXM" if name.startswith("H100") else name)

    @property
    def tp(self) -> int:
        given = self.raw["tp"]
        return int(given) if given else V41_TP[self.gpu]

    @property
    def mlperf(self) -> bool:
        return self.raw["source"].startswith("mlperf")

    @property
    def offline(self) -> bool:
        return self.raw["load"].startswith("inf")

    @property
    def replicas(self) -> float:
        return SYSTEM_GPUS / self.tp if self.mlperf else 1.0

    @property
    def rps_per_replica(self) -> float:
        completed = self.raw["requests_per_s"] or self.raw["load"]  # a median-only row: the rate it was sent at
        return float(completed) / self.replicas

    @property
    def label(self) -> str:
        r = self.raw
        kind = "offline" if self.offline else ("interactive" if "interactive" in r["notes"] else "server")
        if not r["ttft_p95_s"] and not self.offline:
            kind = f"{r['load']} rps"
        version = r["source"].split("/")[0].replace("mlperf-inference-", "mlperf ")
        model = "8B" if float(r["params_b"]) < 20 else "70B"
        return f"{version} {r['engine']} {model} {self.gpu} TP{self.tp} {kind}"

    def config(self) -> tuple[str, ...]:
        r = self.raw
        return (r["source"].split("/")[0], r["model"], r["weight_precision"], self.gpu, str(self.tp))


def plan_text(row: Row, input_mean: float, ttft: float, tpot: float, rps: float) -> str:
    r = row.raw
    weights = r["weight_precision"]
    kv = r["kv_precision"].split(" ")[0]
    if row.mlperf:
        tokens = (input_mean, min(1000.0, input_mean * 1.9), float(r["osl_mean"]), 1024, 2048)
    else:  # ShareGPT through the engines' own benchmark: vLLM's blog sample, 202 in and about 194 out
        tokens = (float(r["isl_mean"]), 600.0, float(r["osl_mean"]), 1024, 4096)
    hours = ", ".join([f"{rps:.6g}"] * 24)
    return f"""name: row
model:
  name: {r["model"]}
  parameters: {r["params_b"]}B
  layers: {r["layers"]}
  kv_heads: {r["kv_heads"]}
  head_dim: {r["head_dim"]}
  weight_precision: {weights}
  kv_precision: {kv}
  max_model_len: {tokens[4]}
gpu:
  preset: {row.gpu}
replica:
  tensor_parallel: {row.tp}
workloads:
  - name: published
    kind: interactive
    arrivals:
      weekday: [{hours}]
      weekend: [{hours}]
    tokens:
      input_mean: {tokens[0]:.0f}
      input_p95: {tokens[1]:.0f}
      output_mean: {tokens[2]:.1f}
      output_max: {tokens[3]}
    targets:
      ttft_p95_seconds: {ttft:g}
      tpot_p95_seconds: {tpot:g}
      goodput_share: {GOODPUT}
redundancy: 0
"""


def estimated(row: Row, input_mean: float) -> dict:
    r = row.raw
    text = plan_text(row, input_mean, float(r["ttft_p95_s"]), float(r["tpot_p95_s"]), row.rps_per_replica)
    try:
        plan = parse_plan(text, "row.yaml", estimate=estimate.estimate_capacity)
    except PlanError as error:
        return {"error": str(error)}
    capacity = plan.capacity
    return {"rps": capacity.rps_per_replica, "low": capacity.low, "high": capacity.high, "note": capacity.note}


def simulated_figures(row: Row, input_mean: float) -> dict:
    """The simulated replica's offline throughput (requests/s) and, at the row's rate, median TTFT and TPOT."""
    from console.bench.simulated import plan_lengths, simulated_latencies, simulated_throughput

    rate = row.rps_per_replica if not row.offline else 1.0
    plan = parse_plan(plan_text(row, input_mean, 10.0, 1.0, rate), "row.yaml", estimate=estimate.estimate_capacity)
    lengths = plan_lengths(plan, 2000)
    tokens_per_s = simulated_throughput(plan, lengths)
    out = {"offline_rps": tokens_per_s / (sum(a for _, a, _ in lengths) / len(lengths))}
    if not row.offline and not row.mlperf:
        ttft, tpot = simulated_latencies(plan, lengths, float(row.raw["load"]))
        out |= {"ttft_p50": ttft, "tpot_p50": tpot}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--input-mean", type=float, default=600.0, help="MLPerf OpenOrca's mean input (not published)")
    args = parser.parse_args()
    rows = [Row(raw) for raw in csv.DictReader(ROWS.open())]
    ceilings = {row.config(): row.rps_per_replica for row in rows if row.offline}
    results = []
    for row in rows:
        print(f"  {row.label}", file=sys.stderr, flush=True)
        result: dict = {"row": row.label, "measured_rps": row.rps_per_replica}
        if row.offline:
            result |= {"kind": "ceiling"} | simulated_figures(row, args.input_mean)
        elif row.raw["ttft_p95_s"]:
            result |= {"kind": "capacity", "ceiling_rps": ceilings.get(row.config())}
            result |= estimated(row, args.input_mean)
            if "rps" in result:
                result["ratio"] = result["rps"] / row.rps_per_replica
        else:
            result |= {"kind": "medians", "ttft_p50_published": float(row.raw["ttft_p50_s"])}
            result |= {"tpot_p50_published": float(row.raw["tpot_p50_s"])} | simulated_figures(row, args.input_mean)
        results.append(result)
    ratios = [r["ratio"] for r in results if "ratio" in r]
    above = [r["row"] for r in results if r.get("ceiling_rps") and r.get("rps", 0) > r["ceiling_rps"]]
    summary = {
        "median_ratio": statistics.median(ratios) if ratios else None,
        "capacities": len(ratios),
        "above_ceiling": above,
        "input_mean_assumed": args.input_mean,
    }
    if args.json:
        json.dump({"rows": results, "summary": summary}, sys.stdout, indent=1)
        print()
        return 0
    print(f"MLPerf input mean assumed {args.input_mean:.0f} tokens; goodput {GOODPUT:.0%} at each row's p95 targets")
    print(f"{'row':<58}{'estimate':>22}{'measured':>10}{'ratio':>7}{'ceiling':>9}")
    for r in results:
        if r["kind"] == "capacity":
            shown = f"{r['rps']:.2f} ({r['low']:.2f}-{r['high']:.2f})" if "rps" in r else "none"
            ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
            ceiling = f"{r['ceiling_rps']:.2f}" if r["ceiling_rps"] else "-"
            print(f"{r['row']:<58}{shown:>22}{r['measured_rps']:>10.2f}{ratio:>7}{ceiling:>9}")
            if "error" in r:
                print(f"    {r['error']}")
        elif r["kind"] == "ceiling":
            ratio = r["offline_rps"] / r["measured_rps"]
            print(f"{r['row']:<58}{r['offline_rps']:>17.2f} sim{r['measured_rps']:>10.2f}{ratio:>7.2f}")
        else:
            print(
                f"{r['row']:<58} median TTFT {r['ttft_p50'] * 1000:.0f} ms (published {r['ttft_p50_published'] * 1000:.0f}),"
                f" TPOT {r['tpot_p50'] * 1000:.1f} ms (published {r['tpot_p50_published'] * 1000:.1f})"
            )
    print(
        f"capacities: {summary['capacities']}, median ratio {summary['median_ratio']:.2f}; "
        f"above the offline ceiling: {', '.join(above) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
