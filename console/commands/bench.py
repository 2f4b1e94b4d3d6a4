"""`capcon bench --target URL [--prompts FILE]`: one replica's goodput, swept in rate, and its capacity."""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from console.args import SubParsers, bounded
from console.bench.boundary import share_down_text, share_places
from console.errors import UserError
from console.text import printable

if TYPE_CHECKING:
    import asyncio
    from typing import TextIO

    from console.bench.diagnosis import Conclusion, Rerun
    from console.bench.gpu_watch import GpuWatch
    from console.bench.measure import BenchTargets
    from console.bench.prompts import BenchPrompt
    from console.bench.report import BenchReport, ThroughputReport
    from console.bench.runner import Step, StepSettings
    from console.bench.stream import SessionClient
    from console.bench.sweep import Sweep
    from console.plan.model import Plan, Workload
    from console.store.database import Store

DESCRIPTION = """\
Replay your own prompts (--prompts FILE; without it, a built-in sample of 200 chats and
completions, and the report says so) against one replica at a request rate, count goodput (the
share of requests that met every latency target: TTFT, TPOT and, when set, E2E, as
`vllm bench serve` measures them on the client) and raise the rate until goodput
falls under the required share: the last rate that held is the replica's capacity
(docs/method.md, 'Measuring a replica's goodput'). Steps multiply the rate by
--factor, then bisect between the last rate that held and the first that fell.

While each step runs, the replica's /metrics is read every --scrape-every seconds
(KV cache usage, waiting, running, preemptions, vLLM's own TTFT), and the report
says which limit the falling step hit: queueing with KV nearly full points at
memory, slow decode with KV free at compute.
"""

EPILOG = """\
prompts: JSONL, one request a line: {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]},
optionally "max_tokens"; or a ShareGPT-style JSON list ("conversations").
targets: from --plan (its first interactive workload, or --workload), each overridden by --ttft, --tpot,
--e2e, --goodput-share.
Ctrl+C stops the sweep: the steps measured so far are reported and recorded.
exit status: 0 done; 1 the target cannot be reached; 2 bad input (prompts file, plan, options, a target
that is not an OpenAI-compatible server, no targets); 130 stopped by Ctrl+C (after the report).
examples:
  capcon bench --target http://10.0.0.5:8000 --plan plans/assistant-70b.yaml   # the built-in sample prompts
  capcon bench --target http://10.0.0.5:8000 --prompts prompts.jsonl --plan plans/assistant-70b.yaml
  capcon bench --target http://10.0.0.5:8000 --prompts prompts.jsonl --plan plan.yaml --write-plan
  capcon bench --target http://127.0.0.1:8000 --prompts p.jsonl --ttft 1.5 --tpot 0.04 --rate 3 --json"""

seconds = bounded(float, 0.0, 3600.0, "3600 seconds")
request_timeout = bounded(float, 0.0, 300.0, "300 seconds (five minutes)")
rate = bounded(float, 0.0, 10_000.0, "10000 requests per second")
share = bounded(float, 0.0, 1.0, "1 (every request)")
_burstiness = bounded(float, 0.0, 100.0, "100 (or inf: evenly spaced)")


def burstiness(text: str) -> float:
    """A gamma shape in (0, 100], or `inf`: arrivals evenly spaced, as vllm bench serve takes it."""
    return math.inf if text.strip().lower() in ("inf", "infinity") else _burstiness(text)


burstiness.__name__ = "float"
factor = bounded(float, 1.0, 100.0, "100")
precision = bounded(float, 0.0, 1.0, "1")
requests = bounded(int, 0, 1_000_000, "1000000", low_open=True)
tokens = bounded(int, 0, 1_000_000, "1000000", low_open=True)
concurrency = bounded(int, 0, 100_000, "100000", low_open=True)
seed = bounded(int, 0, 2**63 - 1, f"{2**63 - 1}", low_open=False)
EVENT_KIND = "bench_run"
IMPORT_KIND = "bench_import"
THROUGHPUT_KIND = "bench_throughput"
DIAGNOSE_KIND = "bench_diagnose"
MAX_SOURCE = 200  # the plan loader's longest name
SOURCE = "capcon bench"


