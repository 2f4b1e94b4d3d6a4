"""Fixtures shared by the recorder's command tests."""

from __future__ import annotations

import pytest

from tests.store.recorder_polls import capcon_sim


@pytest.fixture(scope="module")
def targets():
    """`--target URL` arguments for a `capcon sim` of two replicas, running for the module's tests."""
    with capcon_sim(replicas=2) as urls:
        yield [arg for url in urls for arg in ("--target", url)]
