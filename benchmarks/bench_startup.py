"""CPU seconds of `capcon` start-up per verb, against `python -c pass` measured in the same run.

    python benchmarks/bench_startup.py [--runs 7] [--source DIR]

Each command runs in a fresh interpreter, `--runs` times; its CPU time is the child's user + system
seconds (os.wait4's resource usage), and the figure printed is the median, with its ratio to the
median of `python -c pass` (the interpreter's own start-up, site and the editable install included).
Measured: `capcon --version`, `capcon --help`, `capcon VERB --help` for every verb, `capcon overflow
status --help`, and `capcon overflow status` against a loopback port that refuses at once (the
runbook's read: start-up, one refused connection, the answer printed).

The commands run what `capcon` runs (console.cli.main) through `python -c`, so that `--source DIR`
can time another checkout of the same code (e.g. `git archive HEAD~3 console | tar -x -C /tmp/before`)
on the same machine: the commands run in DIR, which `python -c` puts first on sys.path (ahead of the
editable install's finder).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What the `capcon` console script does, with the words after `-c` as its arguments.
LAUNCH = "import re, sys\nfrom console.cli import main\nsys.exit(main())"
TOKEN_VARIABLE = "CAPCON_BENCH_ADMIN_TOKEN"


def child_cpu_seconds(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system CPU seconds of one run of `argv` in `cwd` (its output thrown away)."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def median_cpu(argv: list[str], env: dict[str, str], cwd: Path, runs: int) -> float:
    return statistics.median(child_cpu_seconds(argv, env, cwd) for _ in range(runs))


def refusing_address() -> str:
    """A loopback port nothing listens on: a connection there is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def commands(verbs: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    out = [("--version", ["--version"]), ("--help", ["--help"])]
    out += [(f"{verb} --help", [verb, "--help"]) for verb in verbs]
    out.append(("overflow status --help", ["overflow", "status", "--help"]))
    out.append(
        (
            "overflow status (refused)",
            ["overflow", "status", "--gateway", refusing_address(), "--admin-token-env", TOKEN_VARIABLE],
        )
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each command; the median is shown")
    parser.add_argument("--source", type=Path, default=None, help="time the code in this checkout instead")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: expected at least 1")
    env = dict(os.environ, **{TOKEN_VARIABLE: "bench-token-" + "x" * 32})
    source = (args.source or REPO).resolve()
    where = "import console.cli; print(console.cli.__file__); print(' '.join(console.cli.VERBS))"
    answer = subprocess.run([sys.executable, "-c", where], env=env, cwd=source, capture_output=True, text=True)
    lines = answer.stdout.splitlines()
    if len(lines) != 2 or not Path(lines[0]).resolve().is_relative_to(source):
        print(
            f"bench_startup: console.cli does not come from {source}: {answer.stdout or answer.stderr}", file=sys.stderr
        )
        return 2
    verbs = tuple(lines[1].split())

    baseline = median_cpu([sys.executable, "-c", "pass"], env, source, args.runs)
    print(f"source: {source}")
    print(f"baseline `python -c pass`: {baseline * 1000:.1f} ms CPU (median of {args.runs})")
    print(f"{'command':<28} {'CPU ms':>8} {'x pass':>8} {'over pass ms':>13}")
    figures = []
    for label, words in commands(verbs):
        seconds = median_cpu([sys.executable, "-c", LAUNCH, *words], env, source, args.runs)
        figures.append(seconds)
        print(
            f"capcon {label:<21} {seconds * 1000:>8.1f} {seconds / baseline:>8.1f} {(seconds - baseline) * 1000:>13.1f}"
        )
    print(f"worst: {max(figures) * 1000:.1f} ms CPU, {max(figures) / baseline:.1f}x `python -c pass`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
