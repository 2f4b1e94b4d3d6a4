"""What-if scenarios on the simulated replica: each lever moves the figures the way it must, and can be wrong."""

import pytest

from console.ahead import whatif
from console.ahead.whatif import Costs, Lengths, Lever, Policy, Scenario, Workload, run_scenario
from console.sim.shape import replica_shape
from tests.sim.sim_plans import office_assistant

PLAN = office_assistant()  # one-GPU 14B replicas holding their targets to 5 rps each
SHAPE = replica_shape(PLAN)
TOKENS = PLAN.interactive[0].tokens
TARGETS = PLAN.interactive[0].targets
LENGTHS = Lengths(TOKENS.input_mean, TOKENS.input_p95, TOKENS.output_mean, int(TOKENS.output_max), SHAPE.max_model_len)
COSTS = Costs(gpus_per_replica=1, hosted_price_per_million=2.0)
PASS = Policy(mode="pass")
CAP = 16  # the gateway's in-flight cap per replica


def _run(replicas: int, rps: float, policy: Policy = PASS, minutes: int = 2, cap: int | None = None, share=0.0):
    scenario = Scenario("s", replicas, policy, cap)
    return run_scenario(SHAPE, scenario, Workload((rps,) * minutes, LENGTHS, share), COSTS)


def test_nothing_changed_at_low_load_meets_the_targets():
    result = _run(3, 6.0)
    assert result.ttft_p95_seconds < TARGETS.ttft_p95_seconds
    assert result.tpot_p95_seconds < TARGETS.tpot_p95_seconds
    assert result.refused_share == result.hosted_share == result.deferred_share == 0.0
    assert result.unfinished_share == 0.0
    assert result.gpu_hours == pytest.approx(3 * 2 / 60)


def test_one_more_replica_lowers_ttft_under_overload():
    now = _run(3, 30.0)  # 10 rps per replica: past what the simulated replica holds
    more = _run(4, 30.0)
    assert now.ttft_p95_seconds > TARGETS.ttft_p95_seconds
    assert more.ttft_p95_seconds < now.ttft_p95_seconds / 2
    assert more.gpu_hours > now.gpu_hours


def test_a_bounded_queue_refuses_a_share_that_grows_with_load():
    bounded = Policy(mode="bounded_queue", max_queue=8, max_wait_seconds=3.0)
    shares = [_run(3, rps, bounded, cap=CAP).refused_share for rps in (6.0, 18.0, 24.0, 30.0)]
    assert shares[0] == 0.0
    assert shares[1] < shares[2] < shares[3]
    assert shares[3] > 0.2
    # What is admitted waits at most the bound: the clients' TTFT stays near it, not growing with the backlog.
    assert _run(3, 30.0, bounded, cap=CAP).ttft_p95_seconds < 3.0 + 2.0


def test_hosted_sends_a_share_and_costs_money():
    hosted = Policy(mode="hosted", hosted_after_queue=4, hosted_allowed=True)
    result = _run(3, 24.0, hosted, cap=CAP)
    assert result.hosted_share > 0.05
    assert result.hosted_cost > 0
    assert result.refused_share < result.hosted_share
    unpriced = run_scenario(SHAPE, Scenario("s", 3, hosted, CAP), Workload((24.0,) * 2, LENGTHS), Costs(1, None))
    assert unpriced.hosted_cost is None and unpriced.hosted_share == result.hosted_share


def test_defer_counts_deferrable_work_and_runs_the_rest():
    defer = Policy(mode="defer")
    result = _run(3, 12.0, defer, cap=CAP, share=0.3)
    assert result.deferred_share == pytest.approx(0.3, abs=0.06)
    assert _run(3, 12.0, PASS, share=0.3).deferred_share == 0.0


def test_the_slice_of_a_large_fleet_keeps_its_load_per_replica():
    big = run_scenario(SHAPE, Scenario("s", 40, PASS), Workload((160.0,) * 3, LENGTHS), COSTS)
    assert big.simulated_replicas < 40
    assert big.arrivals == pytest.approx(160.0 * 180 * big.simulated_replicas / 40, rel=0.1)
    assert big.ttft_p95_seconds < TARGETS.ttft_p95_seconds  # 4 rps per replica: under capacity


