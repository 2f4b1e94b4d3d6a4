"""The plan's fleet.dcgm_targets: the dcgm-exporter pages of the fleet's GPUs, checked as replica targets are."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.plan.schema import PlanError, parse_plan

REPO = Path(__file__).resolve().parents[2]
BASE = (REPO / "plans" / "internal-assistant-18rps.yaml").read_text()


def plan(fleet: str):
    return parse_plan(BASE + "\n" + fleet, "p.yaml")


def test_dcgm_targets_beside_targets_and_beside_prometheus():
    p = plan(
        "fleet:\n  targets: [http://10.0.0.11:8000]\n  dcgm_targets: [10.0.0.11:9400, http://node-b:9400/metrics]\n"
    )
    assert p.fleet.dcgm_targets == ("10.0.0.11:9400", "http://node-b:9400/metrics")
    q = plan("fleet:\n  prometheus_url: http://prom:9090\n  dcgm_targets: [http://node-a:9400]\n")
    assert q.fleet.dcgm_targets == ("http://node-a:9400",)
    assert plan("fleet:\n  targets: [http://10.0.0.11:8000]\n").fleet.dcgm_targets == ()


@pytest.mark.parametrize(
    "value, words",
    [
        ("[]", "fleet.dcgm_targets: an empty list"),
        ("http://node:9400", "a list of dcgm-exporter URLs"),
        ("['ftp://node:9400']", "fleet.dcgm_targets[0]"),
        ("['http://u:hunter2@node:9400/x y']", "fleet.dcgm_targets[0]"),
    ],
)
def test_bad_dcgm_targets_say_where(value, words):
    with pytest.raises(PlanError) as error:
        plan(f"fleet:\n  targets: [http://10.0.0.11:8000]\n  dcgm_targets: {value}\n")
    message = str(error.value)
    assert words in message and "hunter2" not in message and "p.yaml:" in message


def test_targets_may_name_the_gpus_that_serve_them():
    p = plan(
        "fleet:\n  targets:\n    - http://10.0.0.5:8000\n    - {url: http://10.0.0.5:8001, gpus: [2, 3]}\n"
        "    - {url: http://10.0.0.6:8000, pod: vllm-70b-0, namespace: serving}\n"
        "    - {url: http://10.0.0.6:8001, gpus: [2]}\n"
    )
    assert p.fleet.targets == (
        "http://10.0.0.5:8000",
        "http://10.0.0.5:8001",
        "http://10.0.0.6:8000",
        "http://10.0.0.6:8001",
    )
    named = {t.url: t for t in p.fleet.target_gpus}
    assert named["http://10.0.0.5:8001"].gpus == ("2", "3") and named["http://10.0.0.5:8001"].pod is None
    assert (named["http://10.0.0.6:8000"].pod, named["http://10.0.0.6:8000"].namespace) == ("vllm-70b-0", "serving")
    assert named["http://10.0.0.6:8001"].gpus == ("2",)  # GPU 2 of another host


@pytest.mark.parametrize(
    "entry, words",
    [
        ("{url: http://a:8000}", "fleet.targets[0]: a mapping that names no GPU; expected pod or gpus"),
        ("{url: http://a:8000, pod: p, gpus: [0]}", "fleet.targets[0]: both pod and gpus"),
        ("{url: http://a:8000, gpus: []}", "fleet.targets[0].gpus: an empty list"),
        ("{url: http://a:8000, gpus: [1, 1]}", "GPU 1 listed twice"),
        ("{url: http://a:8000, gpus: [-1]}", "fleet.targets[0].gpus[0]: got -1; expected a whole number >= 0"),
        ("{url: http://a:8000, gpus: 0}", "a list of GPU indices"),
        ("{url: http://a:8000, pod: Vllm_0}", "fleet.targets[0].pod: got 'Vllm_0'; expected a Kubernetes name"),
        ("{url: http://a:8000, namespace: x, gpus: [0]}", "namespace without pod"),
        ("{url: http://a:8000, pod: p, port: 1}", "fleet.targets[0].port: unknown key"),
        ("{url: 'ftp://a:8000', pod: p}", "fleet.targets[0].url"),
        ("[http://a:8000]", "fleet.targets[0]: got a list; expected a URL, or {url: URL, pod: NAME}"),
    ],
)
def test_a_bad_target_entry_says_where_and_what_was_expected(entry, words):
    with pytest.raises(PlanError) as error:
        plan(f"fleet:\n  targets:\n    - {entry}\n")
    assert words in str(error.value) and "p.yaml:" in str(error.value)


def test_one_gpu_named_for_two_targets_on_one_host_is_refused_with_both_places():
    with pytest.raises(PlanError) as error:
        plan(
            "fleet:\n  targets:\n    - {url: http://a:8000, gpus: [0, 1]}\n    - {url: http://b:8000, gpus: [1]}\n"
            "    - {url: 'http://a:8001', gpus: [1]}\n"
        )
    assert "fleet.targets[2]: GPU 1 of host a also named by fleet.targets[0]" in str(error.value)
