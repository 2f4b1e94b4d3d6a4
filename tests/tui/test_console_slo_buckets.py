"""A TPOT target inside one of vLLM's buckets on a simulated fleet: the console raises no breach where the
buckets cannot tell, says the target is undetermined and names the bucket; at a true p95 of 80 ms it breaches."""

from __future__ import annotations

import math

from console.metrics.vllm import BUCKET_BOUNDS
from console.metrics.window import BucketDelta, delta_buckets, delta_quantile
from console.tui.widgets.flags_panel import FlagsPanel
from tests.tui.conftest import make_app, poll_times, settle, shown
from tests.tui.fakes import FakeClock, fleet_of, plan_now, replica

PLAN = plan_now(tpot_p95_target_seconds=0.060)


def tpot_fleet(low: float, high: float, requests: int = 1000):
    """Four replicas whose requests' TPOTs spread evenly over low..high, counted into vLLM's TPOT buckets as a
    window of their /metrics would: the figures the window step hands on (interpolated p95 and the buckets)."""
    tpots = [low + (high - low) * i / (requests - 1) for i in range(requests)]
    bounds = (*BUCKET_BOUNDS["tpot"], math.inf)
    delta = BucketDelta({b: float(sum(1 for t in tpots if t <= b)) for b in bounds}, sum(tpots), float(requests))
    window = dict(tpot_p95_seconds=delta_quantile(0.95, delta), latency_buckets={"tpot": delta_buckets(delta)})
    return fleet_of(*(replica(f"gpu-{i}", **window) for i in range(1, 5)), **window)


NEAR_55 = tpot_fleet(0.040, 0.061)  # true p95 59.9 ms, within 60; interpolated inside 50-75 ms: 72.6 ms
AT_80 = tpot_fleet(0.060, 0.084)  # true p95 82.8 ms; 38 % of requests over 75 ms


def kinds(app) -> dict[str, str]:
    return {f.kind: f.severity for f in app.views[0].flags}


async def test_a_target_inside_a_bucket_reads_undetermined_and_a_true_80_ms_breaches():
    assert NEAR_55.fleet.tpot_p95_seconds > 0.070  # what the console judged on before: a CRIT breach
    app = make_app(NEAR_55, clock=FakeClock(), expect=PLAN)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await poll_times(pilot, 4)  # 40 s: past every flag's minimum duration
        assert "slo_breach_tpot" not in kinds(app)
        assert kinds(app)["slo_undetermined_tpot"] == "info"
        panel = shown(app.screen.query_one(FlagsPanel))
        assert "SLO undetermined: TPOT" in panel and "50-75 ms" in panel
        assert not any(r.over for r in app.views[0].rows)  # no TPOT cell marked over its target either
        app.fleets[0].watcher.then(AT_80)
        await poll_times(pilot, 4)
        assert kinds(app)["slo_breach_tpot"] == "critical"
        assert "slo_undetermined_tpot" not in kinds(app)
        assert "SLO breach: TPOT" in shown(app.screen.query_one(FlagsPanel))
