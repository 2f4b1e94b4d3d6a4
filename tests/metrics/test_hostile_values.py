"""Impossible numbers from a replica: unknown with the reason on the replica, never a rate, a flag or NaN in JSON.

The rule lives in one place (`console.metrics.vllm.impossible`): every reading is a finite number >= 0,
a KV share at most 1. Hypothesis puts hostile values on the real vLLM 0.32 capture, builds hostile
samples as a recording could hold them, and hostile figures as a Prometheus answer could give them;
whatever it finds, no exception escapes and every figure is unknown or a finite, possible number.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.live.watcher import Watcher
from console.metrics.attainment import Buckets
from console.metrics.exposition import ParseError, parse
from console.metrics.figures import FLEET_TOTAL, Figures, FleetFigures, vetted_figures, vetted_fleet_figures
from console.metrics.vllm import (
    FAMILIES,
    MAX_REQUESTS_PER_REPLICA,
    Histogram,
    ReplicaSample,
    impossible,
    restart_reason,
    restarted,
    sample_from_page,
    vet_sample,
)
from console.metrics.window import fleet_figures, replica_figures, replica_window
from console.targets import TargetResult

from .pages import V032_SMALL_KV, advance, data_parallel, relabel, sample_text

BASE = advance(sample_text(V032_SMALL_KV), gauges={"vllm:num_requests_waiting": 3.0, "vllm:kv_cache_usage_perc": 0.5})
LATER = advance(
    BASE,
    counters={
        "vllm:prompt_tokens_total": 400.0,
        "vllm:generation_tokens_total": 200.0,
        "vllm:num_preemptions_total": 1.0,
    },
    observations={"vllm:time_to_first_token_seconds": [0.1, 0.3], "vllm:request_prompt_tokens": [100, 300]},
)
SHARES = {"kv_usage", "prefix_hit_share"}
MAY_BE_NEGATIVE = {"data_age_seconds"}
_SAMPLE_LINE = re.compile(r"^(vllm:[^ {]+)(\{[^}]*\})? (\S+)$", re.M)
READ_LINES = [
    m for m in _SAMPLE_LINE.finditer(LATER) if m[1] in FAMILIES or m[1].endswith(("_bucket", "_sum", "_count"))
]

HOSTILE = st.one_of(
    st.sampled_from(
        ["NaN", "+Inf", "-Inf", "-7", "-0.5", "57", "1.0000001", "1.5", "1e308", "-1e308", "1e-320", "-0.0"]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda v: "NaN" if math.isnan(v) else repr(v).replace("inf", "Inf")
    ),
)


def assert_sane(figures: Figures) -> None:
    """No non-finite number anywhere, no negative, no share over 1; strict JSON."""
    for item in fields(Figures):
        value = getattr(figures, item.name)
        values = value.values() if isinstance(value, dict) else [value]
        for v in values:
            if isinstance(v, Buckets):  # a latency histogram: counts, all finite and never negative
                assert all(math.isfinite(n) and n >= 0 for n in (*v.cumulative, v.total)), (item.name, v)
                continue
            if not isinstance(v, float):
                assert v is None or isinstance(v, (str, int)), (item.name, v)
                continue
            assert math.isfinite(v), (item.name, v)
            if item.name not in MAY_BE_NEGATIVE:
                assert v >= 0, (item.name, v)
            if item.name in SHARES or item.name == "kv_usage_by_engine":
                assert v <= 1.0, (item.name, v)
            if item.name in ("running", "waiting") and figures.name != FLEET_TOTAL:
                assert v <= MAX_REQUESTS_PER_REPLICA, (item.name, v)
    json.dumps(figures.to_json(), allow_nan=False)


def _with_values(text: str, changes: dict[int, str]) -> str:
    """`text` with the value of READ_LINES[i] replaced by `changes[i]`."""
    out, at = [], 0
    for index in sorted(changes):
        match = READ_LINES[index]
        out.append(text[at : match.start(3)])
        out.append(changes[index])
        at = match.end(3)
    out.append(text[at:])
    return "".join(out)


def _result(text: str, at: float) -> TargetResult:
    try:
        return TargetResult("r", "u", "up", sample_from_page(parse(text, FAMILIES), at), "", at)
    except ParseError as error:
        return TargetResult("r", "u", "bad_payload", None, str(error), at)


def _watch(*pages: tuple[float, TargetResult]) -> list[FleetFigures]:
    watcher = Watcher(None, window_seconds=60.0, interval_seconds=10.0)
    return [watcher.replay([result], now) for now, result in pages]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.integers(0, len(READ_LINES) - 1), HOSTILE, min_size=1, max_size=4), st.booleans())
def test_hostile_values_on_a_real_page_never_escape(changes, hostile_first):
    hostile = _with_values(LATER, changes)
    pages = (
        [(100.0, _result(hostile, 100.0)), (110.0, _result(LATER, 110.0))]
        if hostile_first
        else [(100.0, _result(BASE, 100.0)), (110.0, _result(hostile, 110.0))]
    )
    for fleet in _watch(*pages):
        for figures in (*fleet.replicas, fleet.fleet):
            assert_sane(figures)
        json.dumps(fleet.to_json(), allow_nan=False)
        assert_sane(FleetFigures.from_json(json.loads(json.dumps(fleet.to_json()))).replicas[0])


@pytest.mark.parametrize(
    "line,value,figure",
    [
        ('vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}', "57", "kv_usage"),
        ('vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}', "-0.5", "kv_usage"),
        ('vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}', "+Inf", "kv_usage"),
        ('vllm:num_requests_running{engine="0",model_name="tiny"}', "-7", "running"),
        ('vllm:num_requests_waiting{engine="0",model_name="tiny"}', "+Inf", "waiting"),
        ('vllm:num_requests_waiting{engine="0",model_name="tiny"}', "NaN", "waiting"),
        # More requests than any replica can hold: a broken exporter, not a load.
        ('vllm:num_requests_running{engine="0",model_name="tiny"}', "1e+30", "running"),
        ('vllm:num_requests_waiting{engine="0",model_name="tiny"}', "1.2e+19", "waiting"),
        ('vllm:num_requests_waiting{engine="0",model_name="tiny"}', "2e+07", "waiting"),
        ('vllm:prompt_tokens_total{engine="0",model_name="tiny"}', "-Inf", "prompt_tokens_per_second"),
        ('vllm:prompt_tokens_total{engine="0",model_name="tiny"}', "-5", "prompt_tokens_per_second"),
        ('vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"}', "+Inf", "ttft_p95_seconds"),
        ('vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"}', "-1", "ttft_p95_seconds"),
        ('vllm:request_prompt_tokens_sum{engine="0",model_name="tiny"}', "NaN", "mean_input_tokens"),
    ],
)
def test_an_impossible_value_is_unknown_with_the_reason_on_the_replica(line, value, figure):
    hostile = re.sub(re.escape(line) + r" \S+", lambda m: f"{line} {value}", LATER)
    assert hostile != LATER
    [_, fleet] = _watch((100.0, _result(BASE, 100.0)), (110.0, _result(hostile, 110.0)))
    [whole] = _watch((100.0, _result(BASE, 100.0)), (110.0, _result(LATER, 110.0)))[1:]
    replica = fleet.replicas[0]
    assert replica.state == "up"
    assert getattr(replica, figure) is None and getattr(whole.replicas[0], figure) is not None
    assert "impossible values shown as unknown" in replica.error and value.lstrip("+") in replica.error
    # Never into the fleet totals either (a fleet of one shows what its replica shows).
    assert getattr(fleet.fleet, figure) is None
    assert_sane(replica)


def test_a_kv_share_a_rounding_over_one_reads_as_one():
    text = LATER.replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.5',
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 1.0000001',
    )
    sample = sample_from_page(parse(text), 1.0)
    assert dict(sample.kv_usage_by_engine) == {"0": 1.0} and not sample.doubtful


def test_one_engines_impossible_value_makes_the_replicas_figure_unknown_not_a_partial_sum():
    text = data_parallel(LATER, 2)
    text = text.replace(
        'vllm:num_requests_running{engine="1",model_name="tiny"} 0.0',
        'vllm:num_requests_running{engine="1",model_name="tiny"} -7.0',
    )
    sample = sample_from_page(parse(text), 1.0)
    assert sample.running is None and "running" in sample.doubtful and sample.waiting == 6.0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0, 57.0])
def test_impossible_is_the_one_rule(value):
    assert impossible(value, share=True)
    assert impossible(0.0) == impossible(0.5, share=True) == impossible(1e300) == ""


# --- a recording that holds impossible samples (written before this rule, or edited) -------------

_ANY = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
_NUM = st.floats(allow_nan=True, allow_infinity=True)


@st.composite
def recorded_samples(draw, at: float):
    bounds = (0.1, 1.0, math.inf)
    counts = tuple(draw(st.lists(_NUM, min_size=3, max_size=3)))
    return ReplicaSample(
        at=at,
        counters={
            name: draw(_NUM)
            for name in draw(
                st.sets(
                    st.sampled_from(
                        [
                            "requests",
                            "prompt_tokens",
                            "generation_tokens",
                            "preemptions",
                            "prefix_cache_queries",
                            "prefix_cache_hits",
                        ]
                    )
                )
            )
        },
        requests_by_reason=draw(st.dictionaries(st.sampled_from(["stop", "length"]), _NUM, max_size=2)),
        running=draw(_ANY),
        waiting=draw(_ANY),
        kv_usage_by_engine=draw(st.dictionaries(st.sampled_from(["0", "1"]), _NUM, max_size=2)),
        kv_capacity_tokens=draw(_ANY),
        histograms={"ttft": Histogram(bounds, counts, draw(_ANY), draw(_ANY))} if draw(st.booleans()) else {},
        start_time=draw(st.one_of(st.none(), st.just(5.0), _NUM)),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recorded_samples(100.0), recorded_samples(110.0))
def test_replaying_impossible_recorded_samples_never_escapes(older, newer):
    fleets = _watch(
        (100.0, TargetResult("r", "u", "up", older, "", 100.0)), (110.0, TargetResult("r", "u", "up", newer, "", 110.0))
    )
    for fleet in fleets:
        for figures in (*fleet.replicas, fleet.fleet):
            assert_sane(figures)
    checked = vet_sample(newer)
    assert vet_sample(checked) is checked  # once held to the rule, a sample stays as it is


def test_a_recorded_infinite_gauge_is_unknown_on_replay():
    sample = ReplicaSample(at=110.0, running=math.inf, waiting=-3.0, kv_usage_by_engine={"0": 57.0})
    [fleet] = _watch((110.0, TargetResult("r", "u", "up", sample, "", 110.0)))
    replica = fleet.replicas[0]
    assert replica.running is None and replica.waiting is None and replica.kv_usage is None
    assert "impossible values shown as unknown" in replica.error


# --- figures made elsewhere (Prometheus' answers, a recording's JSON) -------------------------

_NUMBER_FIELDS = [
    f.name
    for f in fields(Figures)
    if f.name not in ("name", "url", "state", "error", "latency_buckets")
    and not f.name.endswith(("_by_reason", "_by_engine"))
]


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(dict.fromkeys(_NUMBER_FIELDS, _ANY)),
    st.dictionaries(st.sampled_from(["0", "1"]), _NUM, max_size=2),
)
def test_vetted_figures_are_always_possible_and_keep_what_was_possible(values, kv_by_engine):
    figures = Figures(name="r", url="u", state="up", kv_usage_by_engine=kv_by_engine, **values)
    vetted = vetted_figures(figures)
    assert_sane(vetted)
    assert vetted_figures(vetted) == vetted
    engine_unknown = any(impossible(v, share=True) for v in kv_by_engine.values())
    assert not engine_unknown or vetted.kv_usage is None  # the max over engines, one of them unknown
    for name, value in values.items():
        if name == "kv_usage" and engine_unknown:
            continue
        most = MAX_REQUESTS_PER_REPLICA if name in ("running", "waiting") else math.inf
        if value is not None and not impossible(value, share=name in SHARES, most=most):
            assert getattr(vetted, name) == (min(value, 1.0) if name in SHARES else value)
    assert Figures.from_json(json.loads(json.dumps(figures.to_json()))) == vetted


def test_possible_figures_come_back_as_they_are():
    figures = Figures(
        name="r", url="u", state="up", requests_per_second=2.5, kv_usage=0.4, kv_usage_by_engine={"0": 0.4}
    )
    assert vetted_figures(figures) is figures


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"running": 3}, {"running": 3.0}),  # an int from a recording: read as the float it stands for
        ({"kv_usage": 1.0 + 1e-9}, {"kv_usage": 1.0}),  # over 1 by rounding only
        ({"kv_usage_by_engine": {"0": True}}, {"kv_usage_by_engine": {}, "kv_usage": None}),
        ({"requests_per_second_by_reason": {"stop": -1.0}}, {"requests_per_second_by_reason": {}}),
        ({"kv_capacity_tokens_by_engine": {"0": 16000}}, {"kv_capacity_tokens_by_engine": {"0": 16000}}),
        ({"data_age_seconds": "soon"}, {"data_age_seconds": None}),
        ({"data_age_seconds": -3.0}, {"data_age_seconds": -3.0}),  # clocks apart: the one value that may be negative
    ],
)
def test_what_looks_possible_at_a_glance_still_meets_the_whole_rule(changes, expected):
    """Figures whose values are all floats in range come back at once; anything else takes every check."""
    base = {"requests_per_second": 2.5, "kv_usage": 0.4, "kv_usage_by_engine": {"0": 0.4}}
    vetted = vetted_figures(Figures(name="r", url="u", state="up", **{**base, **changes}))
    for name, value in expected.items():
        assert getattr(vetted, name) == value
        assert type(getattr(vetted, name)) is type(value)


def test_a_rate_over_a_tiny_interval_that_overflows_is_unknown():
    older = ReplicaSample(at=0.0, counters={"prompt_tokens": 0.0})
    newer = ReplicaSample(at=1e-300, counters={"prompt_tokens": 1e308})
    figures = replica_figures(older, newer, "r", "u")
    assert figures.prompt_tokens_per_second is None
    assert_sane(figures)
    assert_sane(fleet_figures([(older, newer)], [figures]))


# --- a different model behind the same URL is a restart, never a rate -------------------------


def _pair(older_text: str, newer_text: str):
    older = sample_from_page(parse(older_text, FAMILIES), 100.0)
    newer = sample_from_page(parse(newer_text, FAMILIES), 110.0)
    return older, newer


NO_START = "\n".join(line for line in BASE.splitlines() if not line.startswith("process_start_time_seconds")) + "\n"
NO_START_LATER = (
    "\n".join(line for line in LATER.splitlines() if not line.startswith("process_start_time_seconds")) + "\n"
)


@pytest.mark.parametrize(
    "change,reason",
    [
        (lambda t: t.replace('model_name="tiny"', 'model_name="llama-70b"'), "model tiny -> llama-70b"),
        (lambda t: relabel(t, "vllm:cache_config_info", kv_cache_size_tokens="65536"), "KV cache of engine 0"),
        (lambda t: t.replace('engine="0"', 'engine="3"'), "engines 0 -> 3"),
    ],
    ids=["model", "kv-cache", "engines"],
)
def test_another_model_behind_the_url_is_a_restart_even_with_larger_counters(change, reason):
    # A 70B in place of a 7B: every counter larger, no process start time to tell (a proxy, an exporter).
    bigger = advance(
        change(NO_START_LATER),
        counters={"vllm:request_success_total": 9_052_870.0 * 10, "vllm:prompt_tokens_total": 1e9},
    )
    older, newer = _pair(NO_START, bigger)
    assert restarted(older, newer) and reason in restart_reason(older, newer)
    assert replica_window(older, newer) is None
    [_, fleet] = _watch(
        (100.0, TargetResult("r", "u", "up", older, "", 100.0)), (110.0, TargetResult("r", "u", "up", newer, "", 110.0))
    )
    replica = fleet.replicas[0]
    assert replica.state == "restarted" and reason in replica.error
    assert replica.requests_per_second is None and replica.prompt_tokens_per_second is None
    assert fleet.fleet.requests_per_second is None


def test_the_same_model_with_growing_counters_is_not_a_restart():
    older, newer = _pair(NO_START, NO_START_LATER)
    assert not restarted(older, newer) and newer.model_names == ("tiny",) and newer.engines == ("0",)


def test_a_series_that_appears_between_two_samples_gives_no_rate_across_them():
    # A finished_reason seen for the first time adds its whole count since start: not this window's requests.
    lacking = "\n".join(line for line in BASE.splitlines() if 'finished_reason="length"' not in line) + "\n"
    older, newer = _pair(lacking, LATER)
    window = replica_window(older, newer)
    assert window is not None and "requests" not in window.counters
    assert "prompt_tokens" in window.counters  # the families that kept their series still give rates


@pytest.mark.parametrize("value", ["NaN", "-1", "+Inf"])
def test_an_impossible_start_time_is_unknown_not_a_restart_every_poll(value):
    # NaN != NaN: read as a time, it would make every poll a restart.
    text = re.sub(r"^process_start_time_seconds \S+$", f"process_start_time_seconds {value}", BASE, flags=re.M)
    assert text != BASE
    older, newer = _pair(text, text)
    assert "start_time" in older.doubtful and older.start_time == newer.start_time
    assert not restarted(older, newer)


async def test_a_figure_source_relaying_impossible_values_is_held_to_the_same_rule():
    class Relaying:  # as a Prometheus answer could carry what a replica said
        name = "prometheus"

        async def collect(self, now):
            replica = Figures("r", "u", "up", waiting=math.inf, kv_usage=57.0, requests_per_second=-3.0, running=2.0)
            fleet = Figures("fleet", "", "up", waiting=math.inf, running=2.0)
            return FleetFigures(60.0, "prometheus", (replica,), fleet, now)

    figures = (await Watcher(Relaying(), window_seconds=60.0).poll()).figures
    [replica] = figures.replicas
    assert replica.waiting is None and replica.kv_usage is None and replica.requests_per_second is None
    assert replica.running == 2.0 and "kv_usage 57 is over 1" in replica.error
    assert figures.fleet.waiting is None
    for each in (replica, figures.fleet):
        assert_sane(each)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["running", "waiting"]),
    st.floats(min_value=0.0, max_value=1e40, allow_nan=False, allow_infinity=False),
)
def test_a_request_count_is_kept_up_to_what_a_replica_can_hold_and_unknown_past_it(figure, value):
    line = f'vllm:num_requests_{figure}{{engine="0",model_name="tiny"}}'
    hostile = re.sub(re.escape(line) + r" \S+", lambda m: f"{line} {value!r}", LATER)
    [_, fleet] = _watch((100.0, _result(BASE, 100.0)), (110.0, _result(hostile, 110.0)))
    replica = fleet.replicas[0]
    if value > MAX_REQUESTS_PER_REPLICA:
        assert getattr(replica, figure) is None and "more requests than a replica can hold" in replica.error
        assert getattr(fleet.fleet, figure) is None
    else:
        assert getattr(replica, figure) == value and "impossible" not in replica.error


def test_a_fleets_request_counts_may_hold_every_replicas_worth_but_no_more():
    many = tuple(Figures(f"r{i}", "u", "up", running=9e6, waiting=1.0) for i in range(3))
    fleet = Figures("fleet", "", "up", running=2.7e7, waiting=4e7)
    vetted = vetted_fleet_figures(FleetFigures(60.0, "prometheus", many, fleet, 0.0))
    assert [r.running for r in vetted.replicas] == [9e6, 9e6, 9e6]
    assert vetted.fleet.running == 2.7e7  # three replicas' worth
    assert vetted.fleet.waiting is None and "more requests than 3 replicas can hold" in vetted.fleet.error


def test_a_long_engine_list_in_a_reason_is_summarised_with_a_count():
    engines = 6_000
    page = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n' for i in range(engines))
    page += 'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
    with pytest.raises(ParseError) as cut:
        sample_from_page(parse(page, FAMILIES), 1.0)
    reason = str(cut.value)
    assert "no series for engine 1, 10, 100, 1000, 1001, 1002, 1003, 1004 and 5,991 more" in reason
    assert len(reason) < 300


def test_another_set_of_many_engines_is_a_restart_said_in_a_line():
    older = replace(sample_from_page(parse(LATER, FAMILIES), 1.0), engines=tuple(str(i) for i in range(6_000)))
    newer = replace(older, engines=tuple(str(i) for i in range(1, 6_001)))
    reason = restart_reason(older, newer)
    assert (
        restarted(older, newer)
        and reason.startswith("engines 0, 1, 2, 3, 4, 5, 6, 7 and 5,992 more -> 1, 2, 3")
        and len(reason) < 200
    )
