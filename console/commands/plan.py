"""`capcon plan FILE`: size a fleet from a plan file, optionally with the week's schedule (docs/method.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from console.args import SubParsers
from console.errors import UserError
from console.plan import catalog

if TYPE_CHECKING:
    from console.bench.sizes import SizeComparison
    from console.engines.keda import ReactiveShortfall
    from console.plan.model import Plan
    from console.plan.sizing import Sizing

# The planner, the estimate, YAML and the KEDA exporter are imported by the steps that use them, so that
# `capcon --help` and `capcon plan --help` start without them.

DESCRIPTION = """\
Size a vLLM fleet from a plan file and print the report: weight bytes, GPUs per
replica, usable memory, KV bytes per token and KV budget; time in system and
concurrency (Little's law), KV needed at the peak and the margin; decode step,
per-stream and aggregate tokens/s against the decode rate the peak needs;
prefill FLOP/s; the single-stream ceiling; replicas for the peak plus
redundancy; cost per hour and per million output tokens at peak and mean load.

Decode and prefill are shown twice: the method's ideal (datasheet bandwidth and
FLOP/s) and the expected figure at the plan's replica.bandwidth_efficiency and
replica.compute_efficiency. Warnings are judged on the expected figures.
docs/method.md explains the method: every formula, both worked examples, and
what the console's flags ask you to do.
"""

EPILOG = (
    "A plan file holds model, gpu, replica, workloads (interactive or deferrable, each with arrivals, tokens "
    "and targets), capacity, redundancy, lead_time_minutes, data, overflow and fleet; "
    "plans/assistant-70b.yaml explains every key in comments.\n\n"
    "GPU presets (gpu.preset, any case): "
    + ", ".join(catalog.PRESETS)
    + ".\n\nexit status: 0 report printed; 2 a plan file is missing or invalid "
    "(the message names file, line, key and what was expected; with several files nothing is printed).\n"
    "examples:\n"
    "  capcon plan plans/assistant-70b.yaml\n"
    "  capcon plan plans/*.yaml                            # one report per plan\n"
    "  capcon plan plans/internal-assistant-18rps.yaml --schedule\n"
    "  capcon plan plans/chat-8b-l40s.yaml --schedule --json | jq .replicas_by_hour\n"
    "  capcon plan plans/internal-assistant-18rps.yaml --schedule --format keda --prometheus http://prometheus:9090\n"
    "  capcon plan plans/internal-assistant-18rps.yaml --schedule --format json   # for an HPA script or Terraform"
)


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "plan",
        help="size a fleet from a plan file: memory, KV, decode, replicas, cost (and --schedule)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "file",
        nargs="+",
        metavar="FILE",
        help="plan file (YAML), e.g. plans/assistant-70b.yaml; several give one report each, in order",
    )
    parser.add_argument(
        "--schedule",
        action="store_true",
        help=(
            "add the week: replicas for each hour (ceil(rps / capacity) + redundancy, at least 1 + 1), "
            "scale-ups moved earlier by the lead time, GPU-hours a month on the schedule and 24/7, the saving, "
            "and the idle hours where deferrable work fits"
        ),
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=(
            "print one JSON object instead (SI units: bytes, seconds, tokens/s, FLOP/s, dollars); the method's "
            "keys hold ideal figures, expected_* keys the figures at the plan's efficiencies; with several files "
            '{"plans": [one object per file, with plan and plan_file]}, as watch --once --json does with several plans'
        ),
    )
    parser.add_argument(
        "--sizes",
        action="store_true",
        help=(
            "compare tensor-parallel sizes: the plan's own size at the plan's capacity (as the report sizes it), "
            "each other size whose weights fit swept offline on the plan's simulated replica and, when the plan's "
            "capacity is measured or written by hand, scaled by it over the simulated rate at the plan's size "
            "(rps per replica and per GPU, replicas and GPUs for the peak with redundancy, $ per hour, where each "
            "figure comes from), and the cheapest; a few seconds per plan"
        ),
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help=(
            "with --schedule: text (default, the report); keda, a KEDA ScaledObject whose cron triggers run the "
            "schedule in the plan's time zone (lead time and N+1 included) plus a Prometheus trigger adding replicas "
            "above the plan (reads the rules of `capcon rules`); json, the schedule alone for other tools"
        ),
    )
    parser.add_argument(
        "--prometheus",
        default=None,
        metavar="URL",
        help="with --format keda: the Prometheus the trigger queries (default: the plan's fleet.prometheus_url)",
    )
    parser.add_argument(
        "--deployment",
        default=None,
        metavar="NAME",
        help="with --format keda: the Deployment to scale (default: the plan's name as a Kubernetes name)",
    )
    parser.add_argument(
        "--max-replicas",
        type=int,
        default=None,
        metavar="N",
        help="with --format keda: maxReplicaCount (default: the schedule's peak; more leaves the Prometheus trigger room)",
    )
    parser.set_defaults(run=run)
    return parser


FORMATS = ("text", "json", "keda")


def _check_format(args: argparse.Namespace) -> None:
    if args.format == "text":
        for option, value in (("--prometheus", args.prometheus), ("--deployment", args.deployment)):
            if value is not None:
                raise UserError(f"{option}: only with --format keda")
        if args.max_replicas is not None:
            raise UserError("--max-replicas: only with --format keda")
        return
    if not args.schedule:
        raise UserError(f"--format {args.format}: needs --schedule (it formats the week's schedule)")
    if args.json:
        raise UserError(f"--format {args.format} with --json: choose one (--json is the whole report as JSON)")
    if args.format == "json" and (args.prometheus or args.deployment or args.max_replicas is not None):
        raise UserError("--prometheus, --deployment and --max-replicas: only with --format keda")
    if args.max_replicas is not None and not 1 <= args.max_replicas <= 100_000:
        raise UserError(f"--max-replicas {args.max_replicas}: expected a whole number from 1 to 100000")


def run(args: argparse.Namespace) -> int:
    _check_format(args)
    if args.format != "text":
        _write(_exported(args))
        return 0
    # Every file is loaded and sized before anything is printed: a bad one among several stops
    # the run with its file:line message and exit 2, and no script reads half a report.
    reports = [_report(path, args.schedule, args.sizes) for path in args.file]
    if args.json:
        if len(reports) == 1:
            body = reports[0][2]
        else:
            body = {
                "plans": [
                    {"plan": sizing.plan_name, "plan_file": path, **figures} for path, sizing, figures, _ in reports
                ]
            }
        text = json.dumps(body, indent=2, allow_nan=False) + "\n"
    else:
        # Each report starts with its own heading line, `capcon plan: NAME  (FILE)`.
        text = "\n".join(rendered for *_, rendered in reports)
    _write(text)
    return 0


def _report(path: str, with_schedule: bool, with_sizes: bool = False) -> tuple[str, Sizing, dict, str]:
    """(file, sizing, JSON figures, text report) of one plan file; a PlanError (exit 2) for a bad one."""
    from dataclasses import asdict

    from console.bench.estimate import load_plan
    from console.bench.sizes import sizes_compared
    from console.engines.keda import DAY_NAMES, reactive_shortfall
    from console.plan.report import render, to_json
    from console.plan.schedule import schedule
    from console.plan.sizing import size

    plan = load_plan(path)
    sizing = size(plan)
    week = schedule(plan) if with_schedule else None
    figures = to_json(sizing, week)
    text = render(sizing, week, path)
    if with_sizes:
        compared = sizes_compared(plan)
        figures["sizes"] = [asdict(one) for one in compared.sizes]
        figures["sizes_correction"] = {
            "plan_tensor_parallel": compared.plan_tensor_parallel,
            "plan_rps_per_replica": compared.plan_rps_per_replica,
            "capacity_from": compared.capacity_from,
            "simulated_rps_per_replica_at_plan_size": compared.simulated_at_plan_size,
            "factor": compared.correction,
        }
        text += sizes_text(compared, sizing, plan)
    if week is not None:
        shortfall = reactive_shortfall(week)
        figures["reactive_shortfall"] = {
            "minutes_week": shortfall.minutes_week,
            "replica_minutes_week": shortfall.replica_minutes_week,
            "worst_day": DAY_NAMES[shortfall.worst_day],
            "worst_day_minutes": shortfall.worst_day_minutes,
        }
        text += _reactive_words(shortfall, week.lead_time_seconds)
    return path, sizing, figures, text


# A correction further from 1 than this says the plan's capacity and its simulated replica disagree.
FAR_CORRECTION = 2.0


def sizes_text(compared: SizeComparison, sizing: Sizing, plan: Plan) -> str:
    """The --sizes table, where each row's capacity comes from, and which size is the cheapest for the peak."""
    from console.bench.sizes import FROM_CORRECTED, FROM_ESTIMATE

    own_tp, factor = compared.plan_tensor_parallel, compared.correction
    if compared.capacity_from == FROM_ESTIMATE:
        heading = (
            f"Tensor-parallel sizes on the plan's simulated replica (estimates, at the peak of {sizing.peak_rps:.2f} "
            f"rps with N+{sizing.redundancy}; TP {own_tp} is the report's estimate)"
        )
    else:
        heading = (
            f"Tensor-parallel sizes at the peak of {sizing.peak_rps:.2f} rps with N+{sizing.redundancy}: TP {own_tp} "
            f"at the plan's capacity (as the report), the others on the plan's simulated replica"
        )
    lines = [
        "",
        heading,
        f"  {'TP':>2}  {'rps/replica':>12}  {'rps/GPU':>8}  {'replicas':>8}  {'GPUs':>5}  {'cost/h':>9}  from",
    ]
    for one in compared.sizes:
        if one.replicas is None or one.gpus is None or one.cost_per_hour is None:
            why = "not estimated: past the simulation budget" if one.over_budget else "no rate meets the targets"
            lines.append(f"  {one.tensor_parallel:>2}  {why}")
            continue
        if one.covers_peak and one.tensor_parallel != own_tp:
            rps, per_gpu = "the peak", f">={sizing.peak_rps / one.tensor_parallel:.2f}"
        else:
            assert one.rps_per_replica is not None  # for mypy: swept, not covering
            rps, per_gpu = f"{one.rps_per_replica:.2f}", f"{one.rps_per_replica / one.tensor_parallel:.2f}"
        source = f"simulated x{factor:.3g}" if one.capacity_from == FROM_CORRECTED else one.capacity_from
        mark = "  <- this plan's" if one.tensor_parallel == own_tp else ""
        lines.append(
            f"  {one.tensor_parallel:>2}  {rps:>12}  {per_gpu:>8}  {one.replicas:>8}  {one.gpus:>5}  "
            f"{'$' + format(one.cost_per_hour, ',.2f'):>9}  {source}{mark}"
        )
    lines += _correction_words(compared, plan)
    priced = [one for one in compared.sizes if one.cost_per_hour is not None]
    if priced:
        best = min(priced, key=lambda one: (one.cost_per_hour, one.tensor_parallel))
        own = next((one for one in priced if one.tensor_parallel == own_tp), None)
        if own is not None and best.cost_per_hour is not None and own.cost_per_hour is not None:
            if best.tensor_parallel == own.tensor_parallel or best.cost_per_hour >= own.cost_per_hour:
                lines.append(f"This plan's size, TP {own.tensor_parallel}, is the cheapest for the peak.")
            else:
                lines.append(
                    f"Cheapest for the peak: TP {best.tensor_parallel} at ${best.cost_per_hour:,.2f}/h against "
                    f"${own.cost_per_hour:,.2f}/h at this plan's TP {own.tensor_parallel} "
                    f"(replica.tensor_parallel: {best.tensor_parallel}); measure both before you switch."
                )
    return "\n".join(lines) + "\n"


