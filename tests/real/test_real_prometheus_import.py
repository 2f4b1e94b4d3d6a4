"""`capcon history import` from a real Prometheus equals a direct `capcon record` of the same fleet.

Two simulated replicas serve a flat 4 req/s; Debian's `prometheus` scrapes them every second while
`capcon record` polls them every second into its own history file. After about two and a half minutes
the range is imported from Prometheus (`--step 5`) into a second file, and `capcon history --json`
over the same whole minutes is read from both.

The tolerance comes from where each side's minute ends: a recorded minute's last sample is at most one
record interval before the minute's end, an imported one at most a step plus a scrape interval before
it (Prometheus answers a step with its last scrape). So each edge of the range may hold up to
EDGE_SECONDS of requests on one side and not the other: the request counts agree within
2 x EDGE_SECONDS x the rate (plus one request), the busiest five-minute rate by the same share of
its window, and the percentiles and token means (ratios of the same bucket increases) within 10 %.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
import yaml

from console.plan.schema import load_plan
from console.sim.fleet import SimFleet
from tests.plan.conftest import BASE_PLAN, changed

from .conftest import unavailable
from .processes import Unavailable
from .prometheus_harness import JOB, SCRAPE_INTERVAL_SECONDS, start_prometheus

pytestmark = [pytest.mark.real_prometheus, pytest.mark.timeout(420)]

RATE = 4.0
RECORD_SECONDS = 150.0  # at least; longer when it starts early in a minute (recording_seconds)
STEP = 5.0
RECORD_INTERVAL = 1.0
EDGE_SECONDS = STEP + SCRAPE_INTERVAL_SECONDS + RECORD_INTERVAL
PLAN = changed(
    BASE_PLAN,
    {
        "name": "import-lane",
        "replica": {"max_num_seqs": 8},
        "workloads": [
            {
                "name": "chat",
                "kind": "interactive",
                "arrivals": {"weekday": [RATE] * 24, "weekend": [RATE] * 24},
                "tokens": {"input_mean": 500, "input_p95": 1000, "output_mean": 40, "output_max": 80},
                "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.2},
            }
        ],
    },
)


def recording_seconds(began: float) -> float:
    """How long to record from `began` so that the recording holds a whole minute after its first whole minute
    (which has no rate), whatever the second of the minute it starts at: until two edges past the third minute
    boundary after it, and at least RECORD_SECONDS. Started at :05 past, 150 s ended before the check's minute did."""
    third_boundary = (int(began) // 60 + 3) * 60.0
    return max(RECORD_SECONDS, third_boundary + 2 * EDGE_SECONDS - began)


def capcon(*argv: str, timeout: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "console", *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def hourly(db, fleet: str, start: float, end: float) -> list[dict]:
    done = capcon(
        "history", "--db", str(db), "--fleet", fleet, "--from", f"{start:.0f}", "--to", f"{end:.0f}", "--json"
    )
    assert done.returncode == 0, done.stderr
    (only,) = json.loads(done.stdout)["fleets"]
    return only["rows"]


async def test_imported_hours_equal_a_direct_recording_of_the_same_minutes(tmp_path, request, report):
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(PLAN))
    plan = load_plan(str(plan_path))
    recorded, imported = tmp_path / "recorded.sqlite", tmp_path / "imported.sqlite"
    async with SimFleet(plan, replicas=2, seed=11) as sim:
        targets = [url.removeprefix("http://") for url in sim.urls]
        try:
            server = start_prometheus(targets, tmp_path / "prometheus")
        except (Unavailable, OSError) as error:
            unavailable(request, "real_prometheus", str(error) or type(error).__name__)
        try:
            began = time.time()
            argv = [sys.executable, "-m", "console", "record", "--db", str(recorded), "--name", "direct"]
            argv += ["--interval", f"{RECORD_INTERVAL:g}", "--duration", f"{recording_seconds(began):.0f}"]
            for target in targets:
                argv += ["--target", target]
            # The simulated fleet serves from this event loop: the recorder runs beside it, awaited.
            record = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            _, err = await record.communicate()
            assert record.returncode == 0, err.decode(errors="replace")
            ended = time.time()
            await asyncio.sleep(2 * SCRAPE_INTERVAL_SECONDS)  # Prometheus' last scrape of the range is in
            done = capcon(
                "history",
                "import",
                "--prometheus",
                server.url,
                "--selector",
                f'job="{JOB}"',
                "--from",
                f"{began:.0f}",
                "--to",
                f"{ended:.0f}",
                "--step",
                f"{STEP:g}",
                "--db",
                str(imported),
                "--fleet",
                "imported",
            )
            assert done.returncode == 0, done.stderr
        finally:
            server.stop()

    # Whole minutes both sides cover, the first a minute in (the recording's first minute has no rate).
    start = (int(began) // 60 + 2) * 60.0
    end = (int(ended) // 60) * 60.0
    assert end - start >= 60.0, "the recording must hold a whole minute after its first"
    direct, from_prometheus = hourly(recorded, "direct", start, end), hourly(imported, "imported", start, end)
    assert [r["start_unix"] for r in direct] == [r["start_unix"] for r in from_prometheus]
    assert sum(r["requests"] for r in direct) > RATE * 30  # the fleet did serve
    for d, p in zip(direct, from_prometheus):
        report(
            f"import lane, hour from {d['start']}: requests {d['requests']} recorded / {p['requests']} imported; "
            f"busiest {d['busiest_rps']} / {p['busiest_rps']} req/s; TTFT p95 {d['ttft_p95_seconds']} / "
            f"{p['ttft_p95_seconds']} s; TPOT p95 {d['tpot_p95_seconds']} / {p['tpot_p95_seconds']} s"
        )
        rate = d["requests"] / max(d["recorded_seconds"], 1.0)
        assert p["requests"] == pytest.approx(d["requests"], abs=2 * EDGE_SECONDS * rate + 1)
        assert p["replicas"] == d["replicas"] == 2
        if d["busiest_rps"] is not None:  # known once the range holds a whole five minutes
            assert p["busiest_rps"] == pytest.approx(d["busiest_rps"], rel=2 * EDGE_SECONDS / 300.0 + 0.02)
        for key in ("ttft_p95_seconds", "tpot_p95_seconds", "mean_input_tokens", "mean_output_tokens"):
            assert p[key] == pytest.approx(d[key], rel=0.10), key
