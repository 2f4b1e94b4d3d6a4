"""Traffic follows the plan: profile with time compressed, arrival statistics, lengths, classes, spikes."""

from __future__ import annotations

import dataclasses
import random
import statistics

import pytest

from console.plan.model import TokenStats
from console.sim.traffic import (
    LengthSampler,
    Target,
    TrafficGenerator,
    arrival_gap,
    profile_rate,
    week_label,
)

from .sim_plans import office_assistant, office_week


class Recorder(Target):
    def __init__(self, load: float = 0.0, up: bool = True):
        self.sent: list[tuple[int, int, int, str]] = []
        self._load = load
        self._up = up

    def up(self) -> bool:
        return self._up

    def load(self) -> float:
        return self._load + len(self.sent)

    def send(self, prompt, answer, max_tokens, kind) -> bool:
        self.sent.append((prompt, answer, max_tokens, kind))
        return True


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def run_for(generator: TrafficGenerator, clock: FakeClock, seconds: float, tick: float = 0.05) -> int:
    sent = 0
    end = clock.t + seconds
    while clock.t < end:
        clock.t += tick
        sent += generator.run_due(clock.t)
    return sent


def test_profile_reads_the_plan_hour_by_hour():
    workload = office_assistant().workloads[0]
    monday_10_30 = 10.5 * 3600
    assert profile_rate(workload, monday_10_30) == 18.0
    assert profile_rate(workload, 3 * 3600 + 1800) == 2.0
    # Between the 07:30 (2 rps) and 08:30 (18 rps) marks it ramps linearly.
    assert profile_rate(workload, 8 * 3600) == pytest.approx(10.0)
    saturday_noon = 5 * 86400 + 12 * 3600
    assert profile_rate(workload, saturday_noon) == 2.0
    assert week_label(saturday_noon + 90) == "sat 12:01"


def test_time_compression_walks_the_week():
    clock = FakeClock()
    generator = TrafficGenerator(
        office_assistant().workloads, [Recorder()], 8192, time_scale=3600.0, start_week_seconds=0.0, clock=clock
    )
    generator.run_due(clock.t)
    clock.t += 10.5  # 10.5 hours of profile at an hour a second
    assert week_label(generator.week_seconds()) == "mon 10:30"
    assert generator.total_rate() == 18.0


def test_arrivals_match_the_rate_and_poisson_spread():
    rng = random.Random(1)
    gaps = [arrival_gap(rng, 4.0) for _ in range(20000)]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.03)
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.05)  # exponential: sd = mean
    bursty = [arrival_gap(rng, 4.0, burstiness=0.25) for _ in range(20000)]
    assert statistics.mean(bursty) == pytest.approx(0.25, rel=0.05)
    assert statistics.stdev(bursty) == pytest.approx(0.5, rel=0.08)  # gamma k: sd = mean / sqrt(k)


def test_lengths_follow_the_plans_mean_p95_and_max():
    sampler = LengthSampler(TokenStats(input_mean=1200, input_p95=4000, output_mean=350, output_max=1024), 8192)
    rng = random.Random(2)
    draws = [sampler.draw(rng) for _ in range(20000)]
    prompts = sorted(d[0] for d in draws)
    answers = [d[1] for d in draws]
    assert statistics.mean(prompts) == pytest.approx(1200, rel=0.05)
    assert prompts[int(0.95 * len(prompts))] == pytest.approx(4000, rel=0.08)
    assert statistics.mean(answers) == pytest.approx(350, rel=0.03)
    assert max(answers) <= 1024 and all(d[2] == 1024 for d in draws)
    assert all(d[0] + d[2] <= 8192 for d in draws)


def test_constant_lengths_when_the_plan_gives_no_spread():
    sampler = LengthSampler(TokenStats(2000, 2000, 400, 400), 8192)
    assert {sampler.draw(random.Random(i)) for i in range(50)} == {(2000, 400, 400)}


def test_generator_sends_the_profiles_rate_and_a_spike_multiplies_it():
    plan = office_assistant()
    clock = FakeClock()
    targets = [Recorder(), Recorder()]
    generator = TrafficGenerator(
        plan.workloads, targets, 8192, time_scale=1.0, start_week_seconds=10 * 3600, seed=4, clock=clock
    )
    normal = run_for(generator, clock, 100)
    assert normal == pytest.approx(18 * 100, rel=0.08)
    generator.spike(3.0, 100)
    spiked = run_for(generator, clock, 100)
    assert spiked == pytest.approx(3 * 18 * 100, rel=0.08)
    after = run_for(generator, clock, 100)
    assert after == pytest.approx(18 * 100, rel=0.08)
    # Least-loaded dispatch splits it evenly.
    assert abs(len(targets[0].sent) - len(targets[1].sent)) <= 1


def test_interactive_and_deferrable_classes_are_both_sent():
    plan = office_assistant()
    night_batch = dataclasses.replace(
        plan.workloads[0], name="night-summaries", kind="deferrable", rps_by_hour=office_week(0.0, 6.0)
    )
    clock = FakeClock()
    target = Recorder()
    generator = TrafficGenerator(
        (plan.workloads[0], night_batch), [target], 8192, time_scale=1.0, start_week_seconds=2 * 3600, clock=clock
    )
    run_for(generator, clock, 60)
    kinds = [s[3] for s in target.sent]
    # At 02:00 the deferrable batch (6 rps) outweighs the interactive night rate (2 rps).
    assert kinds.count("deferrable") == pytest.approx(3 * kinds.count("interactive"), rel=0.25)
    assert generator.stats.sent_by_kind == {
        "interactive": kinds.count("interactive"),
        "deferrable": kinds.count("deferrable"),
    }


def test_down_replicas_get_nothing_and_an_all_down_fleet_refuses():
    plan = office_assistant()
    clock = FakeClock()
    up, down = Recorder(), Recorder(up=False)
    generator = TrafficGenerator(
        plan.workloads, [down, up], 8192, time_scale=1.0, start_week_seconds=10 * 3600, clock=clock
    )
    run_for(generator, clock, 10)
    assert down.sent == [] and len(up.sent) > 100
    up._up = False
    run_for(generator, clock, 10)
    assert generator.stats.refused > 100


def test_rate_rising_from_zero_is_noticed():
    plan = office_assistant()
    dawn = dataclasses.replace(plan.workloads[0], rps_by_hour=office_week(10.0, 0.0))
    clock = FakeClock()
    target = Recorder()
    generator = TrafficGenerator((dawn,), [target], 8192, time_scale=60.0, start_week_seconds=7 * 3600, clock=clock)
    run_for(generator, clock, 30)  # 07:00 -> 07:30 of profile: nothing due
    assert target.sent == []
    run_for(generator, clock, 90)  # through the ramp to the 10 rps plateau
    assert len(target.sent) > 300