def _correction_words(compared: SizeComparison, plan: Plan) -> list[str]:
    """How the other sizes were brought to the plan's capacity, or why they were not."""
    from console.bench.estimate import how_to_measure
    from console.bench.sizes import FROM_ESTIMATE

    if compared.capacity_from == FROM_ESTIMATE:
        return []
    own_tp, factor, simulated = compared.plan_tensor_parallel, compared.correction, compared.simulated_at_plan_size
    if factor is None or simulated is None:
        return [
            f"Not corrected: the simulated replica meets the targets at no rate it could sweep at TP {own_tp}, so "
            "the other sizes are its own estimates, not on the scale of the plan's capacity."
        ]
    lines = [
        f"Correction x{factor:.3g}: the plan's {compared.plan_rps_per_replica:.2f} rps per replica at TP {own_tp} "
        f"({compared.capacity_from}) over the simulated replica's {simulated:.2f} rps there; each other size's "
        "simulated rate is scaled by it (actual over expected, as NVIDIA Dynamo's planner corrects its estimates)."
    ]
    if not 1 / FAR_CORRECTION <= factor <= FAR_CORRECTION:
        lines.append(
            f"The plan's capacity and its simulated replica differ {max(factor, 1 / factor):.1f}-fold: one of them is "
            f"off; measure the replica ({how_to_measure(plan)})."
        )
    return lines


