"""`watch --once`'s JSON and flag lines built from views, without servers: strict JSON, the same keys
with and without a plan, and a server's words never steering the terminal."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from console.commands.watch_output import _dumps, flag_lines, once_json
from console.fleet.view import advance
from console.tui.widgets.flags_panel import title
from tests.fleet.builders import fleet, plan_now, replica

NOW = 1000.0


def _strict(text: str):
    def refuse(constant):
        raise ValueError(constant)

    return json.loads(text, parse_constant=refuse)


def test_the_keys_are_the_same_with_and_without_a_plan():
    figures = fleet(replica("r1", requests_per_second=1.0), requests_per_second=1.0, at=NOW)
    planned = once_json(figures, advance(None, "f", figures, plan_now(), NOW), "p.yaml")
    unplanned = once_json(figures, advance(None, "f", figures, None, NOW))
    bare = once_json(figures)  # a caller with figures only (tests/real)
    assert list(planned) == list(unplanned) == list(bare)
    assert (
        planned["plan"] == "assistant"
        and planned["plan_file"] == "p.yaml"
        and planned["plan_at"] == {"weekday": "mon", "hour": 10}
    )
    assert unplanned["plan"] is None and unplanned["plan_file"] is None and unplanned["comparisons"] == []
    assert bare["flags"] == {"active": [], "pending": []}


@settings(max_examples=200)
@given(st.lists(st.one_of(st.floats(), st.none()), min_size=4, max_size=4))
def test_a_figure_nobody_could_compute_is_null_never_nan(values):
    rps, ttft, kv, tokens = values
    figures = fleet(
        replica("r1", requests_per_second=rps, kv_usage=kv, kv_usage_by_engine={"0": kv} if kv is not None else {}),
        requests_per_second=rps,
        ttft_p95_seconds=ttft,
        mean_input_tokens=tokens,
        at=NOW,
    )
    view = advance(None, "f", figures, plan_now(), NOW)
    document = _strict(_dumps(once_json(figures, view, "p.yaml")))

    def numbers(value):
        if isinstance(value, dict):
            for item in value.values():
                yield from numbers(item)
        elif isinstance(value, list):
            for item in value:
                yield from numbers(item)
        elif isinstance(value, float):
            yield value

    assert all(math.isfinite(n) for n in numbers(document))
    ttft_row = next(
        c for c in document["comparisons"] if c["unit"] == "seconds" and c["planned"] == 1.5
    )  # the TTFT target
    assert ttft_row["actual"] == (ttft if ttft is not None and math.isfinite(ttft) else None)


def test_pending_flags_say_how_long_they_held_and_need():
    queueing = replica("r1", waiting=3.0, running=1.0, kv_usage=0.5)
    first = advance(None, "f", fleet(queueing, at=NOW), None, NOW)
    second = advance(first, "f", fleet(queueing, at=NOW + 2), None, NOW + 2)
    [saturation] = [p for p in once_json(second.figures, second)["flags"]["pending"] if p["kind"] == "saturation"]
    assert saturation["held_seconds"] == 2.0 and saturation["needed_seconds"] == 30.0 and saturation["since"] == NOW
    assert saturation["todo"]  # from the rule, as the console's details show it
    assert any(
        line.startswith("… pending ▲ WARN saturated · r1 · 2 s of 30 s · ") for line in flag_lines(second, False)
    )


def test_flag_lines_say_the_console_words_and_json_keeps_the_kind():
    # 30 req/s against the plan's 20 for longer than the rule's 30 s: "load over plan" raised.
    busy = [replica(f"r{i}", requests_per_second=7.5) for i in range(4)]
    first = advance(None, "f", fleet(*busy, requests_per_second=30.0, at=NOW), plan_now(), NOW)
    later = advance(first, "f", fleet(*busy, requests_per_second=30.0, at=NOW + 31), plan_now(), NOW + 31)
    assert "above_plan" in [f.kind for f in later.flags]
    lines = flag_lines(later, True)
    assert any(line.startswith(f"✖ CRIT {title(later.flags[0])} · ") for line in lines)  # the panel's own words
    assert any(line.startswith("✖ CRIT load over plan · fleet · since ") for line in lines)
    assert not any("above_plan" in line or "n_plus_1_at_risk" in line for line in lines)
    document = once_json(later.figures, later, "p.yaml")
    assert "above_plan" in [f["kind"] for f in document["flags"]["active"]]


def test_flag_lines_never_pass_a_control_character_through():
    down = replica("r1", state="down", error="refused\x1b[2J\nfake line")
    view = advance(None, "f", fleet(down, at=NOW), None, NOW)
    lines = flag_lines(view, False)
    assert lines and all("\x1b" not in line and "\n" not in line for line in lines)
    assert any("refused\\x1b[2J\\nfake line" in line for line in lines)


def test_with_a_plan_and_nothing_holding_the_lines_say_so():
    quiet = replica("r1", requests_per_second=0.0, waiting=0.0, kv_usage=0.1)
    view = advance(None, "f", fleet(quiet, at=NOW), None, NOW)
    assert flag_lines(view, True) == ["flags: none active or pending"]
    assert flag_lines(view, False) == []


def test_a_source_that_failed_is_one_line_of_text():
    from console.commands.watch_output import once_lines
    from console.sources.prometheus import failed_figures

    figures = failed_figures(
        60.0, NOW, "Prometheus at http://p:9090: answer to the up query: result is a string, not a list\x1b[2J"
    )
    view = advance(None, "f", figures, plan_now(), NOW)
    assert once_lines(figures, view, True) == [
        "capcon watch · source prometheus · Prometheus at http://p:9090: answer to the up query: result is a string, not a list\\x1b[2J"
    ]


def test_names_and_notes_in_the_table_are_printable():
    from console.commands.watch_output import render_table

    evil = replica("evil\x1b[2J:8000", state="down", error="HTTP 503 \x1b]0;owned\x07")
    text = render_table(fleet(evil, at=NOW))
    assert "\x1b" not in text and "\x07" not in text
    assert "evil\\x1b[2J:8000" in text and "HTTP 503 \\x1b]0;owned\\x07" in text


FORECAST_KEYS = [
    "horizon_minutes",
    "rps",
    "rps_low",
    "rps_high",
    "minutes_to_saturation",
    "lead_time_minutes",
    "capacity_rps",
    "trend_samples",
    "basis",
    "plan_correction",
    "backtest_mae_rps",
]


def test_the_forecast_has_the_same_keys_with_and_without_a_plan_unknown_as_null():
    figures = fleet(replica("r1", requests_per_second=4.0), requests_per_second=4.0, at=NOW)
    planned = once_json(figures, advance(None, "f", figures, plan_now(), NOW), "p.yaml")["forecast"]
    unplanned = once_json(figures, advance(None, "f", figures, None, NOW))["forecast"]
    bare = once_json(figures)["forecast"]
    assert list(planned) == list(unplanned) == list(bare) == FORECAST_KEYS
    assert planned["horizon_minutes"] == [5, 15, 30] and planned["basis"] == "trend+plan"
    # One poll: one rate, so no band yet and the blend leans on the plan's 18 req/s for this hour.
    assert planned["trend_samples"] == 1 and planned["rps_low"] == planned["rps_high"] == [None, None, None]
    assert 4.0 < planned["rps"][0] < planned["rps"][1] < planned["rps"][2] < 18.0
    # The one replica up carries 5 req/s: the forecast passes it within minutes, sooner than the 10 min lead time.
    assert planned["capacity_rps"] == 5.0 and planned["lead_time_minutes"] == 10.0
    assert 0 < planned["minutes_to_saturation"] < 10
    assert planned["plan_correction"] == 1.0  # one rate: too little history to correct the plan by
    assert unplanned["plan_correction"] is None and bare["plan_correction"] is None
    assert unplanned["basis"] == "trend" and unplanned["rps"] == [4.0, 4.0, 4.0]
    assert unplanned["capacity_rps"] is None and unplanned["minutes_to_saturation"] is None
    assert unplanned["lead_time_minutes"] is None
    assert bare["basis"] == "none" and bare["rps"] == [None, None, None] and bare["trend_samples"] == 0


def test_the_forecast_of_an_unknown_rate_is_null_never_zero():
    figures = fleet(replica("r1"), at=NOW)  # no rate yet
    document = _strict(_dumps(once_json(figures, advance(None, "f", figures, None, NOW))))
    assert document["forecast"]["rps"] == [None, None, None] and document["forecast"]["minutes_to_saturation"] is None


def test_the_once_text_has_one_forecast_line_between_the_table_and_the_flags():
    from console.commands.watch_output import once_lines

    plan = plan_now(planned_load_rps=4.0)
    first = fleet(*(replica(f"r{n}", requests_per_second=1.0) for n in range(4)), requests_per_second=4.0, at=NOW)
    view = advance(None, "f", first, plan, NOW)
    lines = once_lines(first, view, True)
    [line] = [line for line in lines if line.startswith("forecast: ")]
    assert lines.index(line) == 1 and lines[2].startswith("flags: ")
    assert line == "forecast: 5 min 4.00 rps · 15 min 4.00 rps · 30 min 4.00 rps · not heading for saturation"
    assert not [line for line in once_lines(first, advance(None, "f", first, None, NOW), False) if "forecast" in line]


def test_the_once_text_says_when_saturation_comes_and_what_a_replica_takes():
    from console.ahead.forecast import Forecast
    from console.ahead.words import forecast_line

    ahead = Forecast(
        (5, 15, 30), (12.3, 15.0, 18.25), (11.2, 12.0, 9.6), (14.1, 18.0, 27.0), 7.2, 10.0, 17.0, 30, "trend+plan"
    )
    assert forecast_line(ahead) == (
        "forecast: 5 min 12.3 rps (11-14) · 15 min 15.0 rps (12-18) · 30 min 18.2 rps (9.6-27)"
        " · saturation in 7 min (a replica takes 10)"
    )


async def test_watch_once_json_against_a_served_fleet_gives_the_forecast(tmp_path):
    """`capcon watch PLAN --once --json` over a served replica: the forecast's keys, on two samples (one rate)."""
    import yaml

    from tests.commands.test_watch_once import (
        REPO,
        V032_SMALL_KV,
        capcon,
        loaded_page,
        pages_in_turn,
        sample_text,
        serve,
    )

    base = sample_text(V032_SMALL_KV)
    async with serve(pages_in_turn(base, loaded_page(base, 5))) as one:
        plan = yaml.safe_load((REPO / "plans" / "chat-8b-l40s.yaml").read_text())
        plan["fleet"] = {"targets": [one]}
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan))
        code, out, err = await capcon("watch", str(path), "--once", "--json", "--interval", "0.3")
        text_code, text, text_err = await capcon("watch", str(path), "--once", "--interval", "0.3")
    assert code == 0, err
    forecast = json.loads(out)["forecast"]
    assert list(forecast) == FORECAST_KEYS and forecast["basis"] == "trend+plan" and forecast["trend_samples"] == 1
    assert forecast["horizon_minutes"] == [5, 15, 30] and all(r is not None and r >= 0 for r in forecast["rps"])
    assert forecast["capacity_rps"] > 0 and forecast["lead_time_minutes"] == plan.get("lead_time_minutes", 10)
    assert text_code == 0, text_err
    [line] = [line for line in text.splitlines() if line.startswith("forecast: 5 min ")]
    assert " · 15 min " in line and " · 30 min " in line and ("saturation" in line)