class Unreachable(UserError):
    exit_code = 1


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "bench",
        help="measure one replica's goodput at the plan's targets, sweep the rate, report (and write) its capacity",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="import FILE",
        help="`import FILE...`: read vllm bench serve --save-result JSON or GuideLLM reports instead of measuring",
    )
    parser.add_argument("--target", metavar="URL", help="the replica's base URL, e.g. http://10.0.0.5:8000")
    parser.add_argument(
        "--prompts",
        metavar="FILE",
        help="prompts to replay (JSONL or ShareGPT-style JSON); default: a built-in sample of 200 chats and "
        "completions, to try the command (a capacity to plan with is measured on your own)",
    )
    parser.add_argument("--plan", metavar="PLAN", help="plan file: the workload's latency targets and burstiness")
    parser.add_argument("--workload", metavar="NAME", help="the plan's workload to take targets from")
    parser.add_argument("--model", help="model name to request (default: the first one /v1/models lists)")
    parser.add_argument("--ttft", type=seconds, metavar="SECONDS", help="p95 time-to-first-token target")
    parser.add_argument("--tpot", type=seconds, metavar="SECONDS", help="time-per-output-token target")
    parser.add_argument("--e2e", type=seconds, metavar="SECONDS", help="end-to-end target (optional)")
    parser.add_argument("--goodput-share", type=share, metavar="SHARE", help="share that must be good (e.g. 0.99)")
    parser.add_argument("--rate", type=rate, metavar="RPS", help="one step at this rate instead of a sweep")
    parser.add_argument("--start-rate", type=rate, default=1.0, metavar="RPS", help="the sweep's first rate (1)")
    parser.add_argument("--factor", type=factor, default=1.5, metavar="X", help="rate step while it holds (1.5)")
    parser.add_argument(
        "--precision", type=precision, default=0.05, metavar="SHARE", help="bisect until within this share (0.05)"
    )
    parser.add_argument("--step-seconds", type=seconds, default=60.0, metavar="SECONDS", help="per step (60)")
    parser.add_argument("--min-requests", type=requests, default=100, metavar="N", help="per step at least (100)")
    parser.add_argument("--max-requests", type=requests, default=100_000, metavar="N", help="per step at most")
    parser.add_argument(
        "--burstiness", type=burstiness, metavar="K", help="gamma shape of gaps (plan's, else 1; inf: even)"
    )
    parser.add_argument("--max-concurrency", type=concurrency, metavar="N", help="at most N requests in flight")
    parser.add_argument(
        "--max-tokens", type=tokens, metavar="N", help="for prompts naming none (plan's mean, else 128)"
    )
    parser.add_argument("--ignore-eos", action="store_true", help="ask for exactly max_tokens (vLLM's ignore_eos)")
    parser.add_argument("--scrape-every", type=seconds, default=1.0, metavar="SECONDS", help="/metrics reads (1)")
    parser.add_argument("--no-metrics", action="store_true", help="do not read the replica's /metrics")
    parser.add_argument(
        "--timeout", type=request_timeout, default=300.0, metavar="SECONDS", help="per request (300, at most)"
    )
    parser.add_argument("--seed", type=seed, default=0, metavar="S", help="arrivals and prompt order")
    parser.add_argument(
        "--throughput",
        action="store_true",
        help="offline throughput mode: --min-requests requests at once (or --max-concurrency at a time), "
        "no latency target; reports the most output tokens/s (for deferrable batch work)",
    )
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="after the sweep, rerun the step at the limit (the first rate that fell) with the concurrency capped "
        "(half, batch size) and the "
        "lengths halved and doubled, and say which moves goodput: memory, compute, queueing or the scheduler",
    )
    parser.add_argument(
        "--dcgm",
        metavar="URL",
        help="the replica's dcgm-exporter page (its GPUs' own counters) to read beside /metrics "
        "(default: the page a simulated replica names; none for a real vLLM: the counters are unknown)",
    )
    parser.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    parser.add_argument("--write-plan", action="store_true", help="write the capacity into --plan (comments kept)")
    parser.add_argument("--db", metavar="PATH", help="history file for the run's event (default: the user's one)")
    parser.add_argument("--no-history", action="store_true", help="do not record the run in the history file")
    parser.set_defaults(run=run)
    return parser