def _reactive_words(shortfall: ReactiveShortfall, lead_time_seconds: float) -> str:
    from console.engines.keda import DAY_NAMES

    lead = f"{lead_time_seconds / 60:g} min"
    if not shortfall.minutes_week:
        return "Against reactive scaling (scale-ups started when the queue builds): nothing lost, no scale-ups.\n"
    return (
        f"Against reactive scaling (scale-ups started when the queue builds, each serving {lead} late): "
        f"{shortfall.minutes_week:,} min a week with too few replicas ({shortfall.replica_minutes_week:,} "
        f"replica-minutes), worst {DAY_NAMES[shortfall.worst_day]} with {shortfall.worst_day_minutes:,} min; "
        "the schedule starts them ahead and loses none.\n"
    )


def _check_server_address(url: str) -> None:
    """The trigger's serverAddress: an http(s) URL without credentials (those belong in a TriggerAuthentication)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError("--prometheus: not an http(s) URL; expected an address such as http://prometheus:9090")
    if parts.username is not None or parts.password is not None:
        raise UserError(
            "--prometheus: the URL holds credentials, which the ScaledObject would show to anyone who can read it; "
            "expected the bare address, with credentials in a KEDA TriggerAuthentication"
        )


def _exported(args: argparse.Namespace) -> str:
    """--format keda or json of every file's schedule: YAML documents one after another, or one JSON value."""
    import yaml

    from console.bench.estimate import estimate_comment, load_plan
    from console.engines.keda import scaled_object, schedule_document
    from console.plan.schedule import schedule

    year = time.gmtime().tm_year  # the zone's daylight-saving dates are looked up from this year on
    documents, plans = [], []
    flat: list[str] = []  # plans that need no ScaledObject, in words
    for path in args.file:
        plan = load_plan(path)
        plans.append(plan)
        week = schedule(plan)
        if args.format == "json":
            documents.append(schedule_document(plan, week, year))
            continue
        url = args.prometheus or (plan.fleet.prometheus_url if plan.fleet else None)
        if url:
            _check_server_address(url)
        scaled = scaled_object(
            plan,
            week,
            first_year=year,
            prometheus_url=url or None,
            deployment=args.deployment,
            max_replicas=args.max_replicas,
        )
        if not scaled["spec"]["triggers"]:
            # KEDA refuses an object without a trigger, and a flat week needs no scaler: say what to run instead.
            replicas = scaled["spec"]["minReplicaCount"]
            flat.append(
                f"# {plan.name}: the schedule is flat ({replicas} replicas every hour of the week) and no Prometheus "
                f"is named, so KEDA has nothing to scale on: run the Deployment at {replicas} replicas, or give "
                "--prometheus URL to scale on the live load.\n"
            )
            continue
        if not url:
            # The schedule alone still scales the fleet; the load trigger waits for an address to query.
            print(
                f"capcon plan: {path}: no Prometheus (fleet.prometheus_url or --prometheus URL): the ScaledObject "
                "holds the schedule's cron triggers only, without the load trigger",
                file=sys.stderr,
            )
        documents.append(scaled)
    if args.format == "json":
        body = documents[0] if len(documents) == 1 else {"schedules": documents}
        return json.dumps(body, indent=2, allow_nan=False) + "\n"
    objects = yaml.safe_dump_all(documents, sort_keys=False, width=1_000_000, allow_unicode=True) if documents else ""
    return "".join(estimate_comment(plan) for plan in plans) + "".join(flat) + objects


def _write(text: str) -> None:
    """Print, and stay quiet when the reader left early (`capcon plan ... --json | head`)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
