"""`capcon bench import FILE`: another tool's benchmark as capacity evidence, in capcon's own report.

Two sources. `vllm bench serve --save-result` JSON: one run at one rate (completed,
failed, duration, p50/p95 of TTFT, TPOT, ITL and E2E in ms when asked with
`--metric-percentiles 50,95`; with `--save-detailed` every request's TTFT, ITLs,
latency and output length, from which goodput is counted exactly as capcon counts
it). Several files, one per rate, make a sweep. GuideLLM benchmark reports (JSON):
one step per benchmark, the rate from its strategy (constant or Poisson) or else
its measured requests/s; TTFT and TPOT from its successful requests' distributions
(median and p95). Without per-request figures a step holds when its p95s meet the
targets and no more than the allowed share failed.

Every problem is a BenchImportError naming the file and the key: another tool's
output is input like any other.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import replace
from pathlib import Path

from console.bench.boundary import meets_share, within
from console.bench.measure import BenchTargets
from console.bench.report import StepSummary
from console.errors import UserError

MAX_IMPORT_BYTES = 256 * 1024 * 1024
VLLM = "vllm bench serve"
GUIDELLM = "guidellm"


class BenchImportError(UserError):
    """A file that is neither tool's result, or one whose figures cannot be read."""


def _number(value: object, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        shown = json.dumps(value)[:40] if not isinstance(value, float) else repr(value)
        raise BenchImportError(f"{where}: {what} is {shown}; expected a finite number >= 0")
    return float(value)


def _optional_number(value: object, where: str, what: str) -> float | None:
    return None if value is None else _number(value, where, what)


def _ms(value: object, where: str, what: str) -> float | None:
    number = _optional_number(value, where, what)
    return None if number is None else number / 1000.0


def _holds(step: StepSummary, targets: BenchTargets) -> bool:
    if step.good is not None:
        return meets_share(step.good, step.sent, targets.share) if step.sent else False
    if step.ttft_p95 is None or step.tpot_p95 is None:
        return False
    # Requests that failed are misses: the rest must still make the share (counted exactly, as a share of good).
    if not meets_share(step.sent - step.failed, step.sent, targets.share):
        return False
    within_e2e = targets.e2e is None or (step.e2e_p95 is not None and within(step.e2e_p95, targets.e2e))
    return within(step.ttft_p95, targets.ttft) and within(step.tpot_p95, targets.tpot) and within_e2e


def _good_from_details(data: dict, where: str, targets: BenchTargets) -> int | None:
    """Good requests from `--save-detailed` lists, with vLLM's definitions; None when they are not there."""
    ttfts, itls, latencies, lengths = (data.get(k) for k in ("ttfts", "itls", "latencies", "output_lens"))
    if not (isinstance(ttfts, list) and isinstance(itls, list) and isinstance(latencies, list)):
        return None
    if not isinstance(lengths, list):
        return None
    listed_errors = data.get("errors")
    errors = listed_errors if isinstance(listed_errors, list) else [""] * len(ttfts)
    if not len(ttfts) == len(itls) == len(latencies) == len(lengths) == len(errors):
        raise BenchImportError(
            f"{where}: ttfts, itls, latencies and output_lens differ in length; expected one per request"
        )
    good = 0
    for ttft, latency, length, error in zip(ttfts, latencies, lengths, errors):
        if error or not isinstance(length, int) or length < 1:
            continue
        ttft_s = _number(ttft, where, "a ttft")
        latency_s = _number(latency, where, "a latency")
        tpot = (latency_s - ttft_s) / (length - 1) if length > 1 else 0.0
        if (
            within(ttft_s, targets.ttft)
            and within(tpot, targets.tpot)
            and (targets.e2e is None or within(latency_s, targets.e2e))
        ):
            good += 1
    return good


def vllm_step(data: dict, where: str, targets: BenchTargets) -> StepSummary:
    for key in ("completed", "duration"):
        if key not in data:
            raise BenchImportError(f"{where}: no {key!r}; expected the JSON of vllm bench serve --save-result")
    completed = int(_number(data["completed"], where, "completed") or 0)
    failed = int(_number(data.get("failed", 0), where, "failed") or 0)
    duration = _number(data["duration"], where, "duration") or 0.0
    rate_value = data.get("request_rate")
    if rate_value in ("inf", None) or (isinstance(rate_value, float) and math.isinf(rate_value)):
        rate = (completed / duration) if duration else 0.0  # all at once: the rate it carried
    else:
        rate = _number(rate_value, where, "request_rate") or 0.0
    good = _good_from_details(data, where, targets)
    step = StepSummary(
        rate=rate,
        sent=completed + failed,
        completed=completed,
        holds=False,
        good=good,
        duration_seconds=duration,
        output_tokens=int(_number(data.get("total_output_tokens", 0), where, "total_output_tokens") or 0),
        ttft_p50=_ms(data.get("p50_ttft_ms", data.get("median_ttft_ms")), where, "p50_ttft_ms"),
        ttft_p95=_ms(data.get("p95_ttft_ms"), where, "p95_ttft_ms"),
        tpot_p50=_ms(data.get("p50_tpot_ms", data.get("median_tpot_ms")), where, "p50_tpot_ms"),
        tpot_p95=_ms(data.get("p95_tpot_ms"), where, "p95_tpot_ms"),
        itl_p95=_ms(data.get("p95_itl_ms"), where, "p95_itl_ms"),
        e2e_p50=_ms(data.get("p50_e2el_ms", data.get("median_e2el_ms")), where, "p50_e2el_ms"),
        e2e_p95=_ms(data.get("p95_e2el_ms"), where, "p95_e2el_ms"),
    )
    if good is None and step.ttft_p95 is None:
        raise BenchImportError(
            f"{where}: no p95_ttft_ms and no per-request figures; expected a run with --metric-percentiles 50,95 "
            "(or --save-detailed)"
        )
    return _judged(step, targets)


def _judged(step: StepSummary, targets: BenchTargets) -> StepSummary:
    return replace(step, holds=_holds(step, targets))


def _distribution(metrics: dict, name: str, where: str) -> tuple[float | None, float | None]:
    """(median, p95) of a GuideLLM distribution's successful requests, as written (its unit)."""
    summary = metrics.get(name)
    if summary is None:
        return None, None
    successful = summary.get("successful") if isinstance(summary, dict) else None
    if not isinstance(successful, dict):
        raise BenchImportError(f"{where}: metrics.{name} has no 'successful' summary; expected a GuideLLM report")
    listed = successful.get("percentiles")
    percentiles = listed if isinstance(listed, dict) else {}
    median = successful.get("median", percentiles.get("p50"))
    return (
        _optional_number(median, where, f"metrics.{name}.successful.median"),
        _optional_number(percentiles.get("p95"), where, f"metrics.{name}.successful.percentiles.p95"),
    )


def _strategy(benchmark: dict) -> dict:
    for holder in ("config", "args", "scheduler"):
        part = benchmark.get(holder)
        if isinstance(part, dict) and isinstance(part.get("strategy"), dict):
            return part["strategy"]
    return {}


def guidellm_step(benchmark: dict, where: str, targets: BenchTargets) -> StepSummary:
    metrics = benchmark.get("metrics")
    if not isinstance(metrics, dict):
        raise BenchImportError(f"{where}: no 'metrics'; expected a GuideLLM benchmark")
    totals = metrics.get("request_totals") or benchmark.get("request_totals")
    if not isinstance(totals, dict) or "successful" not in totals:
        raise BenchImportError(f"{where}: no request_totals; expected a GuideLLM benchmark with its request counts")
    successful = int(_number(totals.get("successful"), where, "request_totals.successful") or 0)
    errored = int(_number(totals.get("errored", 0), where, "request_totals.errored") or 0)
    incomplete = int(_number(totals.get("incomplete", 0), where, "request_totals.incomplete") or 0)
    strategy = _strategy(benchmark)
    rate = strategy.get("rate")
    if strategy.get("type_") in ("constant", "poisson") and rate is not None:
        rate_rps = _number(rate, where, "strategy.rate") or 0.0
    else:
        rps, _ = _distribution(metrics, "requests_per_second", where)
        mean = (metrics.get("requests_per_second") or {}).get("successful", {}).get("mean")
        rate_rps = _optional_number(mean, where, "requests_per_second.successful.mean") or rps or 0.0
    ttft = _distribution(metrics, "time_to_first_token_ms", where)
    tpot = _distribution(metrics, "time_per_output_token_ms", where)
    itl = _distribution(metrics, "inter_token_latency_ms", where)
    e2e = _distribution(metrics, "request_latency", where)  # seconds
    if ttft == (None, None):
        raise BenchImportError(
            f"{where}: no time_to_first_token_ms; expected a GuideLLM report of a generative benchmark"
        )
    duration = 0.0
    for holder in ("run_stats", "scheduler_metrics"):
        part = benchmark.get(holder)
        if isinstance(part, dict) and "start_time" in part and "end_time" in part:
            start = _number(part["start_time"], where, f"{holder}.start_time") or 0.0
            end = _number(part["end_time"], where, f"{holder}.end_time") or 0.0
            duration = max(0.0, end - start)
    step = StepSummary(
        rate=rate_rps,
        sent=successful + errored + incomplete,
        completed=successful,
        holds=False,
        duration_seconds=duration,
        ttft_p50=None if ttft[0] is None else ttft[0] / 1000,
        ttft_p95=None if ttft[1] is None else ttft[1] / 1000,
        tpot_p50=None if tpot[0] is None else tpot[0] / 1000,
        tpot_p95=None if tpot[1] is None else tpot[1] / 1000,
        itl_p95=None if itl[1] is None else itl[1] / 1000,
        e2e_p50=e2e[0],
        e2e_p95=e2e[1],
    )
    return _judged(step, targets)


def read_json(path: str | Path) -> object:
    source = str(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise BenchImportError(f"{source}: no such file; expected a benchmark result (JSON)") from None
    except OSError as error:
        raise BenchImportError(f"{source}: cannot be read ({error.strerror}); expected a benchmark result") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BenchImportError(f"{source}: not a regular file; expected a benchmark result (JSON)")
        data = handle.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise BenchImportError(f"{source}: larger than 256 MB; expected a benchmark result")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise BenchImportError(f"{source}: not UTF-8 text; expected a benchmark result (JSON)") from None
    except json.JSONDecodeError as error:
        raise BenchImportError(
            f"{source}:{error.lineno}: not JSON ({error.msg}); expected a benchmark result"
        ) from None
    except RecursionError:
        raise BenchImportError(f"{source}: JSON nested too deeply; expected a benchmark result") from None


def import_steps(path: str | Path, targets: BenchTargets) -> tuple[str, str, list[StepSummary]]:
    """(tool, model, steps) of one file: vllm bench serve's result or a GuideLLM report."""
    source = str(path)
    data = read_json(path)
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
        steps = []
        for index, benchmark in enumerate(data["benchmarks"]):
            if not isinstance(benchmark, dict):
                raise BenchImportError(f"{source}: benchmarks[{index}] is not an object; expected a GuideLLM benchmark")
            steps.append(guidellm_step(benchmark, f"{source}: benchmarks[{index}]", targets))
        if not steps:
            raise BenchImportError(f"{source}: no benchmarks; expected a GuideLLM report with at least one")
        model = ""
        first = data["benchmarks"][0]
        for holder in ("config", "args", "backend", "request_loader"):
            part = first.get(holder)
            if isinstance(part, dict) and isinstance(part.get("model"), str):
                model = part["model"]
                break
        return GUIDELLM, model, steps
    if isinstance(data, dict) and "completed" in data and ("request_throughput" in data or "duration" in data):
        model_id = data.get("model_id")
        model = model_id if isinstance(model_id, str) else ""
        return VLLM, model, [vllm_step(data, source, targets)]
    raise BenchImportError(
        f"{source}: neither a vllm bench serve result (completed, duration, ...) nor a GuideLLM report "
        "(benchmarks); expected one of the two"
    )


def imported_capacity(steps: list[StepSummary]) -> tuple[float | None, bool]:
    """(highest rate that held below the lowest that fell, whether a rate fell above it)."""
    fell = [s.rate for s in steps if not s.holds]
    lowest_fall = min(fell) if fell else math.inf
    held = [s.rate for s in steps if s.holds and s.rate < lowest_fall]
    return (max(held) if held else None), bool(fell) and bool(held)
