"""Fixtures for the real lanes: one vLLM on CPU and one Prometheus scraping it, per test session.

When a real part cannot be set up here the lane is skipped with the reason
printed, unless CAPCON_REQUIRE_REAL=1 (CI), where it fails instead.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from .processes import Unavailable
from .prometheus_harness import start_prometheus
from .vllm_harness import ensure_venv, make_model, start_server


def write_through(config: pytest.Config, line: str, **markup) -> None:
    """A line on the terminal even while pytest captures the test's output."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line, **markup)


def unavailable(request: pytest.FixtureRequest, lane: str, reason: str):
    message = f"{lane} lane: {reason}"
    if os.environ.get("CAPCON_REQUIRE_REAL") == "1":
        pytest.fail(message + "\n(CAPCON_REQUIRE_REAL=1: a missing real part is a failure)", pytrace=False)
    write_through(request.config, f"\nSKIPPED {message}", yellow=True)
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_server(request, tmp_path_factory):
    scratch = tmp_path_factory.mktemp("vllm")
    setup_log = scratch / "setup.log"
    try:
        python = ensure_venv(setup_log)
        model = make_model(python, scratch, setup_log)
        server = start_server(python, model, scratch)
    except (Unavailable, OSError, subprocess.SubprocessError) as error:
        unavailable(request, "real_vllm", str(error) or type(error).__name__)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def prometheus_server(request, vllm_server, tmp_path_factory):
    try:
        server = start_prometheus([vllm_server.target], tmp_path_factory.mktemp("prometheus"))
    except (Unavailable, OSError, subprocess.SubprocessError) as error:
        unavailable(request, "real_prometheus", str(error) or type(error).__name__)
    yield server
    server.stop()


@pytest.fixture
def report(request):
    """Write a line to the terminal even when output is captured: the lanes' measured figures."""

    def write(line: str) -> None:
        write_through(request.config, line)

    return write