def _page_tpot_p95(slowdown: float) -> float:
    """The TPOT p95 a fleet `slowdown` times slower than the simulator shows on vLLM's page: through its buckets."""
    run = run_scenario(SHAPE, Scenario("s", 1, PASS), Workload((3.0,) * 2, LENGTHS), COSTS, slowdown)
    assert run.tpot_p95_seconds is not None
    return whatif.histogram_p95(_tpots(slowdown))


def _tpots(slowdown: float) -> list[float]:
    fleet = whatif._FleetRun(SHAPE, 1, PASS, None, slowdown)
    for at, lengths, deferrable in whatif._arrivals(Workload((3.0,) * 2, LENGTHS), 1.0, whatif.random.Random(0)):
        fleet.arrive(at, lengths, deferrable)
    fleet.finish(120.0, 240.0)
    return fleet.tpots


def test_calibration_finds_the_factor_that_gives_the_observed_tpot():
    plain = whatif.calibrate(SHAPE, LENGTHS, 3.0, None)
    assert plain.factor == 1.0 and "unknown" in plain.reason
    # A fleet that is the simulator: no correction, though vLLM's buckets read its TPOT p95 above the exact one.
    own = _page_tpot_p95(1.0)
    assert own > whatif.percentile(_tpots(1.0), 0.95)
    assert whatif.calibrate(SHAPE, LENGTHS, 3.0, own).factor == 1.0
    # A fleet 2.5 times slower per step: found within what the buckets can tell apart.
    slower = _page_tpot_p95(2.5)
    correction = whatif.calibrate(SHAPE, LENGTHS, 3.0, slower)
    assert 2.2 < correction.factor < 2.8
    assert correction.simulated_tpot_p95_seconds == pytest.approx(own)
    assert whatif.histogram_p95(_tpots(correction.factor)) == pytest.approx(slower, rel=0.05)
    held = whatif.calibrate(SHAPE, LENGTHS, 3.0, 100 * own)
    assert held.factor == whatif.CORRECTION_BOUNDS[1] and "bound" in held.reason


def test_histogram_p95_reads_values_as_the_page_does():
    assert whatif.histogram_p95([]) is None
    # All in the 100-150 ms bucket: Prometheus interpolates to 95 % of the way through it.
    assert whatif.histogram_p95([0.134] * 20) == pytest.approx(0.1475)
    assert whatif.histogram_p95([0.02] * 19 + [0.12]) == pytest.approx(0.025)


def test_scenarios_start_with_now_and_name_each_lever():
    chosen = whatif.scenarios(4, PASS, [*whatif.DEFAULT_LEVERS, Lever(replicas="6")], CAP, False)
    assert [s.name for s in chosen] == [
        "now",
        "+1 replica",
        "bounded queue 32",
        "hosted after 16",
        "defer batch",
        "6 replicas",
    ]
    assert [s.replicas for s in chosen] == [4, 5, 4, 4, 4, 6]
    assert chosen[0].planned_cap is None  # no gateway: nothing caps a replica
    assert "prompts_may_leave" in chosen[3].note


@pytest.mark.parametrize("asked, current, expected", [("+1", 3, 4), ("-2", 3, 1), ("7", 3, 7)])
def test_replica_counts(asked, current, expected):
    assert whatif.replicas_for(asked, current) == expected


@pytest.mark.parametrize("asked", ["-3", "0", "x", "+"])
def test_replica_counts_that_cannot_be(asked):
    with pytest.raises(ValueError, match="expected"):
        whatif.replicas_for(asked, 3)


# ---- where the fleet is: its backlog carried in, and a new replica's lead time ----------------------------------


def _backlog_run(backlog: whatif.Backlog, replicas: int = 3, rps: float = 12.0, policy: Policy = PASS, cap=None):
    workload = Workload((rps,) * 2, LENGTHS, 0.0, backlog)
    return run_scenario(SHAPE, Scenario("s", replicas, policy, cap), workload, COSTS)


