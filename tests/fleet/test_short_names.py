"""Replica names cut to the part that tells them apart, never all alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.fleet.format import short_names


@pytest.mark.parametrize(
    "names, width, expected",
    [
        pytest.param(
            ["127.0.0.11:28100", "127.0.0.12:28100", "127.0.0.15:28100"],
            11,
            ["…0.11:28100", "…0.12:28100", "…0.15:28100"],
            id="the demo's five targets",
        ),
        pytest.param(["10.0.0.11:8000", "10.0.0.12:8000"], 11, ["…0.11:8000", "…0.12:8000"], id="a real fleet"),
        pytest.param(["10.0.0.11:8000", "10.0.0.12:8000"], 8, ["…11:8000", "…12:8000"], id="no room for context"),
        pytest.param(
            ["127.0.0.1:44007", "127.0.0.1:46227"], 11, ["…0.1:44007", "…0.1:46227"], id="one host, ports apart"
        ),
        pytest.param(["replica-0", "replica-1"], 11, ["replica-0", "replica-1"], id="names that fit stay whole"),
        pytest.param(
            ["10.0.0.11:8000", "10.0.0.12:8000"],
            20,
            ["10.0.0.11:8000", "10.0.0.12:8000"],
            id="a wider screen shows them whole",
        ),
        pytest.param(
            ["vllm-0.svc.cluster.local:8000", "vllm-10.svc.cluster.local:8000"],
            11,
            ["…0.svc.clu…", "…10.svc.cl…"],
            id="a long suffix is cut after what differs",
        ),
        pytest.param(["same-host:8000", "same-host:8000"], 8, ["sam…8000"], id="duplicates: one entry"),
    ],
)
def test_short_names(names, width, expected):
    shown = short_names(names, width)
    assert [shown[n] for n in dict.fromkeys(names)] == expected


names_strategy = st.lists(st.text(alphabet="abc.:-_/019é\u200b", min_size=1, max_size=40), min_size=1, max_size=12)


@given(names_strategy, st.integers(min_value=2, max_value=40))
def test_every_name_fits_its_width(names, width):
    shown = short_names(names, width)
    assert set(shown) == set(names)
    assert all(len(value) <= width for value in shown.values())
    assert all(value == name for name, value in shown.items() if len(name) <= width)


@given(st.integers(min_value=1, max_value=60), st.integers(min_value=1, max_value=65535), st.integers(8, 20))
def test_hosts_numbered_alike_stay_apart(count, port, width):
    names = [f"10.0.{i // 250}.{i % 250 + 1}:{port}" for i in range(count)]
    shown = short_names(names, width)
    assert len(set(shown.values())) == len(names)
