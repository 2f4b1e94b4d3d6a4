"""`capcon rules PLAN`: the plan's figures and flags as a Prometheus rule file (console/plan/rules.py)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from console.bench.estimate import estimate_comment, load_plan
from console.errors import UserError
from console.plan.rules import YEARS_COVERED, RuleOptions, rule_file

DESCRIPTION = """\
Write a Prometheus rule file for a plan, so Prometheus and Alertmanager carry the
console's judgement around the clock:

  recording rules  the figures the console shows: per replica request, token and
                   preemption rates, waiting, running, KV usage; for the fleet the
                   rates and the windowed p50/p95/p99 TTFT, p95 TPOT, ITL, end-to-end
                   and queue time (histogram_quantile over summed bucket rates), for
                   every vLLM metric name the console reads (old and new, vllm: and
                   vllm_), under the plan's selector;
  the plan         the hour of the week on the plan's clock (time zone and daylight
                   saving), the replicas the schedule has serving then and their capacity;
  alerts           the console's flags: saturation, SLO breaches (TTFT, TPOT, end-to-end),
                   above the plan, N+1 at risk, replica down, behind the schedule; `for:`
                   is each flag's minimum duration, clear thresholds hold as the console's
                   do, severity labels and the console's why and do words as annotations.

Check the file with `promtool check rules FILE`; load it with `rule_files:` in prometheus.yml.
"""

EPILOG = (
    "The selector is the plan's fleet.selector unless --selector is given; a plan without one is refused (the rules "
    "would read every vLLM Prometheus holds).\n\n"
    "exit status: 0 written; 2 the plan is invalid or gives no selector, or an option is bad.\n"
    "examples:\n"
    "  capcon rules plans/internal-assistant-18rps.yaml --selector 'job=\"vllm\"' --output capcon-rules.yml\n"
    '  capcon rules plans/assistant-70b.yaml --selector \'namespace="prod", app="vllm"\' --output r.yml\n'
    "  promtool check rules r.yml"
)


def add_parser(sub):
    parser = sub.add_parser(
        "rules",
        help="a Prometheus rule file from a plan: the console's figures as recording rules, its flags as alerts",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", metavar="PLAN", help="plan file (YAML), e.g. plans/assistant-70b.yaml")
    parser.add_argument(
        "--selector",
        default=None,
        metavar="MATCHERS",
        help="PromQL label matchers of the fleet's vLLM series, e.g. 'job=\"vllm\"' (default: the plan's fleet.selector)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds the rates and percentiles cover (default 60, the console's)",
    )
    parser.add_argument(
        "--output", default=None, metavar="FILE", help="write the rule file here (whole or not at all); default stdout"
    )
    parser.set_defaults(run=run)
    return parser


def run(args) -> int:
    plan = load_plan(args.file)
    selector = args.selector if args.selector is not None else (plan.fleet.selector if plan.fleet else "")
    year = time.gmtime().tm_year  # the clock is read here, never in the pure generator
    options = RuleOptions(selector=selector, window_seconds=args.window, first_year=year)
    document = rule_file(plan, options)
    header = (
        f"# Prometheus rules for plan {plan.name!r}, written by `capcon rules`: regenerate them when the plan\n"
        f"# changes; they know the plan's clock ({plan.timezone}) from {year} to {year + YEARS_COVERED - 1}.\n"
        + estimate_comment(plan)
    )
    text = header + yaml.safe_dump(document, sort_keys=False, width=1_000_000, allow_unicode=True)
    if args.output is None:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    _write_whole(Path(args.output), text)
    return 0


def _write_whole(target: Path, text: str) -> None:
    """A temporary file beside `target`, renamed over it once written: a failure leaves `target` as it was."""
    if target.is_dir():
        raise UserError(f"--output {str(target)!r}: is a folder; expected a file path")
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    except OSError as error:
        raise UserError(f"--output {str(target)!r}: cannot write beside it ({error.strerror})") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, target)
    except OSError as error:
        os.unlink(temporary)
        raise UserError(f"--output {str(target)!r}: {error.strerror}") from None
