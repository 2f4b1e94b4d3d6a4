"""Hostile plan files: whatever a plan holds, `capcon plan` prints sane figures or refuses it in one line.

Every case: exit 2, one line naming file, line and key (or the file) and what was expected, no
traceback, in well under a second; a plan that loads has every figure of `capcon plan --json`
finite and of a size a fleet can have. The property tests generate the plans: a full plan
with one to three values (or whole subtrees) replaced by hostile YAML, and whole documents.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import socket
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from console.bench import estimate
from console.cli import main
from console.plan.limits import LIMITS, MAX_NESTING, MAX_PLAN_BYTES, MAX_PLAN_REPLICAS
from console.plan.schema import PlanError, load_plan, parse_plan
from console.plan.zones import ZoneNameError, zone_info
from tests.cpu_time import HANG_CPU_SECONDS, cpu_seconds

PLANS = Path(__file__).resolve().parents[2] / "plans"
BASE_TEXT = (PLANS / "internal-assistant-18rps.yaml").read_text()

# Every key a plan may hold, so that a replaced value can land on any of them.
FULL_PLAN = {
    "name": "full",
    "timezone": "Europe/Warsaw",
    "model": {
        "name": "m",
        "parameters": "14.7B",
        "layers": 48,
        "kv_heads": 8,
        "head_dim": 128,
        "attention_heads": 40,
        "hidden_size": 5120,
        "weight_precision": "fp8",
        "kv_precision": "fp16",
        "max_model_len": 8192,
    },
    "gpu": {
        "preset": "H100-80GB-SXM",
        "name": "g",
        "memory_gb": 80,
        "bandwidth_tb_s": 3.35,
        "tflops_bf16": 989,
        "price_per_hour": 3.0,
    },
    "replica": {
        "tensor_parallel": 1,
        "usable_memory_share": 0.9,
        "overhead_gb_per_gpu": 1,
        "bandwidth_efficiency": 0.7,
        "compute_efficiency": 0.57,
        "max_num_seqs": 128,
        "block_size": 16,
    },
    "workloads": [
        {
            "name": "chat",
            "kind": "interactive",
            "arrivals": {"weekday": [2] * 8 + [16, 18] + [17] * 10 + [2] * 4, "weekend": [2] * 24},
            "tokens": {"input_mean": 1200, "input_p95": 4000, "output_mean": 350, "output_max": 1024},
            "targets": {
                "ttft_p95_seconds": 1.0,
                "tpot_p95_seconds": 0.04,
                "e2e_p95_seconds": 30,
                "goodput_share": 0.99,
            },
            "queue_seconds": 0.3,
            "burstiness": 1.0,
        },
        {
            "name": "summaries",
            "kind": "deferrable",
            "arrivals": {"week": [[0.5] * 24 for _ in range(7)]},
            "tokens": {"input_mean": 3000, "input_p95": 6000, "output_mean": 200, "output_max": 400},
            "targets": {"ttft_p95_seconds": 60, "tpot_p95_seconds": 0.2},
        },
    ],
    "capacity": {"rps_per_replica": 5, "source": "manual", "note": "measured"},
    "redundancy": 1,
    "lead_time_minutes": 10,
    "data": {"prompts_may_leave": True, "location": "EU"},
    "overflow": {
        "mode": "bounded_queue",
        "max_queue": 32,
        "max_wait_seconds": 3,
        "hosted_model": "big",
        "hosted_url": "https://api.example.com/v1",
        "hosted_key_env": "HOSTED_API_KEY",
        "hosted_price_per_million": 2.5,
        "deferrable_keys_env": "BATCH_CLIENT_KEYS",
    },
}


def _paths(value, prefix=()):
    """Every place in the plan: each key's value and each list item, containers included."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, prefix + (index,))
    return found


PATHS = _paths(FULL_PLAN)


def _run(*argv: str) -> tuple[int, str, str]:
    """`capcon ARGV` in this process: (exit code, stdout, stderr); an exception fails the test.

    Fast, or bounded: a plan without a capacity is estimated on the simulated replica (a second or
    more), and then the work is bounded by the estimate's token budget instead.
    """
    out, err = io.StringIO(), io.StringIO()
    before = estimate.last_budget
    started = cpu_seconds()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exited:
            code = exited.code
    seconds = cpu_seconds() - started
    spent = estimate.last_budget
    if spent is not before and spent is not None:
        event("estimated")
        assert spent.used <= spent.limit, spent
    else:
        assert seconds < HANG_CPU_SECONDS, seconds
    return code, out.getvalue(), err.getvalue()