def test_a_backlog_carried_in_makes_the_first_minutes_slower_and_its_waiting_ones_count():
    empty = _backlog_run(whatif.Backlog())
    busy = _backlog_run(whatif.Backlog(running_per_replica=24.0, waiting_per_replica=30.0))
    assert busy.arrivals == pytest.approx(empty.arrivals + 90, abs=3)  # the 3 x 30 waiting count as arrivals at 0
    assert busy.ttft_p95_seconds > 2 * empty.ttft_p95_seconds
    # Decoding ones are not judged (not arrivals): they hold batch slots and KV while they finish their answers.
    decoding = _backlog_run(whatif.Backlog(running_per_replica=float(SHAPE.max_num_seqs)))
    assert decoding.arrivals == empty.arrivals
    assert decoding.ttft_p95_seconds >= empty.ttft_p95_seconds


def test_the_gateways_queue_carried_in_is_refused_at_its_deadline_when_nothing_frees():
    bounded = Policy(mode="bounded_queue", max_queue=400, max_wait_seconds=1.0)
    full = whatif.Backlog(running_per_replica=CAP, gateway_queued=300.0)
    result = _backlog_run(full, replicas=1, rps=1.0, policy=bounded, cap=CAP)
    # 300 queued behind one replica whose slots are all taken: most wait past the second and are refused.
    assert result.refused_share > 0.5
    assert _backlog_run(whatif.Backlog(), replicas=1, rps=1.0, policy=bounded, cap=CAP).refused_share == 0.0


@pytest.mark.slow  # three whole-fleet runs of ten simulated minutes: a long run
def test_a_new_replica_that_serves_after_its_lead_time_helps_only_after_it():
    spike = Workload((24.0,) * 3, LENGTHS)  # 8 rps a replica on three, past the 5 they hold; every replica simulated
    now = run_scenario(SHAPE, Scenario("now", 3, PASS), spike, COSTS)
    at_once = run_scenario(SHAPE, Scenario("+1", 4, PASS), spike, COSTS)
    late = run_scenario(SHAPE, Scenario("+1", 4, PASS, serving_now=3, lead_seconds=120.0), spike, COSTS)
    assert now.simulated_replicas == 3 and late.simulated_replicas == at_once.simulated_replicas == 4
    assert late.arrivals == now.arrivals == at_once.arrivals  # the same draws: the lever is the only difference
    # Two minutes of the three on three replicas: between doing nothing and a replica serving at once, and its
    # TPOT p95 that of three replicas.
    assert at_once.ttft_p95_seconds < late.ttft_p95_seconds < now.ttft_p95_seconds
    assert at_once.tpot_p95_seconds < late.tpot_p95_seconds * 0.7


@pytest.mark.slow  # a slice of the fleet simulated over its lead time: a long run
def test_in_a_slice_the_lead_time_holds_the_smaller_fleets_share_until_the_join():
    # 40 replicas at 8 rps each: more arrivals than a scenario simulates, so a slice of them runs.
    big = Workload((320.0,) * 2, LENGTHS)
    now = run_scenario(SHAPE, Scenario("now", 40, PASS), big, COSTS)
    late = run_scenario(SHAPE, Scenario("+8", 48, PASS, serving_now=40, lead_seconds=60.0), big, COSTS)
    assert late.simulated_replicas < 48
    # Until the join the slice carries 1/40 of the fleet's arrivals per replica, then 1/48.
    per_replica_now = now.arrivals / now.simulated_replicas
    per_replica_late = late.arrivals / late.simulated_replicas
    expected = 320.0 * 60 * (1 / 40 + 1 / 48)
    assert per_replica_late == pytest.approx(expected, rel=0.08)
    assert per_replica_late < per_replica_now


def test_the_lever_scenarios_carry_the_lead_time_and_say_it():
    levers = [Lever(replicas="+2"), Lever(replicas="-1"), Lever(mode="defer")]
    built = whatif.scenarios(3, PASS, levers, CAP, True, lead_seconds=600.0)
    more, fewer = built[1], built[2]
    assert (more.replicas, more.serving_now, more.lead_seconds) == (5, 3, 600.0)
    assert more.note == "the new replicas serve after 10 min (the lead time)"
    assert not fewer.joining and fewer.lead_seconds == 0.0  # taking replicas away is at once
    assert not built[3].joining
    at_once = whatif.scenarios(3, PASS, levers, CAP, True)
    assert not at_once[1].joining and at_once[1].note == ""
