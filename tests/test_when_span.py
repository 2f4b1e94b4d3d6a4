"""Spans people type as option values (console/when.py parse_span): a unit, or a bare number only where it
cannot be misread; any text either reads as a span in range or is refused in one line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.when import SPAN_UNITS, expiry_words, in_words, parse_span, show_span

HOUR = 3600.0


@pytest.mark.parametrize(
    "text, seconds",
    [("500ms", 0.5), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), (" 2 S ", 2.0), ("1.5m", 90.0), ("30", 30.0)],
)
def test_a_span_with_its_unit_or_a_small_bare_number_reads_as_seconds(text, seconds):
    assert parse_span(text, HOUR, bare_max=60) == seconds


@pytest.mark.parametrize(
    "text, bare_max, words",
    [
        ("2000", 60, "'2000': 2000 s (33 min 20 s) without a unit; did you mean 2000ms (2 s)?"),
        ("30", None, "'30': a number without its unit; expected it written with one: 30s, 30m (seconds, minutes)"),
        ("2h", 60, "'2h': expected at most 1 h"),
        ("0s", 60, "'0s': expected a duration longer than zero"),
        ("-5m", 60, "'-5m': a negative duration"),
        ("soon", 60, "'soon': not a duration; expected a number with its unit, like 500ms, 30s, 5m, 2h"),
    ],
)
def test_what_is_refused_says_what_to_write(text, bare_max, words):
    with pytest.raises(ValueError) as refused:
        parse_span(text, HOUR, bare_max)
    assert str(refused.value).startswith(words)


def test_spans_and_expiries_read_as_people_say_them():
    assert [show_span(s) for s in (0.06, 30, 1800, 7500, 3 * 86400)] == ["60 ms", "30 s", "30 min", "2 h 5 min", "3 d"]
    assert (in_words(1790), in_words(20), in_words(-600)) == ("in 30 min", "in under a minute", "10 min ago")
    at = 1_764_511_200.0  # any instant: the words are relative to `now`
    assert expiry_words(at + 1800, at).endswith(" local (in 30 min)")
    assert expiry_words(at + 1800, at).startswith("expires at ")
    assert expiry_words(at - 120, at).startswith("expired at ")


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(st.text(max_size=20), st.from_regex(r"\s*[0-9.]{0,8}\s*(ms|s|m|h|d|w|x)?\s*", fullmatch=True)))
def test_any_text_is_a_span_in_range_or_one_line_naming_it(text):
    try:
        seconds = parse_span(text, HOUR, bare_max=60)
    except ValueError as refused:
        message = str(refused)
        assert "\n" not in message and message.startswith(repr(text)[:40]) and "expected" in message
        return
    assert 0 < seconds <= HOUR


@settings(max_examples=300, deadline=None)
@given(amount=st.integers(1, 10_000), unit=st.sampled_from(sorted(SPAN_UNITS)))
def test_a_span_written_with_its_unit_round_trips(amount, unit):
    seconds = amount * SPAN_UNITS[unit]
    if seconds > HOUR:
        with pytest.raises(ValueError, match="expected at most 1 h"):
            parse_span(f"{amount}{unit}", HOUR)
    else:
        assert parse_span(f"{amount}{unit}", HOUR) == pytest.approx(seconds)
        assert parse_span(f"{seconds}s", HOUR) == pytest.approx(seconds)
