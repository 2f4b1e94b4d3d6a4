"""Recorded histories shared by the replay tests (built once per session: recording runs the whole live pipeline)."""

from __future__ import annotations

import pytest

from tests.replay.recording import Incident, record_synthetic


@pytest.fixture(scope="session")
def incident(tmp_path_factory):
    """Half an hour of four replicas every 5 s, compared with the plan: replica-1 down 300-420 s, replica-2 queueing 600-700 s."""
    return record_synthetic(tmp_path_factory.mktemp("incident") / "history.sqlite", 1800.0, replicas=4, interval=5.0)


@pytest.fixture(scope="session")
def planless(tmp_path_factory):
    """Forty minutes without a plan: only the incident flags, none older than the warm-up anywhere after it."""
    return record_synthetic(
        tmp_path_factory.mktemp("planless") / "history.sqlite",
        2400.0,
        replicas=3,
        interval=5.0,
        plan_path=None,
        incident=Incident(down_from=1200.0, down_until=1320.0, queue_from=1500.0, queue_until=1600.0),
    )
