"""The simulated /metrics page is vLLM 0.32's: compared with a real capture and with prometheus_client."""

from __future__ import annotations

import re
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from console.sim.engine import Engine, SimRequest
from console.sim.exposition import Counter, Gauge, Histogram, Registry, format_float
from console.sim.metrics import VllmMetrics, build_1_2_5_buckets
from console.sim.shape import replica_shape

from .sim_plans import example_a

REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO / "tests" / "fixtures" / "vllm" / "vllm-0.32.0-cpu_tiny-llama_small-kv.txt"


def families(text: str) -> dict[str, tuple[str, str, frozenset[str]]]:
    """vllm:* families: name -> (type, HELP, label names other than le)."""
    found = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
        found[family.name] = (family.type, family.documentation, labels)
    return found


def buckets(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r'(vllm:\S+)_bucket\{.*le="([^"]+)"', line)
        if match:
            edges = found.setdefault(match.group(1), [])
            if match.group(2) not in edges:
                edges.append(match.group(2))
    return found


@pytest.fixture(scope="module")
def capture() -> str:
    return CAPTURE.read_text()


@pytest.fixture
def page() -> str:
    """A simulated page after some traffic, with the capture's max_model_len (1024)."""
    shape = replica_shape(example_a())
    metrics = VllmMetrics("tiny", shape, 1024, created=1.7e9)
    engine = Engine(shape, observer=metrics)
    for i in range(5):
        engine.submit(SimRequest(f"r{i}", 300, 40, 40, arrival=0.1 * i))
    engine.advance(100.0)
    return metrics.render(engine)


def test_same_vllm_families_types_help_and_labels_as_real_vllm(capture, page):
    real, ours = families(capture), families(page)
    assert set(ours) == set(real)
    for name, (kind, help_text, labels) in real.items():
        assert ours[name] == (kind, help_text, labels), name


def test_same_bucket_boundaries_as_real_vllm(capture, page):
    assert buckets(page) == buckets(capture)


def test_every_counter_and_histogram_has_created_series(capture, page):
    def created(text):
        return {m.group(1) for m in re.finditer(r"^(vllm:\S+?)_created\{", text, re.M)}

    assert created(page) == created(capture)


def test_cache_config_info_has_the_real_label_set_and_our_capacity(capture, page):
    def info_labels(text):
        for family in text_string_to_metric_families(text):
            if family.name == "vllm:cache_config_info":
                return family.samples[0].labels
        raise AssertionError("no cache_config_info")

    ours, real = info_labels(page), info_labels(capture)
    assert set(ours) == set(real)
    shape = replica_shape(example_a())
    assert int(ours["num_gpu_blocks"]) * int(ours["block_size"]) == shape.kv_capacity_tokens
    assert ours["engine"] == "0" and "model_name" not in ours


def test_counters_agree_with_the_engine(page):
    values = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    labels = (("engine", "0"), ("model_name", "tiny"))
    assert values[("vllm:generation_tokens_total", labels)] == 5 * 40
    assert values[("vllm:prompt_tokens_total", labels)] == 5 * 300
    assert values[("vllm:request_success_total", (*labels[:1], ("finished_reason", "length"), labels[1]))] == 5
    assert values[("vllm:time_to_first_token_seconds_count", labels)] == 5
    assert values[("vllm:inter_token_latency_seconds_count", labels)] == 5 * 39
    assert values[("vllm:iteration_tokens_total_sum", labels)] == 5 * 300 + 5 * 39


def _strip_created(text: str) -> str:
    return re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 T", text)


def test_text_matches_prometheus_client_byte_for_byte():
    official = prometheus_client.CollectorRegistry()
    c = prometheus_client.Counter(
        "vllm:prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"], registry=official
    )
    g = prometheus_client.Gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        ["model_name", "engine"],
        registry=official,
    )
    h = prometheus_client.Histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        ["model_name", "engine"],
        buckets=[1, 8, 16, 2048],
        registry=official,
    )
    ours = Registry()
    oc = ours.register(Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ("model_name", "engine")))
    og = ours.register(
        Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", ("model_name", "engine"))
    )
    oh = ours.register(
        Histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ("model_name", "engine"),
            [1, 8, 16, 2048],
        )
    )
    labels = {"model_name": 'we"ird\\name', "engine": "0"}
    c.labels(**labels).inc(1234567.0)
    oc.child(0.0, **labels).inc(1234567.0)
    g.labels(**labels).set(0.123456789)
    og.child(**labels).set(0.123456789)
    for value in (1, 8, 9, 16, 3000, 0.5):
        h.labels(**labels).observe(value)
        oh.child(0.0, **labels).observe(value)
    expected = prometheus_client.generate_latest(official).decode()
    assert _strip_created(ours.render()) == _strip_created(expected)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.001, 2560.0, 1.7959972037448087e9, 123456789.0, 5e-324, float("inf")])
def test_floats_are_written_as_go_writes_them(value):
    assert format_float(value) == floatToGoString(value)


def test_request_size_buckets_follow_max_model_len():
    assert build_1_2_5_buckets(1024) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert build_1_2_5_buckets(8192)[-1] == 5000