async def test_watch_once_with_a_history_file_quotes_the_forecasts_past_error(tmp_path):
    """`--db FILE` holding an hour of the fleet's minutes: `backtest_mae_rps` has one error per horizon (the text,
    too little history and no file are tested in-process: tests/ahead/test_forecast_accuracy.py)."""
    import time

    import yaml

    from tests.ahead.test_forecast_accuracy import write_history
    from tests.commands.test_watch_once import (
        REPO,
        V032_SMALL_KV,
        capcon,
        loaded_page,
        pages_in_turn,
        sample_text,
        serve,
    )

    base = sample_text(V032_SMALL_KV)
    plan = yaml.safe_load((REPO / "plans" / "chat-8b-l40s.yaml").read_text())
    history = tmp_path / "h.sqlite"
    write_history(history, 60, end=time.time(), fleet=plan["name"])
    async with serve(pages_in_turn(base, loaded_page(base, 5))) as one:
        plan["fleet"] = {"targets": [one]}
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan))
        code, out, err = await capcon("watch", str(path), "--once", "--json", "--interval", "0.3", "--db", str(history))
    assert code == 0, err
    errors = json.loads(out)["forecast"]["backtest_mae_rps"]
    # b holds 1 req/s, a ramps 0.05 req/s a minute: five minutes ahead the forecast is off by well under a request
    # a second. Further ahead it leans on the plan's profile for the hours the clock is in now, so only its shape
    # is asked of (the in-process tests hold the figures: tests/ahead/test_forecast_accuracy.py).
    assert len(errors) == 3 and all(e is not None and 0 <= e < 10 for e in errors) and errors[0] < 1
