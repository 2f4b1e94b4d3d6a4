"""The issue's proof of the bounded queue: a minute at three times a replica's capacity, against `pass` at once.

One simulated replica runs at most 8 requests at a time (`max_num_seqs`), and the gateway in front lets 9 in
flight: one more than the replica runs, so that when a stream ends the next request is already inside the
replica and joins the very next engine step (with a cap of exactly 8 it arrives during that step and joins the
one after: one step lost per finished stream, 1 in 34 here, measured 3.9 % fewer streams than pass). Streams of 32 tokens take about
0.85 s, so the replica serves about 9 requests a second; both gateways are offered the same arrivals at three
times that, for 60 s, side by side on the same event loop (same load on the machine for both):

- `bounded_queue` (6 queued, a 0.75 s deadline, so the queue's allowance fits the plan's 1.5 s TTFT target):
  the queue, sampled from /admin/state every 50 ms and from its gauge's maximum, never passes 6; every refusal
  carries Retry-After and an error body; admitted streams meet the TTFT target at p95;
- `pass`: the replica queues everything itself, and the TTFT of what it serves grows without bound;
- the bounded queue's throughput (streams finished inside the minute) is within 5 % of `pass`'s: it sheds only
  what would have waited.
"""

from __future__ import annotations

import asyncio
import collections
import random
from dataclasses import replace

import pytest

from console.overflow.policy import Policy

from .conftest import completion, metric, metric_values, replica_requests, send, sim_fleet, state
from .conftest import gateway as gateway_in_front
from .plans import gateway_plan
from .test_queue import check_refusal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SECONDS = 60.0
SLOTS = 8  # the replica's max_num_seqs
CAP = SLOTS + 1  # the gateway's cap in flight per replica: one waits inside the replica, ready for a free slot
TOKENS = 32
TTFT_TARGET = 1.5  # the plan's TTFT p95 target (tests/gateway/plans.py)
# 6 queued drain in about 0.65 s at 9.4 a second, inside the 0.75 s deadline; a request let through may then wait
# inside the replica for a slot (up to the longest gap between two finishing streams, about 0.45 s measured):
# 1.2 s at most, inside the plan's 1.5 s target.
QUEUE, WAIT = 6, 0.75


def small_replica_plan():
    plan = gateway_plan(max_queue=QUEUE, max_wait_seconds=WAIT)
    return replace(plan, replica=replace(plan.replica, max_num_seqs=SLOTS))


async def offer(session, url: str, rate: float, seconds: float, seed: int) -> list:
    """Poisson arrivals of 32-token streams at `rate` for `seconds`; the answers, each with its times."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    tasks = []
    while loop.time() < end:
        tasks.append(asyncio.create_task(send(session, url, completion(max_tokens=TOKENS, stream=True))))
        await asyncio.sleep(rng.expovariate(rate))
    done, pending = await asyncio.wait(tasks, timeout=WAIT + 5.0)  # what the bounded queue still holds ends soon
    for task in pending:  # pass: the replica's own queue, hours long; the client gives up (and the gateway aborts)
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [task.result() for task in done]


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * 0.95 + 0.5) - 1)]


async def test_a_minute_at_three_times_capacity_holds_the_bound_and_the_target_at_passs_throughput(session):
    plan = small_replica_plan()
    async with sim_fleet(1, plan) as bounded_fleet, sim_fleet(1, plan) as pass_fleet:
        bounded_policy = Policy(mode="bounded_queue", max_queue=QUEUE, max_wait_seconds=WAIT)
        pass_policy = Policy(mode="pass")
        async with (
            gateway_in_front(bounded_fleet.urls, plan, policy=bounded_policy, planned_cap=CAP) as bounded,
            gateway_in_front(pass_fleet.urls, plan, policy=pass_policy, planned_cap=CAP) as passing,
        ):
            capacity = SLOTS / (0.025 * (TOKENS + 2))  # streams a second the replica can finish (about 9.4)
            samples: list[int] = []
            stop = asyncio.Event()

            async def sample():
                while not stop.is_set():
                    samples.append((await state(session, bounded))["queue"]["interactive"])
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            loop = asyncio.get_running_loop()
            start = loop.time()
            bounded_answers, pass_answers = await asyncio.gather(
                offer(session, bounded.url, 3 * capacity, SECONDS, seed=13),
                offer(session, passing.url, 3 * capacity, SECONDS, seed=13),
            )
            stop.set()
            await sampler
            window_end = start + SECONDS
            async with session.get(bounded.url + "/metrics") as response:
                gauges = metric_values(await response.text())
            seen = await state(session, bounded)
            served_by_replica = await replica_requests(session, bounded_fleet)

    # The bound: never more than 6 waiting, by the samples and by the gauge's own maximum.
    assert len(samples) > 0.5 * SECONDS / 0.05, len(samples)
    assert max(samples) <= QUEUE
    assert 0 < metric(gauges, "capcon_gateway_queue_length_max", queue="interactive") <= QUEUE

    # Overloaded for real: shed at once (429) or at the deadline (503), each refusal saying when to come back.
    statuses = collections.Counter(a.status for a in bounded_answers)
    assert statuses[429] > SECONDS * capacity, statuses  # about two of every three arrivals
    assert set(statuses) <= {200, 429, 503}, statuses
    for answer in bounded_answers:
        if answer.status != 200:
            check_refusal(answer)
    served = [a for a in bounded_answers if a.status == 200]
    assert all(a.done and a.chunks == TOKENS for a in served)
    assert served_by_replica == len(served) == seen["totals"]["local"]

    # Admitted streams meet the plan's TTFT target at p95; without the gateway's bound they do not.
    bounded_ttft = p95([a.ttft for a in served])
    pass_ttft = p95([a.ttft for a in pass_answers if a.status == 200 and a.ttft is not None])
    assert bounded_ttft <= TTFT_TARGET, (bounded_ttft, pass_ttft)
    assert pass_ttft > 3 * TTFT_TARGET, (bounded_ttft, pass_ttft)

    # Throughput: streams finished inside the minute, within 5 % of pass's.
    def finished_in_window(answers) -> int:
        return sum(1 for a in answers if a.status == 200 and a.done and a.ended_at <= window_end)

    bounded_done, pass_done = finished_in_window(bounded_answers), finished_in_window(pass_answers)
    assert pass_done > 0.7 * SECONDS * capacity, (bounded_done, pass_done)  # the replica ran near its capacity
    assert abs(bounded_done - pass_done) <= 0.05 * pass_done, (bounded_done, pass_done)
    print(
        f"\n60 s at 3x ({3 * capacity:.1f}/s offered, capacity {capacity:.1f}/s): bounded_queue "
        f"{bounded_done} done, {statuses[429]} x 429, {statuses[503]} x 503, queue max {max(samples)}, "
        f"TTFT p95 {bounded_ttft:.3f} s (p50 {sorted(a.ttft for a in served)[len(served) // 2]:.3f}, max "
        f"{max(a.ttft for a in served):.3f}), queue wait mean "
        f"{metric(gauges, 'capcon_gateway_queue_wait_seconds_sum', queue='interactive') / max(1, metric(gauges, 'capcon_gateway_queue_wait_seconds_count', queue='interactive')):.3f} s; pass {pass_done} done, TTFT p95 {pass_ttft:.1f} s"
    )
