"""The one time parser for --from, --to and seek, and how times are shown."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.when import format_when, iso_when, parse_when, zone_named

WARSAW = ZoneInfo("Europe/Warsaw")
NOW = datetime(2026, 11, 30, 14, 3, 22, tzinfo=UTC).timestamp()  # 15:03:22 in Warsaw


@pytest.mark.parametrize(
    "text, expected",
    [
        ("now", NOW),
        ("NOW", NOW),
        ("-15m", NOW - 900),
        ("-2h", NOW - 7200),
        ("-3d", NOW - 3 * 86400),
        ("-90s", NOW - 90),
        ("-1w", NOW - 7 * 86400),
        ("+1.5h", NOW + 5400),
        ("1764511402", 1764511402.0),
        ("1764511402.25", 1764511402.25),
        ("2026-11-30T13:00:00Z", datetime(2026, 11, 30, 13, tzinfo=UTC).timestamp()),
        ("2026-11-30T13:00+05:30", datetime(2026, 11, 30, 7, 30, tzinfo=UTC).timestamp()),
        ("2026-11-30 14:03", datetime(2026, 11, 30, 14, 3, tzinfo=WARSAW).timestamp()),
        ("2026-11-30T14:03:22", datetime(2026, 11, 30, 14, 3, 22, tzinfo=WARSAW).timestamp()),
        ("2026-11-30", datetime(2026, 11, 30, tzinfo=WARSAW).timestamp()),
        ("09:30", datetime(2026, 11, 30, 9, 30, tzinfo=WARSAW).timestamp()),
        ("09:30:15", datetime(2026, 11, 30, 9, 30, 15, tzinfo=WARSAW).timestamp()),
        ("2026-07-01 12:00", datetime(2026, 7, 1, 10, tzinfo=UTC).timestamp()),  # summer time: +02:00
    ],
)
def test_accepted_forms(text, expected):
    assert parse_when(text, NOW, WARSAW) == expected


def test_hh_mm_is_today_in_the_given_zone_not_in_utc():
    late = datetime(2026, 11, 30, 23, 30, tzinfo=UTC).timestamp()  # already Dec 1 in Warsaw
    assert parse_when("08:00", late, WARSAW) == datetime(2026, 12, 1, 8, tzinfo=WARSAW).timestamp()


@pytest.mark.parametrize("text", ["", "yesterday", "-5x", "25:00", "12:61", "2026-13-01", "2026-11-31 10:00", "--2h"])
def test_rejected_forms_say_what_was_expected(text):
    with pytest.raises(ValueError) as caught:
        parse_when(text, NOW, WARSAW)
    message = str(caught.value)
    assert "expected an ISO date-time" in message and "-2h" in message and "\n" not in message


def test_times_are_shown_in_local_or_the_given_zone():
    assert format_when(NOW, WARSAW) == "2026-11-30 15:03:22"
    assert format_when(NOW, UTC) == "2026-11-30 14:03:22"
    assert iso_when(NOW, WARSAW) == "2026-11-30T15:03:22+01:00"
    assert parse_when(iso_when(NOW + 0.5, WARSAW), 0.0) == NOW + 0.5
    assert format_when(None) == "–"


def test_zone_names():
    assert zone_named("Europe/Warsaw").key == "Europe/Warsaw"
    assert zone_named("local") is not None
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        zone_named("Mars/Olympus")


@pytest.mark.parametrize(
    "text",
    [
        "99999999999999999999",  # unix seconds far beyond year 9999
        "-99999999999999999999d",
        "+99999999999999999999d",
        "-100000w",  # before 1970
        "0001-01-01T00:00+01:00",  # a date datetime holds but a unix time does not
        "9999-12-31T23:59-01:00",  # a year 10000 instant in UTC
        "1e400",
    ],
)
def test_times_beyond_1970_to_9999_are_one_line_errors_not_crashes(text):
    with pytest.raises(ValueError) as caught:
        parse_when(text, NOW, WARSAW)
    message = str(caught.value)
    assert repr(text) in message and "\n" not in message
    assert "1970 to 9999" in message or "is not a time capcon reads" in message


def test_the_edges_of_the_range_still_parse():
    assert parse_when("1970-01-01T00:00Z", NOW, WARSAW) == 0.0
    assert parse_when("9999-12-31T23:00Z", NOW, WARSAW) == datetime(9999, 12, 31, 23, tzinfo=UTC).timestamp()


@settings(max_examples=500)
@given(
    st.one_of(
        st.text(max_size=30),
        st.from_regex(r"[-+]\s*\d{1,25}(\.\d{0,5})?\s*[smhdwSMHDWx]?", fullmatch=True),  # what `--from -...` brings
    )
)
def test_any_typed_time_is_a_time_in_range_or_a_one_line_refusal(text):
    try:
        at = parse_when(text, NOW, WARSAW)
    except ValueError as error:
        message = str(error)
        assert "\n" not in message and "expected " in message
        return
    assert 0.0 <= at <= 253_402_300_799.0


@pytest.mark.parametrize("name", ["Europe", "A" * 5000, "../etc/passwd", "UTC\x00", "Europe/Nowhere", ""])
def test_a_zone_that_is_not_one_is_a_value_error_naming_what_was_expected(name):
    from console.when import zone_named

    with pytest.raises(ValueError) as raised:
        zone_named(name)
    assert "expected" in str(raised.value) and "\n" not in str(raised.value) and len(str(raised.value)) < 300
