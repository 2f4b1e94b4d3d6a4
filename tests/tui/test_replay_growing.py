"""The replay console on a file a recorder is still writing: End and `g` reach the polls written since it opened."""

from __future__ import annotations

import pytest

from console.replay.loader import shown_time
from console.store.database import Store
from tests.replay.recording import T0, Incident, record_synthetic
from tests.tui.test_replay import close_files, header, replay_app, settled  # noqa: F401 - close_files closes the replays

pytestmark = pytest.mark.timeout(120)
QUIET = Incident(down_replica=None, queue_replica=None)


async def test_end_and_go_to_reach_polls_written_while_the_replay_is_open(tmp_path):
    path = tmp_path / "history.sqlite"
    first = record_synthetic(path, 120.0, replicas=2, interval=5.0, incident=QUIET, keep_views=False, plan_path=None)
    writer = Store.open(path)  # a recorder holding the file open
    try:
        app = replay_app(path, "--paused")
        async with app.run_test(size=(120, 40)) as pilot:
            await settled(pilot)
            await pilot.press("end")
            await settled(pilot, T0 + 120.0)
            assert any("the recorder may still be writing" in n.message for n in app._notifications)
            more = record_synthetic(
                path,
                60.0,
                interval=5.0,
                incident=QUIET,
                keep_views=False,
                plan_path=None,
                start=T0 + 125.3,
                carry_on=first,
                jitter=0.5,
            )
            await pilot.press("end")
            await settled(pilot, more.times[-1])
            assert f"REPLAY {shown_time(more.times[-1])} ×1 ‖" in header(app)
            assert "· age 0s ·" in header(app)
            # `g` to the second of a poll written since: that poll, age 0, and `.` moves on to the next one.
            await pilot.press("g", *shown_time(more.times[3])[-8:], "enter")
            await settled(pilot, more.times[3])
            assert app.views[0].now == more.times[3] and "· age 0s ·" in header(app)
            await pilot.press("full_stop")
            await settled(pilot, more.times[4])
            assert f"REPLAY {shown_time(more.times[4])} ×1 ‖" in header(app)
    finally:
        writer.close()
