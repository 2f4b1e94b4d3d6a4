"""`capcon rules` loaded into a real Prometheus scraping the simulated fleet: its alerts and the console's flags agree.

Debian's `prometheus` scrapes two simulated replicas every second (as the vLLM lane does,
three times over: as is, with `vllm_` names and with older names) and evaluates the rule
file every second. The rules are written with shorter minimum durations (Thresholds, as a
test may pass them to the pure generator; the command always writes the console's own).
The console's side is the project's own flag evaluation (`console.fleet.flags.evaluate`)
on the figures the `prometheus` source reads from the same server, with the same
thresholds and the plan's hour. A spike past the replicas' capacity fills their queues
and pushes p95 TTFT past its target; both sides must raise saturation, the TTFT breach
and above-plan, and for each flag, at every moment sampled, the console showing it or not
must match Prometheus firing it or not within one evaluation interval (plus the sampling
period).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import httpx
import pytest
import yaml

from console.engines.rules import ALERT_FLAGS, MONDAY_UNIX, RuleOptions, offset_expression, rule_file
from console.fleet.flags import FlagInputs, FlagState, Thresholds, evaluate
from console.fleet.plan_now import plan_now
from console.live.handle import utc_offset_seconds
from console.metrics.figures import FLEET_TOTAL
from console.plan.schema import load_plan
from console.sim.fleet import SimFleet
from console.sources.prometheus import PrometheusSource
from tests.plan.conftest import BASE_PLAN, changed

from .conftest import unavailable
from .processes import Unavailable
from .prometheus_harness import ESCAPED_JOB, JOB, LEGACY_JOB, SCRAPE_INTERVAL_SECONDS, start_prometheus

pytestmark = [pytest.mark.real_prometheus, pytest.mark.timeout(240)]

EVALUATION = SCRAPE_INTERVAL_SECONDS  # the harness evaluates rules as often as it scrapes
POLL = 0.5
WINDOW = 5.0
THRESHOLDS = Thresholds(min_duration_seconds=4.0, down_after_seconds=2.0)
# A flat week (the hour never matters), 2 rps against 5 a replica: 1 serving + 1 spare all week. A fast
# replica (8B on an H100, short answers, at most 8 in a batch) carries about 20 rps in the simulator.
PLAN = changed(
    BASE_PLAN,
    {
        "name": "rules-lane",
        "replica": {"max_num_seqs": 8},
        "workloads": [
            {
                "name": "chat",
                "kind": "interactive",
                "arrivals": {"weekday": [2.0] * 24, "weekend": [2.0] * 24},
                "tokens": {"input_mean": 500, "input_p95": 1000, "output_mean": 40, "output_max": 80},
                "targets": {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.2},
            }
        ],
    },
)
SPIKE = 30.0  # 60 rps on two replicas that carry about 40
MIRRORED = set(ALERT_FLAGS.values())


def firing_ids(alerts: list[dict], plan_name: str) -> frozenset[str]:
    found = set()
    for alert in alerts:
        labels = alert["labels"]
        if alert["state"] == "firing" and labels.get("capcon_plan") == plan_name and "capcon_flag" in labels:
            found.add(f"{labels['capcon_flag']}:{labels.get('instance', FLEET_TOTAL)}")
    return frozenset(found)


async def test_prometheus_alerts_and_console_flags_agree_through_a_spike(tmp_path, request, report):
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(PLAN))
    plan = load_plan(str(plan_path))
    year = time.gmtime().tm_year
    rule_paths = []
    for job, suffix in ((JOB, ""), (ESCAPED_JOB, "-escaped"), (LEGACY_JOB, "-legacy")):
        named = dataclasses.replace(plan, name=plan.name + suffix)
        document = rule_file(named, RuleOptions(f'job="{job}"', WINDOW, year), THRESHOLDS)
        path = tmp_path / f"rules{suffix}.yml"
        path.write_text(yaml.safe_dump(document, sort_keys=False, width=1_000_000))
        rule_paths.append(path)

    async with SimFleet(plan, replicas=2, seed=7) as sim:
        targets = [url.removeprefix("http://") for url in sim.urls]
        try:
            server = start_prometheus(targets, tmp_path / "prometheus", rule_files=tuple(rule_paths))
        except (Unavailable, OSError) as error:
            unavailable(request, "real_prometheus", str(error) or type(error).__name__)
        source = PrometheusSource(server.url, f'job="{JOB}"', window_seconds=WINDOW, timeout=5.0)
        samples: list[tuple[float, frozenset[str], frozenset[str]]] = []
        state = FlagState()
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as http:

                async def sample_for(seconds: float) -> None:
                    nonlocal state
                    until = time.monotonic() + seconds
                    while time.monotonic() < until:
                        now = time.time()
                        figures = await source.collect(now)
                        expect = plan_now(plan, now + utc_offset_seconds(plan.timezone, now))
                        state = evaluate(state, FlagInputs(figures, expect), now, THRESHOLDS)
                        console = frozenset(f.id for f in state.active if f.kind in MIRRORED)
                        answer = (await http.get("/api/v1/alerts")).json()["data"]["alerts"]
                        samples.append((now, console, firing_ids(answer, plan.name)))
                        await asyncio.sleep(POLL)

                await sample_for(WINDOW + 4.0)  # the rates' window fills; nothing is over the plan
                sim.spike(SPIKE, 25.0)
                await sample_for(25.0)
                await sample_for(8.0)  # the spike is over: the queues drain, flags and alerts clear

                recorded = {}
                for suffix in ("", "-escaped", "-legacy"):
                    name = plan.name + suffix
                    query = f'{{__name__=~"capcon:(fleet_requests:rate|fleet_ttft_p95:seconds|replica_kv_usage:max)", capcon_plan="{name}"}}'
                    answer = (await http.get("/api/v1/query", params={"query": query})).json()["data"]["result"]
                    recorded[suffix] = sorted(r["metric"]["__name__"] for r in answer)
                dst = await hours_across_daylight_saving(http)
        finally:
            await source.aclose()
            server.stop()

    seen_console = set().union(*(c for _, c, _ in samples))
    seen_prometheus = set().union(*(p for _, _, p in samples))
    report("")
    report(f"rules lane: {len(samples)} samples; console raised {sorted(seen_console)}")
    report(f"  Prometheus fired {sorted(seen_prometheus)}")
    for kind in ("saturation", "slo_breach_ttft", "above_plan"):
        assert any(i.startswith(kind + ":") for i in seen_prometheus), (kind, seen_prometheus)
        assert any(i.startswith(kind + ":") for i in seen_console), (kind, seen_console)
    assert not samples[0][1] and not samples[0][2]  # before the spike: nothing on either side

    # Flag by flag: whenever the console shows it (or not), Prometheus fires it (or not) at a sample within one
    # evaluation interval plus the sampling period of that moment.
    reach = EVALUATION + POLL
    disagreements = []
    for flag_id in sorted(seen_console | seen_prometheus):
        for at, console, _ in samples:
            near = {flag_id in prometheus for t, _, prometheus in samples if abs(t - at) <= reach + 1e-6}
            if (flag_id in console) not in near:
                disagreements.append((flag_id, round(at - samples[0][0], 1), flag_id in console))
    report(f"  (flag, moment) pairs where Prometheus disagreed for longer than {reach:g} s: {len(disagreements)}")
    for flag_id in sorted(seen_console & seen_prometheus):
        console_at = min(t for t, c, _ in samples if flag_id in c)
        prometheus_at = min(t for t, _, p in samples if flag_id in p)
        report(f"  {flag_id}: first shown by Prometheus {prometheus_at - console_at:+.1f} s after the console")
    assert disagreements == []

    # Every spelling the rules read: as is, `vllm_` for `vllm:`, and the pre-0.12 names.
    for suffix, names in recorded.items():
        assert set(names) >= {"capcon:fleet_requests:rate", "capcon:replica_kv_usage:max"}, (suffix, names)
    assert dst == [], dst


async def hours_across_daylight_saving(http: httpx.AsyncClient) -> list:
    """The plan's hour of the week as Prometheus computes it from the rules' offset, around Warsaw's 2026 changes."""
    offset = offset_expression("Europe/Warsaw", 2026, 1)
    zone = ZoneInfo("Europe/Warsaw")
    wrong = []
    for change in ("2026-03-29T01:00:00", "2026-10-25T01:00:00"):  # UTC
        middle = datetime.fromisoformat(change).replace(tzinfo=UTC).timestamp()
        for at in (middle - 3600, middle - 1, middle, middle + 3599, middle + 3600):
            query = f"floor((vector(time()) + ({offset}) + {-MONDAY_UNIX}) / 3600) % 168"
            answer = (await http.get("/api/v1/query", params={"query": query, "time": at})).json()
            got = float(answer["data"]["result"][0]["value"][1])
            local = datetime.fromtimestamp(at, zone)
            if got != local.weekday() * 24 + local.hour:
                wrong.append((at, got, local.isoformat()))
    return wrong
