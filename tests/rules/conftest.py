"""Helpers for the rule-file tests: plans written from the planner tests' base plan, and promtool.

promtool ships with Debian's prometheus package. Without it these tests skip with the reason
printed, unless CAPCON_REQUIRE_REAL=1 (CI), where a missing promtool is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from console.engines.rules import RuleOptions, rule_file
from console.plan.schema import load_plan
from tests.plan.conftest import BASE_PLAN, changed

SELECTOR = 'job="vllm"'


def plan_file(directory: Path, changes: dict | None = None, name: str = "plan.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(changed(BASE_PLAN, changes or {}), default_flow_style=None, width=1000))
    return path


def rules_text(plan_path: Path, thresholds=None, **options) -> str:
    options.setdefault("selector", SELECTOR)
    options.setdefault("window_seconds", 60.0)
    options.setdefault("first_year", 2026)
    document = rule_file(load_plan(str(plan_path)), RuleOptions(**options), thresholds)
    return yaml.safe_dump(document, sort_keys=False, width=1_000_000, allow_unicode=True)


@pytest.fixture
def promtool(request):
    binary = shutil.which("promtool")
    if binary is None:
        message = "promtool not found (Debian: apt-get install prometheus)"
        if os.environ.get("CAPCON_REQUIRE_REAL") == "1":
            pytest.fail(message + "\n(CAPCON_REQUIRE_REAL=1: a missing real part is a failure)", pytrace=False)
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"\nSKIPPED {message}", yellow=True)
        pytest.skip(message)

    def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, cwd=cwd)

    return run
