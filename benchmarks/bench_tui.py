"""Bytes the console writes to its terminal each second, beside Textual's DataTable on the same data.

Over SSH every byte counts. Each case runs in its own tmux session at 120x40
with one refresh a second; once the first screen is drawn and has settled,
`tmux pipe-pane` copies what the program writes to its terminal into a file
for a fixed time, and the child's CPU time is read from /proc over the same
time. Cases, all in the same run:

- console, 50 replicas, every figure changing each refresh (the real
  ConsoleApp: table, plan panel, trends, flags, header; a watcher double
  feeds it, no network);
- console, 50 replicas, nothing changing (only the data age moves);
- baseline: a DataTable as tall as the console's table, its cells set with
  `update_cell` each refresh from the same figures, changing and not;
- console, 200 replicas, changing: CPU time per refresh.

    .venv/bin/python benchmarks/bench_tui.py [--seconds 7] [--settle 2]

The last line is `bytes_ratio_vs_datatable: N` (console / DataTable, both with
every figure changing). Targets: under 4 KB/s and under 50 ms per refresh.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WIDTH, HEIGHT = 120, 40
PLAN = REPO / "plans" / "internal-assistant-18rps.yaml"
TICKS = os.sysconf("SC_CLK_TCK")
READY_MARK = "bench"  # the child's status file: "bench PID REFRESHES", rewritten at each refresh


# --- the data both apps show -------------------------------------------------


def fleet_figures(replicas: int, tick: int, now: float):
    """`replicas` replicas near the plan's per-replica load; with tick > 0 every figure moves each refresh."""
    from console.metrics.figures import Figures, FleetFigures

    rows = []
    for i in range(replicas):
        wobble = ((i * 7 + tick * 13) % 29) / 29.0  # 0..1, different per replica and per tick
        rows.append(
            Figures(
                name=f"replica-{i:03d}",
                url=f"http://10.0.{i // 250}.{i % 250}:8000/metrics",
                state="up",
                requests_per_second=0.30 + 0.1 * wobble,
                prompt_tokens_per_second=600.0 + 300.0 * wobble,
                generation_tokens_per_second=140.0 + 60.0 * wobble,
                running=8.0 + round(6 * wobble),
                waiting=0.0,
                kv_usage=0.30 + 0.3 * wobble,
                kv_capacity_tokens=220_000.0,
                preemptions_per_second=0.0,
                prefix_hit_share=0.31 + 0.1 * wobble,
                ttft_p50_seconds=0.15 + 0.1 * wobble,
                ttft_p95_seconds=0.45 + 0.3 * wobble,
                tpot_p95_seconds=0.025 + 0.01 * wobble,
                e2e_p95_seconds=11.0 + 4.0 * wobble,
                queue_p95_seconds=0.02 + 0.05 * wobble,
                mean_input_tokens=2000.0 + 200 * wobble,
                mean_output_tokens=390.0 + 40 * wobble,
                data_age_seconds=1.0,
            )
        )

    def total(attr: str) -> float:
        return sum(getattr(r, attr) for r in rows)

    def worst(attr: str) -> float:
        return max(getattr(r, attr) for r in rows)

    fleet = Figures(
        name="fleet",
        url="",
        state="up",
        requests_per_second=total("requests_per_second"),
        prompt_tokens_per_second=total("prompt_tokens_per_second"),
        generation_tokens_per_second=total("generation_tokens_per_second"),
        running=total("running"),
        waiting=total("waiting"),
        kv_usage=worst("kv_usage"),
        preemptions_per_second=0.0,
        prefix_hit_share=worst("prefix_hit_share"),
        ttft_p50_seconds=worst("ttft_p50_seconds"),
        ttft_p95_seconds=worst("ttft_p95_seconds"),
        tpot_p95_seconds=worst("tpot_p95_seconds"),
        e2e_p95_seconds=worst("e2e_p95_seconds"),
        queue_p95_seconds=worst("queue_p95_seconds"),
        mean_input_tokens=worst("mean_input_tokens"),
        mean_output_tokens=worst("mean_output_tokens"),
    )
    return FleetFigures(window_seconds=60.0, source="scrape", replicas=tuple(rows), fleet=fleet, at=now - 0.5)


def report_refresh(status_file: str, refreshes: int) -> None:
    """Tell the parent this child's pid and how many refreshes it has made (a busy machine makes fewer)."""
    Path(status_file).write_text(f"{READY_MARK} {os.getpid()} {refreshes}")


class BenchWatcher:
    """Stands in for the watcher: no network, figures that move (or not) at each poll."""

    def __init__(self, replicas: int, changing: bool, status_file: str) -> None:
        self.replicas = replicas
        self.changing = changing
        self.status_file = status_file
        self.polls = 0

    window_seconds = 60.0

    async def poll(self):
        from console.live.watcher import Poll

        self.polls += 1
        report_refresh(self.status_file, self.polls)
        figures = fleet_figures(self.replicas, self.polls if self.changing else 0, time.time())
        return Poll(figures, None, figures.at, figures.window_seconds, 1.0)

    async def aclose(self) -> None:
        pass


# --- the children: what runs inside tmux ---------------------------------------


def run_console(replicas: int, changing: bool, ready_file: str) -> None:
    from console.live.handle import FleetHandle
    from console.plan.schema import load_plan
    from console.tui.app import DEFAULT_THEME, ConsoleApp

    plan = load_plan(str(PLAN))
    watcher = BenchWatcher(replicas, changing, ready_file)
    ConsoleApp([FleetHandle(plan.name, plan, watcher)], interval=1.0, theme=DEFAULT_THEME).run()


