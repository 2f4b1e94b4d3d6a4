"""The text-format parser: real pages, the format's corners, and agreement with prometheus_client."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from console.metrics.exposition import PROCESS_START, parse

from .pages import ALL_SAMPLES, V010, V032_IDLE, V032_SMALL_KV, V08_CACHE_CONFIG, V08_MODEL_NAME_ONLY, sample_text


def reference_samples(text: str) -> list[tuple[str, dict, float]]:
    """What prometheus_client reads from the same text, restricted to what capcon keeps."""
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(("vllm:", "vllm_")) or sample.name == PROCESS_START:
                out.append((sample.name, dict(sample.labels), sample.value))
    return out


def as_comparable(samples) -> list[tuple]:
    def value(v: float) -> str:
        return "NaN" if math.isnan(v) else repr(v)

    return sorted((name, tuple(sorted(dict(labels).items())), value(v)) for name, labels, v in samples)


# Per page: samples kept, lines that could not be read, and one series to spot-check.
PAGE_CASES = [
    (V032_SMALL_KV, 370, 0, ("vllm:prompt_tokens_total", {"engine": "0", "model_name": "tiny"}, 5285.0)),
    (V032_IDLE, 370, 0, ("vllm:num_requests_running", {"engine": "0", "model_name": "tiny"}, 0.0)),
    (V010, 17, 0, ("vllm:prefix_cache_queries_total", {"engine": "0", "model_name": "zai-org/GLM-4.5"}, 32.0)),
    (V08_MODEL_NAME_ONLY, 4, 0, ("vllm:gpu_cache_usage_perc", {"model_name": "Qwen/Qwen2.5-Coder-32B-Instruct"}, 0.0)),
    # The reporter broke the one sample line with blank lines: not a valid exposition.
    (V08_CACHE_CONFIG, 0, 1, None),
]


@pytest.mark.parametrize("name,kept,errors,spot", PAGE_CASES, ids=[c[0] for c in PAGE_CASES])
def test_real_pages(name, kept, errors, spot):
    page = parse(sample_text(name))
    assert len(page.samples) == kept
    assert page.errors == errors
    if spot is not None:
        spot_name, spot_labels, spot_value = spot
        matches = [v for n, labels, v in page.samples if n == spot_name and dict(labels) == spot_labels]
        assert matches == [spot_value]


@pytest.mark.parametrize("name", [n for n in ALL_SAMPLES if n != V08_CACHE_CONFIG])
def test_real_pages_agree_with_prometheus_client(name):
    text = sample_text(name)
    assert as_comparable(parse(text).samples) == as_comparable(reference_samples(text))


def test_process_start_time_is_kept_and_other_families_are_skipped():
    page = parse(sample_text(V032_SMALL_KV))
    names = {n for n, _, _ in page.samples}
    assert PROCESS_START in names
    assert not any(n.startswith(("http_", "python_", "process_cpu")) for n in names)


def test_escaped_label_values():
    text = 'vllm:x{a="quote \\" here",b="back\\\\slash",c="new\\nline",d="brace } comma ,"} 1\n'
    [(_name, labels, _value)] = parse(text).samples
    assert dict(labels) == {"a": 'quote " here', "b": "back\\slash", "c": "new\nline", "d": "brace } comma ,"}


def test_special_values_and_timestamps():
    text = 'vllm:a NaN\nvllm:b +Inf\nvllm:c -Inf\nvllm:d 1.5e+09 1700000000000\nvllm:e{x="1"} 2 -17\n'
    values = {n: v for n, _, v in parse(text).samples}
    assert math.isnan(values["vllm:a"])
    assert values["vllm:b"] == math.inf and values["vllm:c"] == -math.inf
    assert values["vllm:d"] == 1.5e9 and values["vllm:e"] == 2.0


def test_underscore_spelling_is_mapped_back_to_vllm_colon():
    text = '# TYPE vllm:prompt_tokens counter\nvllm_prompt_tokens_total{engine="0"} 7.0\n'
    assert [(n, v) for n, _, v in parse(text).samples] == [("vllm:prompt_tokens_total", 7.0)]


def test_created_series_are_kept_as_their_own_samples():
    page = parse(sample_text(V032_SMALL_KV))
    created = [v for n, _, v in page.samples if n == "vllm:prompt_tokens_created"]
    assert created == [1.7959972037452064e09]


def test_crlf_line_endings():
    page = parse('vllm:a{x="1"} 3\r\nvllm:b 4\r\n')
    assert [(n, v) for n, _, v in page.samples] == [("vllm:a", 3.0), ("vllm:b", 4.0)] and page.errors == 0
    assert not page.cut


@pytest.mark.parametrize(
    "text", ['vllm:a{x="1"} 3\r\nvllm:b 4', "vllm:a 3\nvllm:b 12", "vllm:a 3\n# HEL", "vllm:a 3\nvllm:b{x="]
)
def test_a_last_line_without_its_line_end_is_cut_and_not_read(text):
    # "vllm:b 12" may be "vllm:b 120" cut short: a smaller number, never one to read.
    page = parse(text)
    assert page.cut and [(n, v) for n, _, v in page.samples] == [("vllm:a", 3.0)] and page.errors == 0


@pytest.mark.parametrize("text", ["vllm:a 3\n", "vllm:a 3\n# EOF", "vllm:a 3\n# EOF\n", "vllm:a 3\n  ", ""])
def test_a_page_ending_in_a_line_end_or_eof_is_whole(text):
    assert not parse(text).cut


@pytest.mark.parametrize(
    "line",
    [
        'vllm:x{a="unterminated} 1',
        'vllm:x{a="1"',  # truncated mid-series
        'vllm:x{a="1"} ',  # no value
        'vllm:x{a="1"} one',
        "vllm:x{a=1} 2",  # unquoted value
        "vllm:x 1 2 3",
        'vllm:x{a="1" b="2"} 1',  # missing comma
    ],
)
def test_malformed_wanted_lines_are_counted_not_raised(line):
    page = parse("vllm:ok 1\n" + line + "\nvllm:also_ok 2\n")
    assert [n for n, _, _ in page.samples] == ["vllm:ok", "vllm:also_ok"]
    assert page.errors == 1 and page.first_error


def test_repeated_series_keep_the_first_and_are_counted():
    page = parse('vllm:a{x="1"} 1\nvllm:a{x="2"} 2\nvllm:a{x="1"} 3\n')
    assert [v for _, _, v in page.samples] == [1.0, 2.0] and page.duplicates == 1 and page.errors == 0


def test_other_families_are_not_validated():
    page = parse('http_requests_total{handler="/x" 5\nvllmish_metric 3\nvllm:ok 1\n')
    assert page.errors == 0 and [n for n, _, _ in page.samples] == ["vllm:ok"]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_never_raises_on_arbitrary_text(text):
    page = parse(text)
    assert page.errors >= 0
    for name, _labels, value in page.samples:
        assert name.startswith("vllm:") or name == PROCESS_START
        assert isinstance(value, float)


@settings(max_examples=200)
@given(
    st.lists(st.sampled_from(["vllm:", "{", "}", '"', "\\", "=", ",", " ", "\n", "1", "NaN", "le", "x"]), max_size=60)
)
def test_never_raises_on_format_shaped_garbage(tokens):
    parse("".join(tokens))


# Generated valid pages: vLLM-like families in any order, as a multiprocess server writes them.
_names = st.from_regex(r"vllm:[a-z][a-z_]{0,12}", fullmatch=True)
_label_names = st.from_regex(r"[a-z][a-z_]{0,6}", fullmatch=True)
_label_values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**12), 10**12).map(float),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


@st.composite
def exposition_pages(draw):
    families = draw(st.lists(_names, min_size=1, max_size=5, unique=True))
    lines = []
    for family in families:
        for _ in range(draw(st.integers(1, 4))):
            labels = draw(st.dictionaries(_label_names, _label_values, max_size=3))
            if any(fam == family and f"{{{labels}}}" == known for fam, _, known in lines):
                continue  # one line per series; repeated series are tested on their own
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            series = f"{family}{{{label_text}}}" if labels or draw(st.booleans()) else family
            lines.append((family, f"{series} {_format_value(draw(_values))}", f"{{{labels}}}"))
    # Interleave families' lines, then group by family with one TYPE line each (the parser
    # in prometheus_client wants a family's lines together; ours must not care).
    order = draw(st.permutations(range(len(lines))))
    shuffled = [lines[i] for i in order]
    grouped = []
    for family in families:
        grouped.append(f"# TYPE {family} gauge")
        grouped += [line for fam, line, _ in shuffled if fam == family]
    return "\n".join(grouped) + "\n", "\n".join(line for _, line, _ in shuffled) + "\n"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(exposition_pages())
def test_agrees_with_prometheus_client_on_generated_pages(pages):
    grouped, interleaved = pages
    expected = as_comparable(reference_samples(grouped))
    assert as_comparable(parse(grouped).samples) == expected
    assert parse(grouped).errors == 0
    # The same series in any order (multiprocess output) read the same.
    assert as_comparable(parse(interleaved).samples) == expected
