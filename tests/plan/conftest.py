"""Helpers for the planner tests: run the real CLI, and write plan files from a base plan plus changes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from console.cli import main

PLANS = Path(__file__).resolve().parents[2] / "plans"

# A small valid plan; tests change one thing at a time.
BASE_PLAN = {
    "name": "base",
    "model": {
        "name": "base-8b",
        "parameters": "8B",
        "layers": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "weight_precision": "bf16",
        "kv_precision": "bf16",
        "max_model_len": 8192,
    },
    "gpu": {"preset": "H100-80GB-SXM"},
    "workloads": [
        {
            "name": "chat",
            "kind": "interactive",
            "arrivals": {"weekday": [4.0] * 24, "weekend": [2.0] * 24},
            "tokens": {"input_mean": 1000, "input_p95": 3000, "output_mean": 300, "output_max": 1000},
            "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.05},
        }
    ],
    "capacity": {"rps_per_replica": 5, "source": "manual"},
}


def changed(base: dict, changes: dict) -> dict:
    """`base` with `changes` merged in; a value of None removes the key."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = changed(out[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture
def write_plan(tmp_path):
    def write(changes: dict | None = None, text: str | None = None, name: str = "plan.yaml") -> Path:
        path = tmp_path / name
        path.write_text(
            text
            if text is not None
            else yaml.safe_dump(changed(BASE_PLAN, changes or {}), default_flow_style=None, width=1000)
        )
        return path

    return write


@pytest.fixture
def capcon(capsys):
    """Run `capcon ARGS` in-process: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def plan_json(capcon):
    """`capcon plan FILE --json [--schedule]` parsed."""

    def run(path, *extra: str) -> dict:
        code, out, err = capcon("plan", path, "--json", *extra)
        assert code == 0, err
        return json.loads(out)

    return run