def _workload(plan: Plan, name: str | None) -> Workload | None:
    if name is not None:
        for workload in plan.workloads:
            if workload.name == name:
                return workload
        names = ", ".join(w.name for w in plan.workloads)
        raise UserError(f"--workload {name!r}: not in plan {plan.name!r}; expected one of {names}")
    return plan.interactive[0]


def _base_url(text: str) -> str:
    from console.targets import TARGET_EXPECTED, masked_target, target_metrics_url

    try:
        metrics = target_metrics_url(text)
    except ValueError as problem:
        raise UserError(f"--target {masked_target(text)!r}: {problem}; expected {TARGET_EXPECTED}") from None
    return metrics[: -len("/metrics")] if metrics.endswith("/metrics") else metrics.rstrip("/")


async def discover_model(base_url: str, shown: str, wait_seconds: float = 10.0) -> list[str]:
    """The model ids `/v1/models` lists; Unreachable (exit 1) or UserError when it is no OpenAI-compatible server."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(wait_seconds)) as http:
            response = await http.get(base_url + "/v1/models")
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout, OSError) as error:
        raise Unreachable(
            f"--target {shown}: cannot be reached ({type(error).__name__}); expected a running server"
        ) from None
    except httpx.HTTPError as error:
        raise Unreachable(f"--target {shown}: no answer ({type(error).__name__}); expected a running server") from None
    expected = "an OpenAI-compatible server (GET /v1/models answering a JSON list of models)"
    if response.status_code != 200:
        raise UserError(f"--target {shown}: /v1/models answered HTTP {response.status_code}; expected {expected}")
    try:
        body = response.json()
        ids = [str(card["id"]) for card in body["data"] if isinstance(card, dict) and "id" in card]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"--target {shown}: /v1/models is not a model list; expected {expected}") from None
    if not ids:
        raise UserError(f"--target {shown}: /v1/models lists no model; expected {expected}")
    return ids


class ProgressLine:
    """Rate, requests done and goodput so far on stderr: one line redrawn on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO | None = None, places: int = 1) -> None:
        self.stream = stream or sys.stderr
        self.places = places  # decimals of a goodput share: as many as the target's
        self.tty = self.stream.isatty()
        self._drawn = 0.0
        self._quarter = -1

    def __call__(self, rate: float, done: int, total: int, good: int) -> None:
        pace = f"{rate:,.2f} rps" if math.isfinite(rate) else "all at once"
        text = f"  {pace}: {done:,}/{total:,} requests, goodput so far {share_down_text(good, done, self.places)}"
        if self.tty:
            now = time.monotonic()
            if now - self._drawn >= 0.2 or done == total:
                self._drawn = now
                self.stream.write("\r\x1b[K" + text)
                self.stream.flush()
        else:
            quarter = done * 4 // total
            if quarter != self._quarter:
                self._quarter = quarter
                self.stream.write(text + "\n")
                self.stream.flush()

    def step_done(self, step: Step) -> None:
        f = step.figures
        verdict = "holds" if step.holds else "falls"
        pace = f"{f.rate:,.2f} rps" if math.isfinite(f.rate) else "all at once"
        line = f"step {pace}: {f.sent:,} requests, goodput {share_down_text(f.good, f.sent, self.places)}: {verdict}"
        self.stream.write(("\r\x1b[K" if self.tty else "") + line + "\n")
        self.stream.flush()
        self._quarter = -1


