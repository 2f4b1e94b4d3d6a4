"""What each mode did: the gateway's `overflow_tally` periods, checked against its own counters, and `capcon history`."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.gateway.history import SwitchHistory, totals
from console.overflow.tally import COUNTS, KIND, Tally, day_modes, period
from console.store.database import Store

from .conftest import HOSTED_KEY, HOSTED_MODEL, completion, gateway, hosted_endpoint, send, sim_fleet, switch, until
from .plans import gateway_plan

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]
FLEET = "gateway-test"


def tallies(db: Path) -> list[dict]:
    store = Store.open(db, read_only=True)
    try:
        return [e.detail for e in store.events() if e.kind == KIND]
    finally:
        store.close()


async def test_tallies_add_up_to_the_gateway_counters_mode_by_mode(session, tmp_path):
    db = tmp_path / "history.sqlite"
    history = SwitchHistory(str(db), FLEET, tally_seconds=0.25)
    history.open()
    async with (
        hosted_endpoint() as endpoint,
        sim_fleet(1) as fleet,
        gateway(
            fleet.urls,
            plan=gateway_plan(prompts_may_leave=True),
            planned_cap=1,
            hosted_url=endpoint.url,
            hosted_models={"*": HOSTED_MODEL},
            hosted_key=HOSTED_KEY,
            hosted_price_per_million=2.0,
            history=history,
        ) as server,
    ):
        assert (await switch(session, server, mode="bounded_queue", max_queue=1, max_wait_seconds=0.3)).status == 200
        holder = asyncio.create_task(send(session, server.url, completion(max_tokens=40, stream=True)))
        assert await until(lambda: server.in_flight() == 1)
        answers = await asyncio.gather(*(send(session, server.url, completion()) for _ in range(6)))
        assert {a.status for a in answers} <= {200, 429, 503} and any(a.status == 429 for a in answers)
        # A period closes every 0.25 s here (a minute in service): wait for one during bounded_queue.
        assert await until(lambda: db.exists() and len(tallies(db)) >= 2)
        assert (await switch(session, server, mode="hosted", hosted_after_queue=0)).status == 200
        hosted = await asyncio.gather(*(send(session, server.url, completion(max_tokens=4)) for _ in range(3)))
        assert [a.headers.get("x-capcon-outcome") for a in hosted] == ["hosted"] * 3
        await holder
        assert (await switch(session, server, mode="pass")).status == 200
        local = await asyncio.gather(*(send(session, server.url, completion(max_tokens=2)) for _ in range(2)))
        assert all(a.status == 200 for a in local)
    final = totals(server)  # the gateway's own counters, after stop
    periods = tallies(db)
    # Contiguous periods from start to stop, each in the mode then in force.
    for before, after in itertools.pairwise(periods):
        assert after["start"] == before["end"]
    modes = [p["mode"] for p in periods]
    firsts = [m for i, m in enumerate(modes) if i == 0 or modes[i - 1] != m]
    assert firsts == ["bounded_queue", "hosted", "pass"]
    assert len(periods) > 4  # minute ticks, not only the switches
    # The sums of the periods are the gateway's counters, outcome by outcome and in total.
    for name in COUNTS:
        assert sum(p[name] for p in periods) == final[name], name
    by_mode = {m: {n: sum(p[n] for p in periods if p["mode"] == m) for n in COUNTS} for m in set(modes)}
    assert by_mode["hosted"]["hosted"] == 3 and by_mode["bounded_queue"]["hosted"] == 0
    assert by_mode["bounded_queue"]["rejected"] == sum(a.status == 429 for a in answers)
    assert by_mode["pass"]["local"] >= 2
    assert by_mode["hosted"]["hosted_tokens"] == final["hosted_tokens"] > 0
    cost = sum(p["hosted_cost_dollars"] for p in periods if p["mode"] == "hosted")
    assert cost == pytest.approx(final["hosted_tokens"] * 2.0 / 1e6)
    assert sum(p["seconds"] for p in periods) == pytest.approx(periods[-1]["end"] - periods[0]["start"], abs=0.01)
    assert all(p["gateway"] == server.url for p in periods)

    # `capcon history` shows them per day, in text and JSON.
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "console", "history", "--db", str(db), "--by", "day",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO, env=dict(os.environ),
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err
    text = out.decode()
    assert "overflow modes per day" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert set(rows) == {"bounded_queue", "hosted", "pass"}
    assert rows["bounded_queue"][2] == str(by_mode["bounded_queue"]["rejected"])
    assert rows["hosted"][5] == str(final["hosted_tokens"]) and rows["hosted"][6] == f"{cost:.2f}"
    assert all(len(line) <= 80 for line in text.splitlines() if "overflow" in line or line.startswith("  "))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "console", "history", "--db", str(db), "--by", "day", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO, env=dict(os.environ),
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err
    (entry,) = json.loads(out)["fleets"]
    (day,) = entry["overflow_modes"]
    assert day["modes"]["hosted"]["hosted"] == 3
    assert day["modes"]["bounded_queue"]["rejected"] == by_mode["bounded_queue"]["rejected"]


async def test_without_a_price_the_cost_is_unknown_not_zero(session, tmp_path):
    db = tmp_path / "h.sqlite"
    history = SwitchHistory(str(db), FLEET, tally_seconds=60)
    history.open()
    async with sim_fleet(1) as fleet, gateway(fleet.urls, history=history) as server:
        assert (await send(session, server.url, completion(max_tokens=2))).status == 200
    (only,) = tallies(db)
    assert only["mode"] == "bounded_queue" and only["local"] == 1 and only["hosted_cost_dollars"] is None


def test_tally_closes_nothing_before_it_begins_and_skips_empty_instants():
    tally = Tally()
    assert tally.close(5.0, {}) is None
    tally.begin(10.0, "pass", {"local": 3})
    assert tally.close(10.0, {"local": 3}) is None
    assert tally.close(12.5, {"local": 7})["local"] == 4


def test_day_modes_splits_by_day_and_takes_the_longest_gateway_time():
    day = 86_400.0
    details = [
        {"mode": "hosted", "start": 10.0, "end": 70.0, "seconds": 60.0, "hosted": 5, "hosted_tokens": 900,
         "hosted_cost_dollars": 0.5, "gateway": "a"},
        {"mode": "hosted", "start": 10.0, "end": 70.0, "seconds": 60.0, "hosted": 2, "hosted_tokens": 100,
         "hosted_cost_dollars": 0.25, "gateway": "b"},
        {"mode": "bounded_queue", "start": day + 5, "end": day + 65, "seconds": 60.0, "rejected": 9, "gateway": "a"},
    ]  # fmt: skip
    first, second = day_modes(details, [0.0, day], 2 * day)
    hosted = first.modes["hosted"]
    assert hosted.seconds == 60.0 and hosted.counts["hosted"] == 7 and hosted.counts["hosted_tokens"] == 1000
    assert hosted.hosted_cost_dollars == pytest.approx(0.75)
    assert second.start == day and second.modes["bounded_queue"].counts["rejected"] == 9


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=10),
            st.dictionaries(
                st.sampled_from(["mode", "start", "end", "seconds", *COUNTS, "hosted_cost_dollars", "gateway"]),
                st.one_of(
                    st.sampled_from(["pass", "hosted", "nonsense"]),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(-(10**30), 10**30),
                    st.booleans(),
                    st.none(),
                    st.lists(st.integers(), max_size=2),
                ),
            ),
        ),
        max_size=20,
    )
)
def test_hostile_recorded_tallies_never_break_the_summary(details):
    for detail in details:
        checked = period(detail)
        if checked is not None:
            assert checked["seconds"] >= 0 and all(checked[n] >= 0 for n in COUNTS)
    for day in day_modes(details, [0.0, 86_400.0], 172_800.0):
        for totals_ in day.modes.values():
            assert totals_.seconds >= 0
