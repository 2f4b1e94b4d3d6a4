"""`capcon record` against a thousand targets with faults: is every interval's poll written?

    python benchmarks/bench_record_faults.py [--targets 1024] [--faulty 3] [--interval 2] [--intervals 30]
                                             [--timeout 0.3]

A child process serves TARGETS /metrics paths (tests/sources/faulty_fleet.py): FAULTY in every 8 hang, reset,
close, trickle or cut their page, the rest answer the project's real vLLM 0.32 capture. `capcon record` then
polls them for INTERVALS intervals into a fresh history file. Printed: the polls the intervals call for, the
polls written, the polls whose every target has its own state, and the ratio written / intervals (1.0: none
lost; the recorder stalled after one or two polls before each target's transport errors became its own state).
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.sources.faulty_fleet import faulty_fleet, target_urls

PAGE = REPO / "tests" / "fixtures" / "vllm" / "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=1024)
    parser.add_argument("--faulty", type=int, default=3, help="faulty targets in every 8")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--intervals", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=0.3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, faulty_fleet(PAGE, args.faulty) as base:
        db = Path(folder) / "history.sqlite"
        targets = [word for url in target_urls(base, args.targets) for word in ("--target", url)]
        done = subprocess.run(
            [sys.executable, "-m", "console", "record", *targets, "--db", str(db), "--interval", str(args.interval),
             "--timeout", str(args.timeout), "--duration", str(args.interval * args.intervals)],
            capture_output=True, text=True, cwd=REPO, env={"XDG_DATA_HOME": folder, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        with sqlite3.connect(db) as connection:
            written = connection.execute("SELECT count(*) FROM polls").fetchone()[0]
            whole = connection.execute(
                "SELECT count(*) FROM (SELECT poll_id FROM samples GROUP BY poll_id HAVING count(*) = ?)",
                (args.targets,),
            ).fetchone()[0]
    said = re.findall(r"stopped: (\d+) polls? written", done.stdout)
    print(
        f"targets: {args.targets} ({args.faulty} in 8 faulty), interval {args.interval:g} s, timeout {args.timeout:g} s"
    )
    print(f"exit status: {done.returncode}; stderr lines: {len(done.stderr.splitlines())}")
    for line in done.stderr.splitlines()[:5]:
        print(f"  {line[:200]}")
    print(f"polls the intervals call for: {args.intervals}")
    print(f"polls written: {written} (record said {said[0] if said else '?'}); with every target's state: {whole}")
    print(f"ratio_written_per_interval: {written / args.intervals:.2f}")


if __name__ == "__main__":
    main()
