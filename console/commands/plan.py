"""`capcon plan FILE`: size a fleet from a plan file, optionally with the week's schedule (docs/method.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from console.plan import catalog
from console.plan.report import render, to_json
from console.plan.schedule import schedule
from console.plan.schema import load_plan
from console.plan.sizing import size

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
    "  capcon plan plans/chat-8b-l40s.yaml --schedule --json | jq .replicas_by_hour"
)


def add_parser(sub):
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
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    # Every file is loaded and sized before anything is printed: a bad one among several stops
    # the run with its file:line message and exit 2, and no script reads half a report.
    reports = [_report(path, args.schedule) for path in args.file]
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


def _report(path: str, with_schedule: bool):
    """(file, sizing, JSON figures, text report) of one plan file; a PlanError (exit 2) for a bad one."""
    plan = load_plan(path)
    sizing = size(plan)
    week = schedule(plan) if with_schedule else None
    return path, sizing, to_json(sizing, week), render(sizing, week, path)


def _write(text: str) -> None:
    """Print, and stay quiet when the reader left early (`capcon plan ... --json | head`)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