def _settings(args: argparse.Namespace, plan_workload: Workload | None) -> StepSettings:
    from console.bench.runner import StepSettings

    burst = args.burstiness if args.burstiness is not None else (plan_workload.burstiness if plan_workload else 1.0)
    max_tokens = args.max_tokens or (round(plan_workload.tokens.output_mean) if plan_workload else 128)
    return StepSettings(
        seconds=args.step_seconds,
        min_requests=args.min_requests,
        max_requests=max(args.min_requests, args.max_requests),
        burstiness=burst,
        max_concurrency=args.max_concurrency,
        max_tokens=max_tokens,
        ignore_eos=args.ignore_eos,
        scrape_every=args.scrape_every,
        seed=args.seed,
    )


def _prompts(args: argparse.Namespace) -> tuple[list[BenchPrompt], str]:
    """(requests, how the report names them): --prompts FILE, else the built-in sample, said on stderr."""
    from console.bench.prompts import load_prompts, load_sample, sample_words

    if args.prompts:
        prompts = load_prompts(args.prompts)
        return prompts, f"{printable(args.prompts)} ({len(prompts):,} prompts)"
    prompts = load_sample()
    print(
        f"capcon bench: no --prompts: replaying the {sample_words(len(prompts))}; "
        "give --prompts FILE to measure on your own",
        file=sys.stderr,
    )
    return prompts, sample_words(len(prompts))


def run(args: argparse.Namespace) -> int:
    import asyncio

    if args.words:
        if args.words[0] != "import":
            raise UserError(f"{args.words[0]!r}: unknown word; expected `capcon bench import FILE...` or options only")
        if len(args.words) < 2:
            raise UserError("import: no file; expected `capcon bench import FILE...` (benchmark results, JSON)")
        return _import(args, args.words[1:])
    if not args.target:
        raise UserError("--target URL is required; expected the replica's base URL, e.g. http://10.0.0.5:8000")
    if args.throughput:
        if args.diagnose:
            raise UserError("--diagnose with --throughput: the reruns are made at the capacity a sweep finds")
        return _throughput(args)
    plan, workload, targets = _targets(args)
    base_url = _base_url(args.target)
    from console.redact import redact_url

    shown = printable(redact_url(base_url))
    prompts, prompts_text = _prompts(args)
    settings = _settings(args, workload)
    history = None
    if not args.no_history:
        history = _open_history(args)
    report, interrupted = asyncio.run(_bench(args, base_url, shown, prompts, targets, settings, prompts_text, plan))
    if history is not None:
        try:
            subject = plan.name if plan else shown
            history.write_event(report.started_at, EVENT_KIND, subject, shown, report.as_dict())
            if report.diagnose is not None:
                # Beside the sweep's event: the reruns and what they concluded.
                history.write_event(report.started_at, DIAGNOSE_KIND, subject, shown, report.diagnose.as_dict())
        finally:
            history.close()
    from console.bench.report import render

    if args.json:
        print(json.dumps(report.as_dict(), indent=2, allow_nan=False))
    else:
        print(render(report))
    if args.write_plan:
        _write_plan(args, report)
    return 130 if interrupted else 0


def _throughput(args: argparse.Namespace) -> int:
    import asyncio

    from console.bench.estimate import load_plan
    from console.bench.measure import BenchTargets
    from console.bench.report import ThroughputReport, render_throughput, summary
    from console.redact import redact_url

    if args.write_plan and not args.plan:
        raise UserError("--write-plan needs --plan PLAN; expected the plan file to write the throughput into")
    for name in ("rate", "ttft", "tpot", "e2e", "goodput_share"):
        if getattr(args, name) is not None:
            raise UserError(f"--{name.replace('_', '-')} with --throughput: it has no latency target or rate")
    plan = load_plan(args.plan) if args.plan else None
    workload = _workload(plan, args.workload) if plan else None
    base_url = _base_url(args.target)
    shown = printable(redact_url(base_url))
    prompts, prompts_text = _prompts(args)
    settings = _settings(args, workload)
    history = _open_history(args) if not args.no_history else None
    # No target can be missed: every finished request is "good", so the step's share is its completed share.
    targets = BenchTargets(ttft=math.inf, tpot=math.inf, share=0.0)
    started = time.time()
    steps, model, interrupted, _ = asyncio.run(_measure(args, base_url, shown, prompts, targets, settings, math.inf))
    if not steps:
        raise UserError("--throughput: stopped before any request finished")
    report = ThroughputReport(
        shown, model, summary(steps[0]), settings.max_concurrency, started, interrupted, prompts_text
    )
    if history is not None:
        try:
            history.write_event(started, THROUGHPUT_KIND, plan.name if plan else shown, shown, report.as_dict())
        finally:
            history.close()
    print(json.dumps(report.as_dict(), indent=2, allow_nan=False) if args.json else render_throughput(report))
    if args.write_plan:
        _write_throughput(args, report)
    return 130 if interrupted else 0


