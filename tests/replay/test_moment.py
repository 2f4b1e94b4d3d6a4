"""The go-to box's time: what it reads, and an error that names what it accepts."""

from __future__ import annotations

from datetime import datetime

import pytest

from console.replay.moment import parse_goto
from tests.replay.recording import T0


def test_the_go_to_box_reads_times_of_day_on_the_day_replayed_and_steps_from_the_moment_shown():
    shown = T0 - 3 * 86400.0  # days before today: HH:MM is on the day replayed, not today
    day = datetime.fromtimestamp(shown).date()
    assert datetime.fromtimestamp(parse_goto("14:05:30", shown)).date() == day
    assert datetime.fromtimestamp(parse_goto("14:05:30", shown)).strftime("%H:%M:%S") == "14:05:30"
    assert parse_goto("+30s", shown) == shown + 30.0
    assert parse_goto("-5m", shown) == shown - 300.0


@pytest.mark.parametrize("typed", ["soon", "25:00", ""])
def test_an_unreadable_time_says_what_the_go_to_box_accepts(typed):
    with pytest.raises(ValueError) as raised:
        parse_goto(typed, T0)
    said = str(raised.value)
    assert "(today)" not in said and "-15m" not in said
    for accepted in ("14:05", "14:05:30", "on the day replayed", "ISO", "-5m", "+30s", "from the moment shown"):
        assert accepted in said
    assert said.count("expected") == 1
