"""`capcon demo` in a real terminal at 200x50: the fleet table's GPU columns (SM, tensor, DRAM, FB) are shown and
rise after a spike (key x), as a person at that terminal sees them. The screens are saved beside the test's files."""

from __future__ import annotations

import shutil
import sys
import time

import pytest

from .tmux import Tmux

if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed: the GPU columns' terminal test needs it", allow_module_level=True)

# The demo's start and a spike's climb take half a minute or more: the slow lane.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GPU_COLUMNS = ("SM", "tensor", "DRAM", "FB")


def header(screen: str) -> str:
    return next((line for line in screen.splitlines() if " replica " in line and " SM " in line), "")


def gpu_cells(screen: str, name: str) -> dict[str, str]:
    """The GPU columns of the table's row for `name` (its last four cells, as the header's last four titles)."""
    row = next((line for line in screen.splitlines() if f" {name} " in line[:30]), "")
    cells = row.split()
    return dict(zip(GPU_COLUMNS, [c.rstrip("!") for c in cells[-4:]], strict=True)) if len(cells) >= 4 else {}


def share(cell: str) -> float | None:
    """'42%' -> 0.42; unknown ('–') or not a percent -> None."""
    if not cell.endswith("%"):
        return None
    try:
        return float(cell[:-1]) / 100
    except ValueError:
        return None


def fleet_shares(screen: str) -> dict[str, float | None]:
    cells = gpu_cells(screen, "FLEET")
    return {title: share(cells.get(title, "")) for title in ("SM", "tensor", "DRAM")}


def test_demo_shows_the_gpu_columns_and_they_rise_after_a_spike(tmp_path):
    # pytest's environment says COLUMNS=80, LINES=24, which Textual would take over the terminal's own size.
    command = f"env -u COLUMNS -u LINES {sys.executable} -m console demo --seed 3; echo CAPCON-EXIT=$?; sleep 60"
    tmux = Tmux(command, width=200, height=50)
    try:
        # The demo's own traffic first: every share known, the SMs busy with it (at start they read 0%).
        before = tmux.wait_until(
            lambda s: (
                "FLEET 5/5" in s
                and all(v is not None for v in fleet_shares(s).values())
                and (fleet_shares(s)["SM"] or 0) >= 0.5
            ),
            "the fleet's GPU shares under the demo's traffic",
            seconds=60,
        )
        (tmp_path / "before.txt").write_text(before)
        titles = header(before).split()
        assert titles[-4:] == list(GPU_COLUMNS), f"the GPU columns close the table at 200 columns: {titles}"
        for index in range(5):
            cells = gpu_cells(before, f"replica-{index}")
            assert all(share(cells[t]) is not None for t in ("SM", "tensor", "DRAM")), cells
            assert cells["FB"].endswith("GB") and float(cells["FB"][:-2]) > 0, cells  # reserved at start
        # The calm level: the highest the fleet's shares read over a few more seconds of the demo's traffic.
        calm = fleet_shares(before)
        for _ in range(8):
            time.sleep(0.5)
            screen = tmux.screen()
            now = fleet_shares(screen)
            calm = {k: max(v, now[k] or 0.0) if v is not None else now[k] for k, v in calm.items()}
        (tmp_path / "calm.txt").write_text(screen)

        tmux.keys("x")
        tmux.wait_for("traffic x3")
        # Three times the traffic: the prefills drive the tensor pipes, whose share climbs to twice its calm level
        # and more (the demo's own ramp alone moves it a few points in these seconds).
        goal = max(calm["tensor"] + 0.15, 2 * calm["tensor"])
        after = tmux.wait_until(
            lambda s: (t := fleet_shares(s)["tensor"]) is not None and t >= goal,
            f"the fleet's tensor share past {goal:.0%} (calm: {calm['tensor']:.0%})",
            seconds=60,
        )
        (tmp_path / "after.txt").write_text(after)
        busy = fleet_shares(after)
        assert busy["SM"] is not None and busy["SM"] >= calm["SM"] - 0.05, (calm, busy)  # the SMs no less busy
        for index in range(5):
            cells = gpu_cells(after, f"replica-{index}")
            assert share(cells["tensor"]) is not None and share(cells["tensor"]) > calm["tensor"], cells
        assert "Traceback" not in after

        tmux.keys("C-c")
        assert "CAPCON-EXIT=0" in tmux.wait_for("CAPCON-EXIT=", seconds=15)
    finally:
        tmux.close()
