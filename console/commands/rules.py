"""`capcon rules PLAN`: the plan's figures and flags as a Prometheus rule file (console/engines/rules.py)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from console.args import SubParsers

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
    "The selector is --selector, else the plan's fleet.selector. A plan with neither gets one chosen for it, said "
    'in the file\'s header and on stderr: with fleet.targets, those instances (instance=~"host:port|...", the '
    'instance label Prometheus gives each target by default); otherwise job="vllm", the job name in vLLM\'s '
    "example Prometheus configuration. Give --selector when your scrape config labels the fleet otherwise.\n\n"
    "exit status: 0 written; 2 the plan is invalid, the selector is not one, or an option is bad.\n"
    "examples:\n"
    "  capcon rules plans/internal-assistant-18rps.yaml --selector 'job=\"vllm\"' --output capcon-rules.yml\n"
    '  capcon rules plans/assistant-70b.yaml --selector \'namespace="prod", app="vllm"\' --output r.yml\n'
    "  promtool check rules r.yml"
)


def add_parser(sub: SubParsers) -> argparse.ArgumentParser:
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
        help="PromQL label matchers of the fleet's vLLM series, e.g. 'job=\"vllm\"' (default: the plan's "
        'fleet.selector, else its fleet.targets\' instances, else job="vllm")',
    )
    parser.add_argument(
        "--window",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds the rates and percentiles cover (default 60, the console's)",
    )
    parser.add_argument(
        "--output",
        default=None,
        metavar="FILE",
        help="write the rule file here: a file is replaced whole or not at all, a device or pipe written through; "
        "default (or -) stdout",
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    # YAML, the plan's estimate and the rule generator only when a file is written (`--help` starts without them).
    import yaml

    from console.bench.estimate import estimate_comment, load_plan
    from console.engines.rule_selector import chosen_selector
    from console.engines.rules import YEARS_COVERED, RuleOptions, rule_file
    from console.output_file import refuse_output, write_whole
    from console.store.paths import default_history_path

    refuse_output(args.output, default_history_path(), "a rule file")  # before a plan is read or estimated
    plan = load_plan(args.file)
    chosen = chosen_selector(plan, args.selector)
    year = time.gmtime().tm_year  # the clock is read here, never in the pure generator
    options = RuleOptions(selector=chosen.selector, window_seconds=args.window, first_year=year)
    document = rule_file(plan, options)
    header = (
        f"# Prometheus rules for plan {plan.name!r}, written by `capcon rules`: regenerate them when the plan\n"
        f"# changes; they know the plan's clock ({plan.timezone}) from {year} to {year + YEARS_COVERED - 1}.\n"
        + estimate_comment(plan)
    )
    if chosen.guessed:
        # The selector is a guess at the scrape config's labels: the file and the terminal both say so.
        header += (
            f"# The plan gives no fleet.selector: these rules select {chosen.selector} ({chosen.why}).\n"
            "# Regenerate with --selector MATCHERS, or set fleet.selector, if the fleet's series are labelled otherwise.\n"
        )
        print(
            f"capcon rules: no fleet.selector: the rules select {chosen.selector} ({chosen.why}); "
            "give --selector MATCHERS if your fleet's series are labelled otherwise",
            file=sys.stderr,
        )
    text = header + yaml.safe_dump(document, sort_keys=False, width=1_000_000, allow_unicode=True)
    if args.output in (None, "-"):
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    write_whole(args.output, text)
    return 0
