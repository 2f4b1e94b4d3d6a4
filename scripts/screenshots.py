"""Export SVG screenshots of the console from a simulated fleet: `python scripts/screenshots.py [OUT_DIR]`.

The real pipeline runs end to end: simulated vLLM replicas on loopback, the
scrape source, the watcher, the console. One fleet is pushed over its plan (a
traffic spike) with a replica taken down, so the flags panel has work to show.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from console.commands.demo import demo_handle
from console.plan.schema import load_plan
from console.sim.fleet import SimFleet
from console.store.recorder import Recorder
from console.tui.app import DEFAULT_THEME, ConsoleApp

PLANS = (REPO / "plans" / "internal-assistant-18rps.yaml", REPO / "plans" / "chat-8b-l40s.yaml")
WINDOW_SECONDS = 20.0
POLLS_BEFORE_SHOT = 45  # one a second: the window fills and the flags pass their minimum duration
SPIKE_SECONDS_BEFORE_SHOT = 14


def handle_for(sim: SimFleet, plan):
    # The same wiring as `capcon demo`: the real scrape source, the plan read at the simulated hour.
    return demo_handle(sim, plan, WINDOW_SECONDS, interval_seconds=1.0)


async def run_for(pilot, seconds: float) -> None:
    for _ in range(int(seconds * 10)):
        await pilot.pause(0.1)


async def shoot(out: Path) -> list[Path]:
    plans = [load_plan(str(path)) for path in PLANS]
    saved: list[Path] = []
    history = Path(tempfile.mkdtemp()) / "history.sqlite"  # what the console records, for the replay shot
    recorder = Recorder(history)
    recorder.start()
    async with SimFleet(plans[0], replicas=5, seed=1) as busy, SimFleet(plans[1], replicas=3, seed=2) as calm:
        fleets = [handle_for(busy, plans[0]), handle_for(calm, plans[1])]
        app = ConsoleApp(fleets, interval=1.0, demo=busy, theme=DEFAULT_THEME, recorder=recorder)
        async with app.run_test(size=(120, 40)) as pilot:
            await run_for(pilot, 5)
            busy.spike(3.0, 120.0)
            await busy.fault(3, "down")
            # Seconds into the spike, before any flag has lasted its minimum duration: cells over their
            # limits are already marked and the rows read pending, not ok.
            await run_for(pilot, SPIKE_SECONDS_BEFORE_SHOT)
            await pilot.press("enter")
            await pilot.resize_terminal(80, 24)
            await run_for(pilot, 2)
            saved.append(Path(app.save_screenshot("fleet-80x24-spike.svg", str(out))))
            await pilot.resize_terminal(120, 40)
            await pilot.press("o")
            await run_for(pilot, POLLS_BEFORE_SHOT - SPIKE_SECONDS_BEFORE_SHOT - 2)
            saved.append(Path(app.save_screenshot("overview.svg", str(out))))
            await pilot.press("enter")
            await run_for(pilot, 2)
            saved.append(Path(app.save_screenshot("fleet-120x40.svg", str(out))))
            await pilot.resize_terminal(80, 24)
            await run_for(pilot, 2)
            saved.append(Path(app.save_screenshot("fleet-80x24.svg", str(out))))
            await pilot.press("down", "enter")
            await run_for(pilot, 2)
            saved.append(Path(app.save_screenshot("replica-80x24.svg", str(out))))
            await pilot.press("escape")
            await pilot.resize_terminal(100, 40)
            await pilot.press("P")
            await run_for(pilot, 2)
            saved.append(Path(app.save_screenshot("plan-100x40.svg", str(out))))
            # The what-if dialog (key i) on the spiking fleet: +1 replica over the next 15 minutes, run to its table.
            await pilot.press("escape", "i")
            await run_for(pilot, 1)
            await pilot.press("enter")
            for _ in range(600):  # the scenario runs in a worker: at most a minute
                if "done" in str(app.screen.query_one("#whatif-status").content):
                    break
                await run_for(pilot, 0.1)
            await run_for(pilot, 1)
            saved.append(Path(app.save_screenshot("whatif-100x40.svg", str(out))))
            # The demo's fault menu, after its key g made replica-1's /metrics return garbage.
            await pilot.press("escape")
            await pilot.resize_terminal(100, 30)
            await pilot.press("down", "down", "f", "g")
            await run_for(pilot, 4)
            await pilot.press("f")
            await run_for(pilot, 1)
            saved.append(Path(app.save_screenshot("demo-faults-100x30.svg", str(out))))
    recorder.close()
    saved.append(await shoot_replay(history, plans[0].name, out))
    saved += await shoot_overflow(plans[0], out)
    return saved


async def shoot_overflow(plan, out: Path) -> list[Path]:
    """`capcon demo`'s overflow story: the fleet behind its gateway saturated at the peak in pass, the panel
    suggesting the plan's mode; then the switch dialog at 80x24 once the bounded queue is applied."""
    from dataclasses import replace

    from console.commands.demo_front import demo_front

    saved: list[Path] = []
    async with (
        SimFleet(plan, replicas=5, seed=3, speed=60.0, start_week_seconds=9 * 3600 + 45 * 60, traffic="off") as sim,
        demo_front(plan, sim) as front,
    ):
        handle = replace(handle_for(sim, front.plan), gateways=(front.gateway.url,))
        app = ConsoleApp([handle], interval=1.0, demo=sim, theme=DEFAULT_THEME, environ=front.environ, actor="alice")
        async with app.run_test(size=(120, 40)) as pilot:
            await run_for(pilot, 5)
            sim.spike(3.0, 180.0)
            for _ in range(900):  # until the flags rise and the panel suggests the plan's mode (at most 90 s)
                lines = app.screen.query("OverflowPanel")
                if lines and "plan says" in str(lines.first().content):
                    break
                await run_for(pilot, 0.1)
            await run_for(pilot, 1)
            saved.append(Path(app.save_screenshot("overflow-120x40.svg", str(out))))
            await pilot.resize_terminal(80, 24)
            await pilot.press("m")
            await run_for(pilot, 1)
            await pilot.press("2", "tab", "tab", "tab", "tab", *"spike at the peak: shed the excess", "enter")
            await run_for(pilot, 0.5)
            await pilot.press("enter")
            await run_for(pilot, 3)
            saved.append(Path(app.save_screenshot("overflow-switch-80x24.svg", str(out))))
    return saved


async def shoot_replay(history: Path, fleet: str, out: Path) -> Path:
    """`capcon replay` on what the console above recorded, paused 20 s before the end, when the flags were up."""
    from console.commands.replay import open_app

    args = argparse.Namespace(db=str(history), fleet=[fleet], start=None, end=None, speed=1.0, paused=True, theme=None)
    app = open_app(args)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await run_for(pilot, 1)
            await pilot.press("end")
            await run_for(pilot, 2)
            for _ in range(20):
                await pilot.press("comma")
            await run_for(pilot, 2)
            return Path(app.save_screenshot("replay-120x40.svg", str(out)))
    finally:
        app.driver.controller.replay.close()


def main() -> int:
    out = (Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "screenshots").resolve()
    os.chdir(REPO)  # the plan screen names its file relative to here
    out.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(shoot(out)):
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