def _write_throughput(args: argparse.Namespace, report: ThroughputReport) -> None:
    from console.bench.planfile import write_throughput

    s = report.step
    if report.interrupted or s.completed == 0 or s.failed:
        why = "stopped early" if report.interrupted else f"{s.failed:,} of {s.sent:,} requests failed"
        print(f"capcon bench: --write-plan: {args.plan} left as it was: {why}", file=sys.stderr)
        return
    at_once = f"{report.max_concurrency} at a time" if report.max_concurrency else "all at once"
    source = (
        f"capcon bench --throughput {time.strftime('%Y-%m-%d', time.gmtime(report.started_at))} against "
        f"{report.target} ({report.model}), {s.completed:,} requests {at_once}"
    )
    write_throughput(args.plan, s.output_tokens_per_second, source[:MAX_SOURCE])
    print(
        f"capcon bench: wrote throughput {s.output_tokens_per_second:,.4g} output tokens/s per replica into {args.plan}",
        file=sys.stderr,
    )


def _targets(args: argparse.Namespace) -> tuple[Plan | None, Workload | None, BenchTargets]:
    from console.bench.estimate import load_plan
    from console.bench.measure import targets_from

    if args.write_plan and not args.plan:
        raise UserError("--write-plan needs --plan PLAN; expected the plan file to write the capacity into")
    plan = load_plan(args.plan) if args.plan else None
    workload = _workload(plan, args.workload) if plan else None
    return plan, workload, targets_from(workload, args.ttft, args.tpot, args.e2e, args.goodput_share)


def _import(args: argparse.Namespace, files: list[str]) -> int:
    from console.bench.imported import import_steps, imported_capacity
    from console.bench.report import BenchReport, render

    plan, _, targets = _targets(args)
    tools, models, steps = set(), set(), []
    for name in files:
        tool, model, found = import_steps(name, targets)
        tools.add(tool)
        if model:
            models.add(printable(model))
        steps += found
    steps.sort(key=lambda step: step.rate)
    capacity, bounded_above = imported_capacity(steps)
    report = BenchReport(
        target=printable(", ".join(files)),
        model=", ".join(sorted(models)) or "model not named",
        targets=targets,
        steps=tuple(steps),
        capacity=capacity,
        converged=bounded_above,
        interrupted=False,
        started_at=time.time(),
        settings={"imported": [printable(f) for f in files]},
        source=" and ".join(sorted(tools)),
    )
    if not args.no_history:
        history = _open_history(args)
        try:
            subject = report.target
            history.write_event(
                report.started_at, IMPORT_KIND, plan.name if plan else subject, subject, report.as_dict()
            )
        finally:
            history.close()
    print(json.dumps(report.as_dict(), indent=2, allow_nan=False) if args.json else render(report))
    if args.write_plan:
        _write_plan(args, report)
    return 0


def _open_history(args: argparse.Namespace) -> Store:
    from console.store.database import Store
    from console.store.paths import default_history_path

    path = args.db if args.db else default_history_path()
    if not args.db:
        path.parent.mkdir(parents=True, exist_ok=True)
    return Store.open(str(path))


