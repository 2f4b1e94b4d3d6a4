"""Session-wide: no test (nor a `capcon` it starts) writes into the user's own history file."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_data_home(tmp_path_factory):
    # `capcon watch` records by default under XDG_DATA_HOME; subprocesses inherit the variable.
    previous = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("data-home"))
    yield
    if previous is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = previous