def _refused(path, *extra: str) -> str:
    """The one line `capcon plan PATH` refuses it with (exit 2, nothing on stdout, fast)."""
    code, out, err = _run("plan", str(path), *extra)
    assert code == 2, (code, out[:500], err[:500])
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("capcon plan: ")
    assert err[:-1].isprintable(), err
    return err[:-1]


def _numbers(value):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)


def _strings(value):
    """Every text in the JSON (names, notes): the plan's own words, not figures."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} in the JSON")

    return json.loads(text, parse_constant=refuse)


def _check_sane(path) -> None:
    """`capcon plan PATH --json --schedule` and the text report: every figure finite and fleet-sized."""
    code, out, err = _run("plan", str(path), "--json", "--schedule")
    assert code == 0 and err == "", err
    figures = _strict_json(out)
    for number in _numbers(figures):
        assert math.isfinite(number) and abs(number) <= 1e30, number
    assert 1 <= figures["replicas_for_peak"] <= MAX_PLAN_REPLICAS
    assert max(map(max, figures["replicas_by_hour"])) <= MAX_PLAN_REPLICAS + LIMITS["redundancy"].high + 1
    code, out, err = _run("plan", str(path))
    assert code == 0 and err == "", err
    # Names are the plan's own text (a plan may be called "1111..."): only the figures are judged.
    for name in sorted(set(_strings(figures)), key=len, reverse=True):
        if name:
            out = out.replace(name, "")
    assert not re.search(r"\d[\d,]{40,}", out), "a 40-digit figure in the report"


# The cases of the issue, one by one --------------------------------------------------------------


def _with(old: str, new: str) -> str:
    assert old in BASE_TEXT, old
    return BASE_TEXT.replace(old, new, 1)


@pytest.mark.parametrize(
    "text, wanted",
    [
        (
            _with("  layers: 48", "  layers: " + "9" * 400),
            r"model\.layers: got 9{40}… \(400 characters\); expected at most 1000 layers$",
        ),
        (
            _with("  layers: 48", "  layers: " + "9" * 5000),
            r"model\.layers: got .*; expected a whole number >= 1 and <= 1000",
        ),
        (
            _with("parameters: 14.7B", "parameters: " + "9" * 30 + "T"),
            r"model\.parameters: got 9+T; expected at most 1e14 parameters$",
        ),
        (
            _with("parameters: 14.7B", "parameters: " + "9" * 400 + "T"),
            r"model\.parameters: got 9{40}… .*; expected at most 1e14 parameters$",
        ),
        (
            _with("timezone: Europe/Warsaw", "timezone: Europe"),
            r"timezone: unknown time zone 'Europe' \(a region: .*\); expected an IANA zone name",
        ),
        (
            _with("timezone: Europe/Warsaw", "timezone: " + "A" * 5000),
            r"timezone: 'A{40}'… \(5,000 characters\) is too long for a time zone name; expected an IANA zone name .*at most 64",
        ),
        (
            _with("timezone: Europe/Warsaw", "timezone: ../../etc/passwd"),
            r"timezone: '\.\./\.\./etc/passwd' is not a time zone name",
        ),
        (
            _with("16, 18, 18", "16, 1e300, 18"),
            r"weekday\[9\]: got 1e300; expected at most 1000000 requests per second$",
        ),
        (
            _with("16, 18, 18", "16, 1.0e+300, 18"),
            r"weekday\[9\]: got 1\.0e\+300; expected at most 1000000 requests per second$",
        ),
        (
            _with("16, 18, 18", "16, .inf, 18"),
            r"weekday\[9\]: got \.inf; expected a number >= 0 and <= 1000000 requests per second$",
        ),
        (_with("16, 18, 18", "16, .nan, 18"), r"weekday\[9\]: got \.nan; expected a number >= 0"),
        (
            _with("rps_per_replica: 5 ", "rps_per_replica: 1e-300 "),
            r"capacity\.rps_per_replica: got 1e-300; expected a number >= 0\.001 and <= 100000 requests per second per replica$",
        ),
        (
            _with("rps_per_replica: 5 ", "rps_per_replica: .inf "),
            r"capacity\.rps_per_replica: got \.inf; expected a number >= 0\.001",
        ),
        (
            _with("tpot_p95_seconds: 0.040", "tpot_p95_seconds: 1e-300"),
            r"tpot_p95_seconds: got 1e-300; expected a number >= 0\.0001",
        ),
        (
            _with("input_mean: 1200", "input_mean: 1e-300"),
            r"input_mean: got 1e-300; expected a number >= 1 and <= 1e8 tokens$",
        ),
        (
            _with("max_num_seqs: 128", "max_num_seqs: 100000000000"),
            r"max_num_seqs: got 100000000000; expected at most 16384 requests$",
        ),
        (
            _with("name: internal-assistant-18rps", 'name: "fleet\\e[2J"'),
            r"name: '\\x1b' in 'fleet\\x1b\[2J'; expected printable text",
        ),
        (
            _with("name: internal-assistant-18rps", "name: " + "n" * 5000),
            r"name: 5,000 characters .*; expected at most 200 characters$",
        ),
    ],
)
def test_the_hostile_values_of_the_issue_are_one_line(tmp_path, text, wanted):
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    line = _refused(path)
    assert re.search(wanted, line), line
    assert line.startswith(f"capcon plan: {path}:")


def test_rps_within_bounds_but_capacity_too_small_for_one_fleet(tmp_path):
    """1e6 rps at 0.001 rps per replica is 10^9 replicas: each figure is in bounds, the fleet is not."""
    path = tmp_path / "plan.yaml"
    path.write_text(_with("16, 18, 18", "16, 1000000, 18").replace("rps_per_replica: 5 ", "rps_per_replica: 0.001 "))
    line = _refused(path)
    assert (
        "capacity.rps_per_replica: 0.001 rps per replica for the peak of 1000000 rps needs 1,000,000,000 replicas"
        in line
    )
    assert line.endswith(
        f"expected at most {MAX_PLAN_REPLICAS} replicas for one plan (a larger capacity per replica, or one plan per fleet)"
    )


def test_extreme_plans_within_the_bounds_give_sane_figures(tmp_path):
    """The edges of the table at once: the largest model on the smallest GPU, at the most traffic."""
    big = (
        _with("parameters: 14.7B", "parameters: 100T")
        .replace("  layers: 48", "  layers: 1000")
        .replace("16, 18, 18", "16, 1000000, 18")
        .replace("rps_per_replica: 5 ", "rps_per_replica: 100 ")
        .replace("input_mean: 1200", "input_mean: 1")
        .replace("input_p95: 4000", "input_p95: 100000000")
        .replace("tpot_p95_seconds: 0.040", "tpot_p95_seconds: 0.0001")
    )
    small = (
        _with(
            "preset: H100-80GB-SXM",
            "memory_gb: 0.000001, bandwidth_tb_s: 0.001, tflops_bf16: 0.001, price_per_hour: 10000",
        )
        .replace("gpu:\n  memory_gb", "gpu: {memory_gb")
        .replace("price_per_hour: 10000", "price_per_hour: 10000}")
        + "unusual: [gpu.price_per_hour]\n"  # 10,000 $ a GPU-hour reads as a month's price unless meant
    )
    for name, text in (("big.yaml", big), ("small.yaml", small)):
        path = tmp_path / name
        path.write_text(text)
        _check_sane(path)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 20000 + "]" * 20000,
        "- " * 20000 + "x\n",
        "a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 200)),
        "{a: " * 20000 + "1" + "}" * 20000,
    ],
)
def test_deep_nesting_is_refused_before_it_is_composed(tmp_path, text):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    line = _refused(path)
    assert f"YAML nested more than {MAX_NESTING} levels deep; expected a plan" in line


def test_nesting_is_checked_on_text_handed_to_the_loader_too():
    with pytest.raises(PlanError, match="nested more than 64 levels"):
        parse_plan("- " * 70 + "x\n", "inline.yaml")


def test_dev_zero_a_fifo_a_directory_a_socket_and_a_huge_file_are_refused_without_reading_them(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # nobody writes to it: opening it for reading would wait for ever
    assert (
        _refused(fifo)
        == f"capcon plan: {fifo}: is a named pipe (FIFO), not a regular file; expected a plan file (YAML)"
    )
    assert (
        _refused("/dev/zero")
        == "capcon plan: /dev/zero: is a character device, not a regular file; expected a plan file (YAML)"
    )
    assert _refused(tmp_path) == f"capcon plan: {tmp_path}: is a directory; expected a plan file (YAML)"
    huge = tmp_path / "huge.yaml"
    huge.write_text(BASE_TEXT + "# " + "x" * MAX_PLAN_BYTES + "\n")
    assert _refused(huge) == (
        f"capcon plan: {huge}: larger than 256 KB; expected a plan file of at most 256 KB (a plan is a few KB)"
    )
    sparse = tmp_path / "sparse.yaml"
    with open(sparse, "wb") as file:
        file.truncate(10**12)  # a terabyte that takes no room
    assert "larger than 256 KB" in _refused(sparse)
    with socket.socket(socket.AF_UNIX) as server:
        address = tmp_path / "socket.yaml"
        server.bind(str(address))
        assert (
            _refused(address) == f"capcon plan: {address}: is a socket, not a regular file; expected a plan file (YAML)"
        )


def test_a_file_just_under_the_cap_is_read(tmp_path):
    path = tmp_path / "padded.yaml"
    path.write_text(BASE_TEXT + "# " + "x" * (MAX_PLAN_BYTES - len(BASE_TEXT.encode()) - 10) + "\n")
    assert load_plan(path).name == "internal-assistant-18rps"


def test_text_that_is_not_utf8_or_holds_control_characters_is_one_line(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(BASE_TEXT.encode().replace(b"on-premises", b"on-pr\xe9mises"))
    line = _refused(latin)
    assert re.match(rf"capcon plan: {re.escape(str(latin))}:\d+: not UTF-8 text; expected a plan file \(YAML\)$", line)
    control = tmp_path / "control.yaml"
    control.write_text(BASE_TEXT.replace("location: on-premises", "location: on\x07premises"))
    line = _refused(control)
    assert "YAML error: the character '\\x07' is not allowed in YAML" in line
    with pytest.raises(PlanError, match="not UTF-8 text"):
        parse_plan(BASE_TEXT.replace("on-premises", "on-\udcffpremises"), "inline.yaml")


@pytest.mark.parametrize(
    "name", ["Europe", "America/Argentina", "A" * 5000, "../../etc/passwd", "Europe/\x00", "\udcff", "", "Nowhere/City"]
)
def test_the_zone_validator_refuses_without_an_os_error(name):
    """What `capcon history --tz` uses too (console/plan/zones.py)."""
    with pytest.raises(ZoneNameError) as refused:
        zone_info(name)
    assert isinstance(refused.value, ValueError)
    assert len(str(refused.value)) < 300
    assert str(refused.value).endswith(refused.value.expected)


def test_the_zone_validator_takes_every_zone_name():
    import zoneinfo

    for name in sorted(zoneinfo.available_timezones()):
        assert zone_info(name).key == name


# Properties -----------------------------------------------------------------------------------------

_EDGES = sorted({v for limit in LIMITS.values() for v in (limit.low, limit.high) if math.isfinite(v)})
_NUMBERS = st.one_of(
    st.builds(lambda m, k: f"{m:g}e{k}", st.floats(1, 9.99), st.integers(-330, 330)),
    st.builds(
        lambda sign, digit, n: sign + digit * n,
        st.sampled_from(["", "-", "+"]),
        st.sampled_from("159"),
        st.integers(1, 5000),
    ),
    st.builds(
        lambda v, scale: repr(v * scale), st.sampled_from(_EDGES), st.sampled_from([1.0, 1.0000001, 0.9999999, -1.0])
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.builds(
        lambda n, suffix: f"{n}{suffix}",
        st.one_of(st.integers(0, 10**20), st.floats(0, 1e20).map(repr)),
        st.sampled_from(list("kKmMbBtT")),
    ),
)
_TOKENS = st.sampled_from(
    [
        "~",
        "null",
        "yes",
        "no",
        "on",
        "true",
        "auto",
        "0x7fffffffffffffff",
        "0o777",
        "1_000_000",
        "1:30:00",
        "190:20:30",
        "2024-01-01",
        "!!int abc",
        "!!float x",
        "!!python/object:os.system x",
        "!!binary aGVsbG8=",
        "!!str 5",
        "!!int 5",
        "*undefined",
        "&a 5",
        ".inf",
        "-.inf",
        ".nan",
        ".NaN",
        "Europe",
        "Europe/Warsaw",
        "UTC",
        "interactive",
        "deferrable",
        "fp8",
        "H100-80GB-SXM",
        "'quoted'",
        '"\\e[2J"',
        '"\\ud800"',
        '"\\0"',
        '"\\x85"',
        "''",
        "[]",
        "{}",
        "[1, 2]",
        "{a: 1}",
        "|\n  block",
        "- a",
        "? a",
        "@",
        "`",
        "%",
        "a: b: c",
        "'" + "x" * 300 + "'",
        "x" * 5000,
    ]
)
_STRINGS = st.text(st.characters(codec="utf-8", exclude_categories=()), max_size=50).map(json.dumps)
_DEEP = st.builds(lambda n, o, c: o * n + "1" + c * n, st.integers(1, 25000), st.just("["), st.just("]"))
_SCALARS = st.one_of(_NUMBERS, _TOKENS, _STRINGS)
_VALUES = st.one_of(
    _SCALARS,
    _DEEP,
    st.recursive(
        _SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=30).map(lambda items: "[" + ", ".join(items) + "]"),
            st.lists(st.tuples(st.sampled_from(["a", "name", "layers", "weekday", "x y"]), inner), max_size=5).map(
                lambda pairs: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
            ),
        ),
        max_leaves=40,
    ),
)


def _set(document, path, value) -> None:
    for key in path[:-1]:
        document = document[key]
    document[path[-1]] = value


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), _VALUES), min_size=1, max_size=3))
def test_any_value_anywhere_gives_sane_figures_or_one_line(folder, changes):
    import copy

    document = copy.deepcopy(FULL_PLAN)
    values = {}
    for number, (path, value) in enumerate(changes):
        try:
            _set(document, path, f"HOSTILE{number}")
        except (KeyError, IndexError, TypeError):  # an earlier change replaced what held this path
            continue
        values[f"HOSTILE{number}"] = value
    text = yaml.safe_dump(document, default_flow_style=None, width=10**9, sort_keys=False)
    for marker, value in values.items():
        text = text.replace(marker, value)
    path = folder / "mutated.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, _out, _err = _run("plan", str(path), "--json")
    event("loads" if code == 0 else "refused")
    if code == 0:
        _check_sane(path)
    else:
        _refused(path, "--json")


_PY_SCALARS = st.one_of(
    st.integers(-(10**1000), 10**1000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.booleans(),
    st.none(),
)
_PY_VALUES = st.recursive(
    _PY_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=8), st.dictionaries(st.text(max_size=12), inner, max_size=8)),
    max_leaves=60,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_PY_VALUES)
def test_any_yaml_document_is_refused_in_one_line_or_loads_sane(folder, document):
    try:
        text = yaml.safe_dump(document, allow_unicode=True)
    except (ValueError, yaml.YAMLError):  # a string PyYAML cannot write: not a document
        return
    path = folder / "document.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, _out, _err = _run("plan", str(path), "--json")
    event("loads" if code == 0 else "refused")
    if code == 0:
        _check_sane(path)
    else:
        _refused(path, "--json")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=_PY_VALUES, where=st.sampled_from(PATHS))
def test_a_whole_subtree_anywhere_in_a_plan(folder, document, where):
    import copy

    plan = copy.deepcopy(FULL_PLAN)
    _set(plan, where, document)
    try:
        text = yaml.safe_dump(plan, allow_unicode=True, sort_keys=False)
    except (ValueError, yaml.YAMLError):
        return
    path = folder / "subtree.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, _out, _err = _run("plan", str(path), "--json")
    event("loads" if code == 0 else "refused")
    if code == 0:
        _check_sane(path)
    else:
        _refused(path, "--json")