def capacity_note(report: BenchReport) -> str:
    """The plan's capacity.note: when, against what, on how many requests, and the limit hit."""
    holding = report.holding_step
    assert holding is not None, "called with a capacity, which is always the rate of a step that held"
    day = time.strftime("%Y-%m-%d", time.gmtime(report.started_at))
    limit = report.diagnosis.limit if report.diagnosis else "not reached"
    t = report.targets
    share = (
        f", goodput {share_down_text(holding.good, holding.sent, share_places(t.share))}"
        if holding.good is not None
        else ", p95s within targets"
    )
    # A capacity measured on the built-in sample says so where the plan keeps it.
    sample = f" on the {report.prompts}" if report.prompts.startswith("built-in sample") else ""
    return (
        f"measured {day} against {report.target}{sample}: {holding.sent} requests at {holding.rate:.4g} rps{share} "
        f"at TTFT <= {t.ttft:g} s, TPOT <= {t.tpot:g} s; limit: {limit}"
    )


def _write_plan(args: argparse.Namespace, report: BenchReport) -> None:
    from console.bench.planfile import write_capacity

    if report.capacity is None or not report.converged or report.interrupted:
        why = "no rate held" if report.capacity is None else "the sweep did not converge (or was stopped)"
        print(f"capcon bench: --write-plan: {args.plan} left as it was: {why}", file=sys.stderr)
        return
    write_capacity(args.plan, report.capacity, report.source, capacity_note(report))
    print(f"capcon bench: wrote capacity {report.capacity:.4g} rps per replica into {args.plan}", file=sys.stderr)


