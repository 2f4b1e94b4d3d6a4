"""`capcon plan FILE`: size a fleet from a plan file (METHOD §3-4), optionally with the week's schedule (§6)."""

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
"""

EPILOG = (
    "A plan file holds model, gpu, replica, workloads (interactive or deferrable, each with arrivals, tokens "
    "and targets), capacity, redundancy, lead_time_minutes, data, overflow and fleet; "
    "plans/assistant-70b.yaml explains every key in comments.\n\n"
    "GPU presets (gpu.preset, any case): "
    + ", ".join(catalog.PRESETS)
    + ".\n\nexit status: 0 report printed; 2 the plan file is missing or invalid "
    "(the message names file, line, key and what was expected).\n"
    "examples:\n"
    "  capcon plan plans/assistant-70b.yaml\n"
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
    parser.add_argument("file", metavar="FILE", help="plan file (YAML), e.g. plans/assistant-70b.yaml")
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
            "keys hold ideal figures, expected_* keys the figures at the plan's efficiencies"
        ),
    )
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    plan = load_plan(args.file)
    sizing = size(plan)
    week = schedule(plan) if args.schedule else None
    text = json.dumps(to_json(sizing, week), indent=2) + "\n" if args.json else render(sizing, week, args.file)
    _write(text)
    return 0


def _write(text: str) -> None:
    """Print, and stay quiet when the reader left early (`capcon plan ... --json | head`)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
