"""Fixtures of the command tests: the recorder's share the store tests' simulated fleet."""

from __future__ import annotations

from tests.store.conftest import targets  # noqa: F401 - a fixture: pytest finds it by name here