def run_datatable(replicas: int, changing: bool, ready_file: str) -> None:
    from textual.app import App
    from textual.widgets import DataTable

    from console.fleet.columns import CONSOLE_COLUMNS as COLUMNS
    from console.fleet.view import Row
    from console.tui.app import DEFAULT_THEME
    from console.tui.widgets.table_row import cell

    keys = [c.key for c in COLUMNS]

    class DataTableBaseline(App):
        # As tall as the console's fleet table (at most half the screen): the same rows in view.
        CSS = "DataTable { height: 50%; }"

        def compose(self):
            yield DataTable(cursor_type="row")

        def on_mount(self) -> None:
            self.theme = DEFAULT_THEME
            self.polls = 0
            table = self.query_one(DataTable)
            for column in COLUMNS:
                table.add_column(column.console.title, key=column.key)
            for figures in fleet_figures(replicas, 0, time.time()).replicas:
                table.add_row(*(cell(Row(figures.name, figures, None), k) for k in keys), key=figures.name)
            self.set_interval(1.0, self.refresh_cells)
            self.call_after_refresh(report_refresh, ready_file, 0)

        def refresh_cells(self) -> None:
            self.polls += 1
            report_refresh(ready_file, self.polls)
            table = self.query_one(DataTable)
            for figures in fleet_figures(replicas, self.polls if changing else 0, time.time()).replicas:
                row = Row(figures.name, figures, None)
                for key in keys:
                    table.update_cell(figures.name, key, cell(row, key))

    DataTableBaseline().run()


# --- the measurement -----------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def tmux(*arguments: str) -> str:
    return subprocess.run(["tmux", *arguments], capture_output=True, text=True, check=True).stdout


def child_status(status_file: Path) -> tuple[int, int] | None:
    """(pid, refreshes so far) from the child's status file, or None before its first screen."""
    try:
        mark, pid, refreshes = status_file.read_text().split()
    except (FileNotFoundError, ValueError):  # not written yet, or caught mid-write
        return None
    return (int(pid), int(refreshes)) if mark == READY_MARK else None


def measure(app: str, replicas: int, changing: bool, seconds: float, settle: float) -> tuple[float, float, float]:
    """Bytes per second written to the terminal, CPU seconds per refresh, refreshes per second: one case at steady state."""
    session = f"capcon-bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as scratch:
        ready, captured = Path(scratch) / "ready", Path(scratch) / "captured"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            app,
            "--replicas",
            str(replicas),
            "--ready-file",
            str(ready),
        ] + (["--changing"] if changing else [])
        tmux(
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(WIDTH),
            "-y",
            str(HEIGHT),
            "-c",
            str(REPO),
            " ".join(f"'{part}'" for part in command),
        )
        try:
            deadline = time.monotonic() + 30
            while child_status(ready) is None:
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"{app}: no first screen in 30 s; the pane shows:\n{tmux('capture-pane', '-p', '-t', session)}"
                    )
                time.sleep(0.1)
            time.sleep(settle)  # the first full paint and the first polls are not steady state
            pid, refreshes_before = child_status(ready)
            cpu_before = cpu_seconds(pid)
            tmux("pipe-pane", "-o", "-t", session, f"cat > '{captured}'")
            started = time.monotonic()
            time.sleep(seconds)
            tmux("pipe-pane", "-t", session)  # no command: stop copying
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(pid) - cpu_before
            refreshes = (child_status(ready) or (pid, refreshes_before))[1] - refreshes_before
            time.sleep(0.2)  # let cat drain what tmux handed it
            return captured.stat().st_size / elapsed, cpu / max(refreshes, 1), refreshes / elapsed
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=7.0, help="measured seconds per case (default 7)")
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds after the first screen before measuring (default 2)"
    )
    parser.add_argument("--child", choices=("console", "datatable"), help=argparse.SUPPRESS)
    parser.add_argument("--replicas", type=int, default=50, help=argparse.SUPPRESS)
    parser.add_argument("--changing", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ready-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "console":
        run_console(args.replicas, args.changing, args.ready_file)
        return 0
    if args.child == "datatable":
        run_datatable(args.replicas, args.changing, args.ready_file)
        return 0
    if shutil.which("tmux") is None:
        print("tmux is not installed: this benchmark reads what reaches a real terminal through tmux", file=sys.stderr)
        return 2

    print(
        f"terminal {WIDTH}x{HEIGHT}, one refresh a second, {args.seconds:g} s measured per case after {args.settle:g} s settling"
    )
    cases = [
        ("console, 50 replicas, figures changing", "console", 50, True),
        ("console, 50 replicas, nothing changing", "console", 50, False),
        ("DataTable update_cell, 50 replicas, figures changing", "datatable", 50, True),
        ("DataTable update_cell, 50 replicas, nothing changing", "datatable", 50, False),
        ("console, 200 replicas, figures changing", "console", 200, True),
    ]
    results = {}
    busy = False
    for label, app, replicas, changing in cases:
        rate, cpu, refresh_rate = measure(app, replicas, changing, args.seconds, args.settle)
        results[(app, replicas, changing)] = rate
        busy = busy or refresh_rate < 0.8
        print(f"{label:<53} {rate / 1000:6.2f} KB/s  {cpu * 1000:5.1f} ms CPU/refresh  {refresh_rate:4.2f} refreshes/s")
    if busy:
        print("note: a case made fewer than 0.8 refreshes a second (a busy machine): its KB/s reads low, run again")
    ratio = results[("console", 50, True)] / results[("datatable", 50, True)]
    print(f"bytes_ratio_vs_datatable: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
