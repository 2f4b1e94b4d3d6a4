"""Session-wide: no test (nor a `capcon` it starts) writes into the user's own history file; modules compile once."""

from __future__ import annotations

import os
import sys

import pytest

# The suite imports the same modules in each of its workers and in every `capcon` it starts (hundreds of
# processes). Where the environment turns bytecode caching off (PYTHONDONTWRITEBYTECODE), each of them compiled
# every module, and pytest rewrote every test's asserts, afresh: the README's test command took 4 min 25 s here,
# 3 min 44 s with the cache on. Set before the workers start, so they and their subprocesses inherit it; the
# __pycache__ folders are ignored by git.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


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
