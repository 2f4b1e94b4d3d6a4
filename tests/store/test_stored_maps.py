"""A stored JSON map (a poll's figures, a flag's figures, an event's detail) that holds something else.

capcon writes only maps there; a file edited by hand, or written by something else, may hold a list or a
number. Reading such a file gives those entries as unknown (None), never a crash of the reader."""

from __future__ import annotations

from console.fleet.flags import Flag
from console.metrics.figures import Figures, FleetFigures
from console.store.database import Store
from console.store.records import FlagChange, PollRecord

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def test_a_stored_map_that_is_not_a_map_reads_as_unknown(tmp_path):
    path = tmp_path / "history.db"
    store = Store.open(path)
    replica = Figures("r0", "http://r0.test/metrics", "up", requests_per_second=2.0)
    fleet = FleetFigures(60.0, "prometheus", (replica,), Figures("fleet", "", "up"), T0)
    flag = Flag("kv:r0", "kv", "r0", "warning", T0, "why", "todo")
    change = FlagChange("raised", flag, replica)
    poll_id = store.write_poll(
        PollRecord("prom", T0, T0, "prometheus", 60.0, 15.0, None, figures=fleet, flag_changes=(change,))
    )
    store.write_event(T0, "switched", "prom", "gateway", {"mode": "hosted"})
    assert store.poll(poll_id).figures is not None  # as written: maps all

    for table, column in (("polls", "figures"), ("flag_events", "figures"), ("events", "detail")):
        store.connection.execute(f"UPDATE {table} SET {column} = '[1, 2]'")
    store.close()

    reader = Store.open(path, read_only=True)
    poll = reader.poll(poll_id)
    assert poll.figures is None and poll.results == ()
    [event] = reader.flag_events()
    assert event.figures is None and event.why == "why"
    [note] = reader.events()
    assert note.detail is None and note.kind == "switched"
    reader.close()
