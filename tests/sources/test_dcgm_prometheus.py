"""dcgm-exporter's series read through Prometheus (console.sources.dcgm_prometheus), over a real loopback socket:
GPUs paired with replicas by the replicas' pod labels or by host, the page's own pod read from `exported_pod`,
units as read directly, failures named (never 0), hostile answers kept to their row."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from console.fleet.gpu_view import fleet_gpu
from console.live.gpu_watch import GpuWatch, through_prometheus
from console.metrics.dcgm import MIB, parse_dcgm
from console.metrics.figures import Figures, ReplicaState
from console.sources.dcgm_prometheus import exposition_of, pods_by_replica
from console.sources.prometheus import PrometheusSource

from .servers import closed_port

NOW = 1_700_000_000.0


def series(name: str, value: str, **labels: str) -> dict:
    return {"metric": {"__name__": name, **labels}, "value": [NOW, value]}


def gpu(uuid: str, instance: str, sm: str, fb_mib: str, **labels: str) -> list[dict]:
    common = {"UUID": uuid, "gpu": uuid[-1], "modelName": "NVIDIA H100 80GB HBM3", "instance": instance, **labels}
    return [
        series("DCGM_FI_PROF_SM_ACTIVE", sm, **common),
        series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0.25", **common),
        series("DCGM_FI_PROF_DRAM_ACTIVE", "0.5", **common),
        series("DCGM_FI_DEV_FB_USED", fb_mib, **common),
        series("DCGM_FI_DEV_GPU_UTIL", "97", **common),
    ]


# Replica a (pod vllm-a, tensor parallel 2) on a node whose exporter is scraped with its own pod labels, so the
# page's pod arrives as exported_pod; replica b (no pod label) on host 10.0.0.2 with the only GPU there.
DCGM_ROWS = [
    *gpu(
        "GPU-a0", "10.0.0.1:9400", "0.6", "1024", pod="dcgm-exporter-x", exported_pod="vllm-a", exported_namespace="ml"
    ),
    *gpu(
        "GPU-a1", "10.0.0.1:9400", "0.8", "1024", pod="dcgm-exporter-x", exported_pod="vllm-a", exported_namespace="ml"
    ),
    *gpu("GPU-b0", "10.0.0.2:9400", "0.1", "2048", Hostname="node-b"),
]
UP_ROWS = [
    {"metric": {"instance": "10.0.0.7:8000", "pod": "vllm-a", "namespace": "ml"}, "value": [NOW, "1"]},
    {"metric": {"instance": "10.0.0.2:8000"}, "value": [NOW, "1"]},
]


def vector(rows: list[dict]) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": rows}}


@pytest.fixture
async def prometheus():
    """A loopback Prometheus answering the GPUs' query and the replicas' pod query as `answers` says."""
    answers: dict = {"dcgm": vector(DCGM_ROWS), "up": vector(UP_ROWS), "delay": 0.0, "queries": []}

    async def query(request: web.Request) -> web.Response:
        text = request.query.get("query") or (await request.post()).get("query", "")
        answers["queries"].append(text)
        await asyncio.sleep(answers["delay"])
        return web.json_response(answers["dcgm"] if "DCGM_FI_" in text else answers["up"])

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    port = closed_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", answers
    await runner.cleanup()


REPLICAS = [Figures(name=n, url=n, state=ReplicaState.UP) for n in ("10.0.0.7:8000", "10.0.0.2:8000")]


async def read(url: str, selector: str = 'job="dcgm"', timeout: float = 2.0):
    source = PrometheusSource(url, 'job="vllm"', window_seconds=10, timeout=timeout)
    watch = through_prometheus(source, selector)
    try:
        pages = await watch.poll()
    finally:
        await watch.aclose()
        await source.aclose()
    return pages, fleet_gpu(REPLICAS, pages)


async def test_gpus_pair_by_the_replicas_pod_labels_then_by_host(prometheus):
    url, answers = prometheus
    pages, view = await read(url)
    a, b = view.replica("10.0.0.7:8000"), view.replica("10.0.0.2:8000")
    assert a.how == "pod vllm-a" and a.gpus == 2  # exported_pod: the page's own, not the exporter's pod
    assert a.sm_active == pytest.approx(0.7) and a.tensor_active == 0.25 and a.dram_active == 0.5
    assert a.fb_used_bytes == 2 * 1024 * MIB  # MiB read as bytes, summed over the replica's GPUs
    assert b.how == "host 10.0.0.2" and b.gpus == 1 and b.sm_active == pytest.approx(0.1)  # the exporter's address
    assert pages.pages == 2 and pages.errors == ()
    assert {g.gpu_util for g in pages.gpus} == {0.97}  # percent read as a share, as read directly
    dcgm_query = next(q for q in answers["queries"] if "DCGM_FI_" in q)
    assert 'job="dcgm"' in dcgm_query and "DCGM_FI_PROF_SM_ACTIVE" in dcgm_query
    assert any('up{job="vllm"}' in q for q in answers["queries"])  # the fleet's own selector names its replicas


async def test_a_slow_prometheus_leaves_every_replica_unknown_with_why(prometheus):
    url, answers = prometheus
    answers["delay"] = 2.0
    pages, view = await read(url, timeout=0.3)
    assert pages.gpus == () and pages.errors and all("no answer within 0.3 s" in e for e in pages.errors)
    for replica in REPLICAS:
        figures = view.replica(replica.name)
        assert figures.gpus == 0 and figures.sm_active is None and figures.fb_used_bytes is None  # never 0
        assert figures.how.startswith(f"dcgm-exporter pages not read: Prometheus at {url}")


async def test_no_series_matching_the_selector_is_said_in_words(prometheus):
    url, answers = prometheus
    answers["dcgm"] = vector([])
    pages, view = await read(url, selector='job="nope"')
    assert pages.errors == (f"Prometheus at {url}: no dcgm-exporter series match --dcgm-selector 'job=\"nope\"'",)
    assert view.replica("10.0.0.2:8000").how.endswith("no dcgm-exporter series match --dcgm-selector 'job=\"nope\"'")


async def test_a_value_that_is_not_a_number_loses_that_figure_only(prometheus):
    url, answers = prometheus
    answers["dcgm"] = vector([*DCGM_ROWS[:5], series("DCGM_FI_PROF_SM_ACTIVE", "NaN", **DCGM_ROWS[5]["metric"])])
    pages, view = await read(url)
    assert len(pages.gpus) == 2 and {g.uuid: g.sm_active for g in pages.gpus}["GPU-a1"] is None
    assert view.replica("10.0.0.7:8000").sm_active is None  # unknown on one of its GPUs: unknown, never a mean of one


def test_pods_by_replica_reads_kubernetes_discovery_labels_either_way():
    rows = [
        ({"instance": "10.0.0.7:8000", "pod": "vllm-a", "namespace": "ml"}, 1.0),
        ({"instance": "10.0.0.8:8000", "kubernetes_pod_name": "vllm-b", "kubernetes_namespace": "ml"}, 1.0),
        ({"instance": "10.0.0.9:8000"}, 1.0),
    ]
    assert pods_by_replica(rows) == {"10.0.0.7:8000": ("vllm-a", "ml"), "10.0.0.8:8000": ("vllm-b", "ml")}


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_FB_USED", "other", ""]),
            st.dictionaries(st.sampled_from(["UUID", "pod", "exported_pod", "instance", "Hostname", "x y"]), _text),
            st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
        ),
        max_size=8,
    )
)
def test_hostile_rows_never_raise_and_each_uuid_reads_back_as_sent(rows):
    given_rows = [({**labels, "__name__": name}, value) for name, labels, value in rows]
    text, skipped, _exporters = exposition_of(given_rows)
    page = parse_dcgm(text)  # label values escaped: whatever Prometheus said, each row stays one line
    sent = {labels["UUID"] for name, labels, _v in rows if name.startswith("DCGM_FI_") and labels.get("UUID")}
    assert {g.uuid for g in page.gpus} <= sent
    assert skipped == sum(1 for name, _l, _v in rows if not name.startswith("DCGM_FI_"))
    for reading in page.gpus:
        assert reading.sm_active is None or 0 <= reading.sm_active <= 1


def test_the_direct_route_is_unchanged_without_a_selector():
    watch = GpuWatch(["127.0.0.1:9400"])
    assert watch.through is None and watch.source.urls == ["http://127.0.0.1:9400/metrics"]
    asyncio.run(watch.aclose())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--target", "127.0.0.1:9"], "--dcgm-selector: the GPUs' series are read through the fleet's Prometheus"),
        (["--source", "prometheus", "--dcgm-selector", "job=dcgm"], "--dcgm-selector 'job=dcgm': not a Prometheus"),
        (
            ["--source", "prometheus", "--dcgm", "127.0.0.1:9400"],
            "--dcgm with --dcgm-selector: the GPU pages are read directly or through Prometheus",
        ),
    ],
)
def test_watch_refuses_a_misused_dcgm_selector_in_one_line(capsys, extra, message):
    from console.cli import main

    args = ["watch", "--once", "--prometheus", "http://127.0.0.1:9", "--dcgm-selector", 'job="dcgm"', *extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
