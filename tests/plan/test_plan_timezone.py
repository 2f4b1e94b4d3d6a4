"""A plan's hours are written in its team's clock: the zone is checked on load and used by the console."""

from pathlib import Path

import pytest

from console.fleet.plan_now import A_MONDAY, plan_now
from console.live.handle import FleetHandle, utc_offset_seconds
from console.plan.schema import PlanError, load_plan, parse_plan

PLANS = Path(__file__).resolve().parents[2] / "plans"


def _with_zone(zone_line: str) -> str:
    text = (PLANS / "internal-assistant-18rps.yaml").read_text()
    return text.replace("timezone: Europe/Warsaw\n", zone_line)


def test_unknown_zone_names_the_line_the_key_and_what_was_expected():
    text = _with_zone("timezone: Europe/Atlantis\n")
    line = text.splitlines().index("timezone: Europe/Atlantis") + 1
    with pytest.raises(PlanError) as error:
        parse_plan(text, "p.yaml")
    message = str(error.value)
    assert message.startswith(f"p.yaml:{line}: timezone: unknown time zone 'Europe/Atlantis'")
    assert "IANA" in message


def test_zone_defaults_to_utc():
    assert parse_plan(_with_zone(""), "p.yaml").timezone == "UTC"


def test_console_reads_the_plan_hour_in_the_plan_zone():
    plan = load_plan(PLANS / "internal-assistant-18rps.yaml")
    assert plan.timezone == "Europe/Warsaw"
    winter_monday_0730_utc = A_MONDAY + 7.5 * 3600  # 2024-01-01: Warsaw is UTC+1, so 08:30 there
    assert utc_offset_seconds("Europe/Warsaw", winter_monday_0730_utc) == 3600
    summer = 1_719_820_800.0 + 7.5 * 3600  # Monday 2024-07-01 07:30 UTC: UTC+2, 09:30 there
    assert utc_offset_seconds("Europe/Warsaw", summer) == 7200

    handle = FleetHandle(plan.name, plan, watcher=None)
    in_zone = handle.plan_at(winter_monday_0730_utc)
    assert (in_zone.weekday, in_zone.hour) == (0, 8)
    # The same instant read as UTC would be the hour before the morning ramp.
    as_utc = plan_now(plan, winter_monday_0730_utc)
    assert as_utc.hour == 7
    assert in_zone.replicas_scheduled > as_utc.replicas_scheduled


@pytest.mark.parametrize(
    "zone, at, hours",
    [
        # The hours right after each clock change, where the offset at the UTC wall time differs.
        ("America/Los_Angeles", 1_772_946_000.0, -8),  # 2026-03-08 05:00Z: still PST (Sat 21:00)
        ("Europe/Rome", 1_774_747_800.0, 2),  # 2026-03-29 01:30Z: already CEST (03:30)
        ("Australia/Sydney", 1_775_332_800.0, 10),  # 2026-04-04 20:00Z: already AEST (06:00)
    ],
)
def test_offset_is_the_zone_offset_at_that_instant_across_clock_changes(zone, at, hours):
    assert utc_offset_seconds(zone, at) == hours * 3600