async def _gpu_page(args: argparse.Namespace, base_url: str) -> str | None:
    """The replica's dcgm-exporter page: --dcgm, else the one a simulated replica names in /version, else None."""
    import httpx

    from console.bench.gpu_watch import sim_gpu_page
    from console.targets import TARGET_EXPECTED, checked_url, masked_target

    if args.dcgm:
        try:
            url = checked_url(args.dcgm)
        except ValueError as problem:
            raise UserError(f"--dcgm {masked_target(args.dcgm)!r}: {problem}; expected {TARGET_EXPECTED}") from None
        return url if url.split("://", 1)[1].count("/") else url + "/metrics"
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as http:
            response = await http.get(base_url + "/version")
            return sim_gpu_page(response.json(), base_url) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def _measure(
    args: argparse.Namespace,
    base_url: str,
    shown: str,
    prompts: Sequence[BenchPrompt],
    targets: BenchTargets,
    settings: StepSettings,
    fixed_rate: float | None,
    sweep: Sweep | None = None,
    plan: Plan | None = None,
    diagnose: bool = False,
) -> tuple[list[Step], str, bool, Conclusion | None]:
    """(steps, model, interrupted, diagnosis): the sweep, or one step at `fixed_rate`, with Ctrl+C stopping it
    cleanly; with `diagnose`, the reruns where the limit binds (diagnosis None otherwise)."""
    import asyncio

    from console.bench.diagnosis import limit_rate
    from console.bench.gpu_watch import GpuWatch
    from console.bench.runner import run_sweep
    from console.bench.stream import SessionClient
    from console.bench.sweep import Sweep

    models = await discover_model(base_url, shown)
    model = args.model or models[0]
    client = SessionClient(base_url, model, timeout=args.timeout)
    page = await _gpu_page(args, base_url)
    tensor_parallel = plan.replica.tensor_parallel if plan is not None else None
    gpu = GpuWatch(page, base_url, tensor_parallel, args.scrape_every) if page else None
    metrics_url = None if args.no_metrics else base_url + "/metrics"
    sweep = sweep or Sweep(start=1.0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    progress = ProgressLine(places=share_places(targets.share))

    def on_signal() -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # a second Ctrl+C: no report, at once
        stop.set()

    loop.add_signal_handler(signal.SIGINT, on_signal)
    diagnosis = None
    try:
        async with client:
            steps = await run_sweep(
                client,
                prompts,
                targets,
                settings,
                sweep,
                stop,
                metrics_url,
                progress=progress,
                on_step=progress.step_done,
                fixed_rate=fixed_rate,
                gpu=gpu,
                keep_open=True,
            )
            # The reruns run where the limit binds: the first rate that fell above the capacity (a fixed rate: that
            # rate, held or not), so a change can show a gain as well as a loss (console/bench/diagnosis.py).
            at = limit_rate(sweep.capacity, sweep.fell) if fixed_rate is None else (fixed_rate if steps else None)
            if diagnose and at is not None and not stop.is_set():
                where = _limit_words(at, sweep.capacity if fixed_rate is None else None, steps, fixed_rate)
                diagnosis = await _diagnose(client, prompts, at, where, settings, targets, stop, metrics_url, gpu, plan)
            elif diagnose:
                why = "stopped" if stop.is_set() else "no rate held the goodput share"
                print(f"capcon bench: --diagnose: no reruns ({why})", file=sys.stderr)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if gpu is not None:
            await gpu.aclose()
    return steps, printable(model), stop.is_set(), diagnosis


def _limit_words(at: float, capacity: float | None, steps: Sequence[Step], fixed_rate: float | None) -> str:
    """Where the reruns run, in words for stderr."""
    if fixed_rate is not None:
        held = bool(steps) and steps[0].holds
        return f"at {at:,.2f} rps (--rate; it {'held: a change can show only what it costs' if held else 'fell'})"
    if capacity is not None and at > capacity:
        return f"at the limit, {at:,.2f} rps (the first rate that fell, above the capacity {capacity:,.2f})"
    return f"at the capacity, {at:,.2f} rps (no rate above it fell: a change can show only what it costs)"


async def _diagnose(
    client: SessionClient,
    prompts: Sequence[BenchPrompt],
    capacity: float,
    where: str,
    settings: StepSettings,
    targets: BenchTargets,
    stop: asyncio.Event,
    metrics_url: str | None,
    gpu: GpuWatch | None,
    plan: Plan | None,
) -> Conclusion | None:
    """The reruns at `capacity` (the rate the limit binds at: console/bench/rerun.py), each announced on stderr."""
    from console.bench.rerun import run_diagnosis

    def on_rerun(row: Rerun) -> None:
        share = "-" if row.goodput_share is None else f"{row.goodput_share:.0%}"
        print(f"rerun {row.what}: {row.sent:,} requests, goodput {share}", file=sys.stderr, flush=True)

    print(f"capcon bench: --diagnose: rerunning the step {where} with controlled changes", file=sys.stderr)
    batch_size = plan.replica.max_num_seqs if plan is not None else None
    return await run_diagnosis(
        client, list(prompts), capacity, settings, targets, stop, metrics_url, gpu, batch_size, on_rerun=on_rerun
    )


async def _bench(
    args: argparse.Namespace,
    base_url: str,
    shown: str,
    prompts: Sequence[BenchPrompt],
    targets: BenchTargets,
    settings: StepSettings,
    prompts_text: str = "",
    plan: Plan | None = None,
) -> tuple[BenchReport, bool]:
    from console.bench.report import BenchReport, summary
    from console.bench.sweep import Sweep

    sweep = Sweep(start=args.start_rate, factor=args.factor, precision=args.precision)
    started = time.time()
    steps, model, interrupted, diagnosis = await _measure(
        args, base_url, shown, prompts, targets, settings, args.rate, sweep, plan, args.diagnose
    )
    capacity = sweep.capacity if args.rate is None else (args.rate if steps and steps[0].holds else None)
    report = BenchReport(
        target=shown,
        model=model,
        targets=targets,
        steps=tuple(summary(step) for step in steps),
        capacity=capacity,
        converged=sweep.converged if args.rate is None else False,
        interrupted=interrupted,
        started_at=started,
        settings={
            "step_seconds": settings.seconds,
            "min_requests": settings.min_requests,
            "burstiness": settings.burstiness if math.isfinite(settings.burstiness) else "inf",
            "max_concurrency": settings.max_concurrency,
            "max_tokens": settings.max_tokens,
            "ignore_eos": settings.ignore_eos,
            "prompts": len(prompts),
            "fixed_rate": args.rate,
        },
        prompts=prompts_text,
        diagnose=diagnosis,
    )
    return report, interrupted
