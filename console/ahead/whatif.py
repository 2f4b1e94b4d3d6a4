"""What-if: each lever (replicas, an overflow mode) run on the simulator over the minutes ahead, beside doing nothing.

A scenario is a fleet of replicas of the plan's simulated replica (console.sim.engine, in simulated
time, run by console.ahead.whatif_engine) behind the gateway's own admission rules
(console.overflow.admission.admit: the bounded queue, hosted after N, defer), fed the arrivals
the forecast expects minute by minute, with prompt and answer lengths drawn around the fleet's
observed means. Every scenario sees the same random draws, so their differences are the lever's.

Two simplifications keep a scenario cheap (a 30-minute scenario at 10 replicas in well under 2 s
of CPU, benchmarks/bench_whatif.py):

- A slice of the fleet is simulated: `simulated` of the scenario's replicas, with their share of
  the arrivals and of the gateway's queue bounds (a queue of 32 in front of 10 replicas is one of
  3.2, rounded, in front of one). Routing is least-loaded, so the replicas see like loads; what a
  slice misses is some pooling between replicas, which makes its queue waits a little longer.
- Deferrable work told to come back (defer) is counted, not run later; hosted requests are counted
  and priced, their latency is the hosted endpoint's and is not in the fleet's percentiles.

The correction: the simulator steps at the plan's roofline; a real fleet is faster or slower. The
live TPOT p95 over the simulator's at the observed load is the factor every step's time is
multiplied by (the engine's `slowdown`), as NVIDIA Dynamo's planner corrects its interpolated
latencies by actual over expected. Pure: no clock, no I/O; the caller passes every figure.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from console.ahead.whatif_engine import StridingEngine
from console.metrics.window import histogram_quantile
from console.overflow.admission import Forward, Hosted, Load, ReplicaLoad, Wait, admit, cap_of
from console.overflow.policy import Mode, Policy
from console.sim.engine import SimRequest
from console.sim.metrics import ITL_BUCKETS
from console.sim.shape import ReplicaShape

MAX_SIMULATED_REQUESTS = 6_000  # arrivals a scenario's slice may hold: what bounds its CPU
DRAIN_SECONDS = 120.0  # simulated time after the last minute for the requests in flight to finish
CALIBRATION_SECONDS = 120.0
CORRECTION_BOUNDS = (0.25, 4.0)  # a factor outside these says the plan's model is wrong, not slow
CALIBRATION_STEPS = 6
CALIBRATION_TOLERANCE = 0.03  # on log TPOT: within 3 %
Z95 = 1.6448536269514722


# ---- the workload -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Lengths:
    """Prompt lengths lognormal with this mean and p95, answers gamma with this mean, capped at `output_max`
    (the simulator's length model, console.sim.traffic.LengthSampler, kept here so this room stays pure)."""

    input_mean: float
    input_p95: float
    output_mean: float
    output_max: int
    max_model_len: int

    def draw(self, rng: random.Random) -> tuple[int, int, int]:
        """(prompt tokens, tokens answered, max_tokens asked for)."""
        max_tokens = max(1, min(self.output_max, self.max_model_len - 1))
        ratio = self.input_p95 / self.input_mean if self.input_mean > 0 else 1.0
        sigma = 0.0
        if ratio > 1.0:
            disc = Z95 * Z95 - 2.0 * math.log(ratio)
            sigma = Z95 - math.sqrt(disc) if disc > 0 else Z95
        prompt = (
            self.input_mean if sigma == 0 else rng.lognormvariate(math.log(self.input_mean) - sigma * sigma / 2, sigma)
        )
        spread = max_tokens / self.output_mean - 1.0 if self.output_mean > 0 else 0.0
        if spread <= 0:
            answer = float(max_tokens)
        else:
            shape = max(2.0, (2.5 / spread) ** 2)
            answer = rng.gammavariate(shape, self.output_mean / shape)
        answer_tokens = min(max_tokens, max(1, round(answer)))
        prompt_tokens = max(1, min(round(prompt), self.max_model_len - max_tokens))
        return prompt_tokens, answer_tokens, max_tokens


@dataclass(frozen=True)
class Backlog:
    """What the fleet holds as the minutes start: per replica, requests decoding and requests waiting in vLLM's
    queue; and the gateway's queue (the fleet's). Carried in, a what-if in a spike starts where the fleet is."""

    running_per_replica: float = 0.0
    waiting_per_replica: float = 0.0
    gateway_queued: float = 0.0

    @property
    def empty(self) -> bool:
        return not (self.running_per_replica > 0 or self.waiting_per_replica > 0 or self.gateway_queued > 0)


@dataclass(frozen=True)
class Workload:
    rps_by_minute: tuple[float, ...]  # the fleet's arrivals for each minute ahead (the forecast)
    lengths: Lengths
    deferrable_share: float = 0.0  # of arrivals, from the plan's deferrable workloads at this hour
    backlog: Backlog = Backlog()

    @property
    def minutes(self) -> int:
        return len(self.rps_by_minute)


# ---- scenarios --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    replicas: int
    policy: Policy  # what the gateway admits by; mode "pass" with no cap: no gateway, every request forwarded
    planned_cap: int | None = None  # the gateway's in-flight cap per replica in the queueing modes
    note: str = ""
    # A scale-up: `serving_now` replicas serve from the start, the others join after `lead_seconds` (model load).
    serving_now: int | None = None
    lead_seconds: float = 0.0

    @property
    def joining(self) -> bool:
        return self.serving_now is not None and self.serving_now < self.replicas and self.lead_seconds > 0


@dataclass(frozen=True)
class Costs:
    gpus_per_replica: int
    hosted_price_per_million: float | None  # dollars per million hosted tokens (prompt and answer)


@dataclass(frozen=True)
class Result:
    name: str
    replicas: int
    mode: str
    simulated_replicas: int
    arrivals: int  # in the slice
    ttft_p95_seconds: float | None  # client-seen: gateway queue wait included
    tpot_p95_seconds: float | None
    refused_share: float
    hosted_share: float
    deferred_share: float
    hosted_cost: float | None  # dollars over the minutes, for the whole fleet; None: the plan names no price
    gpu_hours: float
    unfinished_share: float  # answered requests still without a first token at the end (their wait is a floor)
    note: str = ""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "replicas": self.replicas,
            "mode": self.mode,
            "ttft_p95_seconds": _rounded(self.ttft_p95_seconds),
            "tpot_p95_seconds": _rounded(self.tpot_p95_seconds),
            "refused_share": round(self.refused_share, 4),
            "hosted_share": round(self.hosted_share, 4),
            "deferred_share": round(self.deferred_share, 4),
            "hosted_cost": None if self.hosted_cost is None else round(self.hosted_cost, 2),
            "gpu_hours": round(self.gpu_hours, 3),
            "simulated_replicas": self.simulated_replicas,
            "simulated_arrivals": self.arrivals,
            "unfinished_share": round(self.unfinished_share, 4),
            "note": self.note or None,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def histogram_p95(values: Sequence[float], bounds: Sequence[float] = ITL_BUCKETS) -> float | None:
    """The p95 as the fleet's own figure is read: the values counted into vLLM's TPOT buckets, then Prometheus'
    histogram_quantile (linear inside the bucket). Set against an observed p95 it compares like with like: a
    TPOT of 134 ms read through the 100-150 ms bucket says 147.5 ms, and the gap is the buckets', not the fleet's."""
    if not values:
        return None
    edges = [*bounds, math.inf]
    counts = [0] * len(edges)
    for value in values:
        counts[next(i for i, edge in enumerate(edges) if value <= edge)] += 1
    cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
    return histogram_quantile(0.95, edges, cumulative)


def slice_size(replicas: int, workload: Workload) -> int:
    """How many of `replicas` to simulate: all while their arrivals fit MAX_SIMULATED_REQUESTS, else fewer (at least one)."""
    per_replica = sum(workload.rps_by_minute) * 60.0 / max(replicas, 1)
    if per_replica <= 0:
        return max(1, min(replicas, 2))
    return max(1, min(replicas, int(MAX_SIMULATED_REQUESTS // per_replica)))


def _scaled(value: int, share: float, floor: int) -> int:
    return max(floor, math.floor(value * share + 0.5))


def run_scenario(
    shape: ReplicaShape,
    scenario: Scenario,
    workload: Workload,
    costs: Costs,
    slowdown: float = 1.0,
    seed: int = 0,
) -> Result:
    """`scenario` over the workload's minutes on a slice of its replicas (module docstring)."""
    replicas = scenario.replicas
    simulated = slice_size(replicas, workload)
    share = simulated / replicas
    policy = scenario.policy
    sliced = replace(
        policy,
        max_queue=_scaled(policy.max_queue, share, 1),
        hosted_after_queue=_scaled(policy.hosted_after_queue, share, 0),
    )
    # A scale-up's new replicas join after the lead time. Simulated whole, they are held out of routing until then;
    # in a slice (every simulated replica alike) the slice carries the smaller fleet's share of arrivals until then.
    joins = [0.0] * simulated
    share_before = share
    if scenario.joining:
        assert scenario.serving_now is not None
        if simulated == replicas:
            joins[scenario.serving_now :] = [scenario.lead_seconds] * (replicas - scenario.serving_now)
        else:
            share_before = simulated / scenario.serving_now
    run = _FleetRun(shape, simulated, sliced, scenario.planned_cap, slowdown, joins)
    run.carry(workload.backlog, workload.lengths, share_before, random.Random(seed + 1))
    rng = random.Random(seed)
    end = workload.minutes * 60.0
    until = scenario.lead_seconds if scenario.joining else 0.0
    for at, lengths, deferrable in _arrivals(workload, share, rng, share_before, until):
        run.arrive(at, lengths, deferrable)
    run.finish(end, end + DRAIN_SECONDS)
    arrivals = run.arrived or 1
    hosted_tokens = run.hosted_tokens / share
    price = costs.hosted_price_per_million
    return Result(
        name=scenario.name,
        replicas=replicas,
        mode=policy.mode,
        simulated_replicas=simulated,
        arrivals=run.arrived,
        ttft_p95_seconds=percentile(run.ttfts, 0.95),
        tpot_p95_seconds=percentile(run.tpots, 0.95),
        refused_share=run.refused / arrivals,
        hosted_share=run.hosted / arrivals,
        deferred_share=run.deferred / arrivals,
        hosted_cost=None if price is None else hosted_tokens * price / 1e6,
        gpu_hours=replicas * costs.gpus_per_replica * workload.minutes / 60.0,
        unfinished_share=run.unfinished / arrivals,
        note=scenario.note,
    )


def _arrivals(
    workload: Workload, share: float, rng: random.Random, share_before: float | None = None, until: float = 0.0
) -> Iterator[tuple[float, tuple[int, int, int], bool]]:
    """(time, lengths, deferrable) for the slice: Poisson at each minute's rate times `share` (`share_before` up
    to `until`, a scale-up's join: the piece of a minute on each side draws at its own rate)."""
    at = 0.0
    pieces = []
    for minute, rps in enumerate(workload.rps_by_minute):
        start, stop = minute * 60.0, (minute + 1) * 60.0
        if share_before is not None and start < until < stop:
            pieces += [(rps, share_before, start, until), (rps, share, until, stop)]
        else:
            pieces.append((rps, share_before if share_before is not None and stop <= until else share, start, stop))
    for rps, fraction, start, stop in pieces:
        rate = max(rps, 0.0) * fraction
        at = max(at, start)
        if rate <= 0:
            continue
        while True:
            at += rng.expovariate(rate)
            if at >= stop:
                at = stop  # memoryless: the next piece draws afresh from its start
                break
            deferrable = workload.deferrable_share > 0 and rng.random() < workload.deferrable_share
            yield at, workload.lengths.draw(rng), deferrable


@dataclass(eq=False)
class _Replica:
    name: str
    engine: StridingEngine
    in_flight: int = 0


class _FleetRun:
    """A gateway (the overflow admission rules) in front of simulated replicas, in simulated time.

    Replicas are advanced lazily: only to the next moment something can change what the gateway sees
    (an arrival, a queued request's deadline, the earliest moment a replica could finish a request).
    """

    def __init__(
        self,
        shape: ReplicaShape,
        replicas: int,
        policy: Policy,
        planned_cap: int | None,
        slowdown: float,
        joins: Sequence[float] | None = None,
    ) -> None:
        self.policy = policy
        self.planned_cap = planned_cap
        self.all_replicas = [_Replica(f"r{i}", StridingEngine(shape)) for i in range(replicas)]
        # The replicas serving; the others join the gateway's routing at their moment (a scale-up's lead time).
        times = list(joins) if joins is not None else [0.0] * replicas
        self.replicas = [r for r, at in zip(self.all_replicas, times, strict=True) if at <= 0]
        self.joining = sorted(
            ((at, i) for i, at in enumerate(times) if at > 0), key=lambda pair: pair[0], reverse=True
        )  # the next to join last: popped
        for replica in self.all_replicas:
            replica.engine.slowdown = slowdown
        self.by_name = {r.name: r for r in self.all_replicas}
        self.min_step = self.all_replicas[0].engine.decode_step_seconds(0)
        self.queue: deque[tuple[float, float | None, tuple[int, int, int]]] = deque()  # arrival, deadline, lengths
        self.arrived = self.refused = self.hosted = self.deferred = self.unfinished = 0
        self.hosted_tokens = 0
        self.ttfts: list[float] = []
        self.tpots: list[float] = []
        self.count = 0
        self.bounds: list[float] = [math.inf] * len(self.replicas)

    # ---- what the fleet holds at the start -----------------------------------------------------

    def carry(self, backlog: Backlog, lengths: Lengths, gateway_share: float, rng: random.Random) -> None:
        """The backlog at time 0: on each replica serving, its requests decoding (part of their answer already
        out; they weigh on every step but are not judged, their start being before the minutes) and its waiting
        ones; and the slice's share of the gateway's queue. The waiting ones count as arrivals at 0, their wait
        from 0 (a floor: they had waited before). Its own random draws: the arrivals' stay the same."""
        for index, replica in enumerate(self.replicas):
            for _ in range(_count(backlog.running_per_replica, rng)):
                prompt, answer, max_tokens = lengths.draw(rng)
                self.count += 1
                request = SimRequest(f"c{self.count}", prompt, answer, max_tokens, 0.0, tag=None)
                request.generated = rng.randint(1, max(1, answer - 1))
                replica.engine.resume(request)
                replica.in_flight += 1
            for _ in range(_count(backlog.waiting_per_replica, rng)):
                self.arrived += 1
                self._send(replica, 0.0, 0.0, lengths.draw(rng))
            self.bounds[index] = self._bound(replica.engine)
        deadline = self.policy.max_wait_seconds if self.policy.mode != "pass" else None
        for _ in range(_count(backlog.gateway_queued * gateway_share, rng)):
            self.arrived += 1
            self.queue.append((0.0, deadline, lengths.draw(rng)))

    def _join(self, now: float) -> None:
        """The replicas whose lead time is over by `now` start taking requests (and the queue drains onto them)."""
        while self.joining and self.joining[-1][0] <= now:
            at, index = self.joining.pop()
            replica = self.all_replicas[index]
            replica.engine.clock = max(replica.engine.clock, at)
            self.replicas.append(replica)
            self.bounds.append(math.inf)
            self._release(at)

    # ---- arrivals ----------------------------------------------------------------------------

    def arrive(self, at: float, lengths: tuple[int, int, int], deferrable: bool) -> None:
        self.settle(at)
        self._join(at)
        self.arrived += 1
        self._sync(at)
        decision = admit(self.policy, self._load(), "deferrable" if deferrable else "interactive", at, self.planned_cap)
        if isinstance(decision, Forward):
            self._send(self.by_name[decision.replica], at, at, lengths)
        elif isinstance(decision, Wait):
            if decision.queue == "batch":
                self.deferred += 1  # held until off-peak: not run within these minutes
            else:
                self.queue.append((at, decision.deadline, lengths))
        elif isinstance(decision, Hosted):
            self.hosted += 1
            self.hosted_tokens += lengths[0] + lengths[1]
        elif decision.code in ("deferred", "batch_queue_full"):
            self.deferred += 1
        else:
            self.refused += 1

    def _load(self) -> Load:
        return Load(tuple(ReplicaLoad(r.name, r.in_flight) for r in self.replicas), queued=len(self.queue))

    def _send(self, replica: _Replica, arrival: float, now: float, lengths: tuple[int, int, int]) -> None:
        prompt, answer, max_tokens = lengths
        engine = replica.engine
        if engine.validate(prompt, max_tokens) is not None:
            self.refused += 1  # vLLM would answer 400: counted with the refused
            return
        self.count += 1
        request = SimRequest(f"w{self.count}", prompt, answer, max_tokens, max(now, engine.clock), tag=arrival)
        engine.submit(request)
        replica.in_flight += 1
        index = self.replicas.index(replica)
        self.bounds[index] = min(self.bounds[index], request.arrival + answer * self.min_step)

    # ---- time --------------------------------------------------------------------------------

    def settle(self, until: float) -> None:
        """Everything that happens before `until` with requests queued: finishes release them, deadlines refuse them."""
        while self.queue:
            deadline = self.queue[0][1]
            soonest = min(self.bounds)
            joins = self.joining[-1][0] if self.joining else math.inf
            moment = min(deadline if deadline is not None else math.inf, soonest, joins)
            if moment >= until:
                return
            if joins <= moment:
                self._join(joins)
            elif soonest <= moment:
                index = self.bounds.index(soonest)
                self._advance(index, soonest)
                self._release(soonest)
            else:
                self.queue.popleft()
                self.refused += 1  # waited its bound: 503

    def _sync(self, now: float) -> None:
        """Replicas that may have finished something by `now` are brought to it."""
        for index, bound in enumerate(self.bounds):
            if bound <= now:
                self._advance(index, now)

    def _advance(self, index: int, now: float) -> None:
        replica = self.replicas[index]
        engine = replica.engine
        for request in engine.advance(now):
            if request.finished:
                replica.in_flight -= 1
                self._served(request)
        self.bounds[index] = self._bound(engine)

    def _bound(self, engine: StridingEngine) -> float:
        """The earliest moment this replica could finish a request: no step is shorter than `min_step`,
        and a request still waiting needs a step before its first token."""
        following = engine.next_event_time()
        if following is None:
            return math.inf
        start = following if engine._pending is not None else following + self.min_step
        if not engine.running:
            return start
        left = min(r.output_tokens - r.generated for r in engine.running)
        return start + max(0, left - 1) * self.min_step

    def _release(self, now: float) -> None:
        while self.queue:
            cap = cap_of(self.policy, self.planned_cap)
            free = [r for r in self.replicas if cap is None or r.in_flight < cap]
            if not free:
                return
            arrival, deadline, lengths = self.queue.popleft()
            if deadline is not None and deadline < now:
                self.refused += 1
                continue
            self._send(min(free, key=lambda r: r.in_flight), arrival, now, lengths)

    def _served(self, request: SimRequest) -> None:
        if request.tag is None:
            return  # carried in mid-answer: it took its share of the steps, its latencies began before the minutes
        arrival = float(request.tag)  # type: ignore[arg-type]  # the client's arrival at the gateway
        if request.first_token is not None:
            self.ttfts.append(request.first_token - arrival)
        if request.finished_reason == "error":
            self.refused += 1
        elif request.tpot is not None and request.generated > 1:
            self.tpots.append(request.tpot)

    def finish(self, end: float, drain_until: float) -> None:
        """No more arrivals after `end`: the queue and the replicas drain until `drain_until`; what is left
        is counted unfinished, its wait so far taken as its TTFT (a floor)."""
        self.settle(drain_until)
        self._join(drain_until)
        for index in range(len(self.replicas)):
            self._advance(index, drain_until)
        for replica in self.replicas:
            for request in [*replica.engine.running, *replica.engine.waiting]:
                if request.tag is None:
                    continue  # carried in mid-answer: not judged
                if request.first_token is None:
                    self.unfinished += 1
                    self.ttfts.append(drain_until - float(request.tag))  # type: ignore[arg-type]
                else:
                    self.ttfts.append(request.first_token - float(request.tag))  # type: ignore[arg-type]
        for arrival, _deadline, _lengths in self.queue:
            self.unfinished += 1
            self.ttfts.append(drain_until - arrival)


def _count(mean: float, rng: random.Random) -> int:
    """A whole count whose mean is `mean`: its floor, plus one with the chance of its fraction."""
    if not mean > 0 or not math.isfinite(mean):
        return 0
    whole = math.floor(mean)
    return whole + (1 if rng.random() < mean - whole else 0)


# ---- the correction -------------------------------------------------------------------------


@dataclass(frozen=True)
class Correction:
    factor: float  # every simulated step's time is multiplied by this
    observed_tpot_p95_seconds: float | None
    simulated_tpot_p95_seconds: float | None
    at_rps_per_replica: float | None
    reason: str  # in words: how it was found, or why there is none

    def to_json(self) -> dict:
        return {
            "factor": round(self.factor, 4),
            "observed_tpot_p95_seconds": _rounded(self.observed_tpot_p95_seconds),
            "simulated_tpot_p95_seconds": _rounded(self.simulated_tpot_p95_seconds),
            "at_rps_per_replica": _rounded(self.at_rps_per_replica),
            "reason": self.reason,
        }


def no_correction(reason: str) -> Correction:
    return Correction(1.0, None, None, None, reason)


def calibrate(
    shape: ReplicaShape,
    lengths: Lengths,
    rps_per_replica: float | None,
    observed_tpot_p95: float | None,
    seed: int = 0,
) -> Correction:
    """The step-time factor at which the simulated TPOT p95 at the observed load per replica is the observed one.

    Both p95s are read through vLLM's TPOT buckets (histogram_p95): the observed one is a histogram figure, and
    set against the simulator's exact one the buckets alone would look like a slower fleet (about 10 % in the
    100-150 ms bucket). A slower step holds more requests at once, which slows each step again, so the factor is not simply
    observed over simulated: it is found by secant steps on log TPOT against log factor (a few short runs).
    Outside CORRECTION_BOUNDS it is held at the bound, and said.
    """
    if observed_tpot_p95 is None or not math.isfinite(observed_tpot_p95) or observed_tpot_p95 <= 0:
        return no_correction("none: the fleet's TPOT p95 is unknown (no requests in the window)")
    if rps_per_replica is None or not math.isfinite(rps_per_replica) or rps_per_replica <= 0:
        return no_correction("none: the fleet's request rate is unknown or zero")
    workload = Workload((rps_per_replica,) * max(1, math.ceil(CALIBRATION_SECONDS / 60.0)), lengths)
    low, high = CORRECTION_BOUNDS

    def simulated_at(factor: float) -> float | None:
        run = _FleetRun(shape, 1, Policy(mode="pass"), None, factor)
        rng = random.Random(seed)
        end = workload.minutes * 60.0
        for at, drawn, deferrable in _arrivals(workload, 1.0, rng):
            run.arrive(at, drawn, deferrable)
        run.finish(end, end + DRAIN_SECONDS)
        return histogram_p95(run.tpots)

    plain = simulated_at(1.0)
    if plain is None or plain <= 0:
        return no_correction("none: the simulated replica answered no request of more than one token")
    target = math.log(observed_tpot_p95)
    x, y = 0.0, math.log(plain)  # log factor, log TPOT
    if abs(y - target) < CALIBRATION_TOLERANCE:
        return Correction(1.0, observed_tpot_p95, plain, rps_per_replica, _found(rps_per_replica))
    # The bracket: the largest log factor known to fall short of the target, the smallest known to pass it.
    # The buckets make TPOT p95 a staircase and saturation makes it steep, so a secant step that leaves the
    # bracket is replaced by its middle.
    below, above = (x, None) if y < target else (None, x)
    factor = min(max(observed_tpot_p95 / plain, low), high)
    for _ in range(CALIBRATION_STEPS):
        tpot = simulated_at(factor)
        if tpot is None or tpot <= 0:
            break
        x1, y1 = math.log(factor), math.log(tpot)
        if abs(y1 - target) < CALIBRATION_TOLERANCE:
            break
        if y1 < target:
            below = x1 if below is None else max(below, x1)
            if factor == high:
                break  # even the bound falls short: held there
        else:
            above = x1 if above is None else min(above, x1)
            if factor == low:
                break
        slope = (y1 - y) / (x1 - x) if x1 != x else 1.0
        slope = slope if slope > 0.2 else 1.0  # TPOT rises with the factor; a flat estimate would overshoot
        step = x1 + (target - y1) / slope
        if below is not None and above is not None and not below < step < above:
            step = (below + above) / 2
        x, y = x1, y1
        factor = min(max(math.exp(step), low), high)
    held = " (held at its bound: the plan's model and the fleet disagree more than a correction should fix)"
    reason = _found(rps_per_replica) + (held if factor in (low, high) else "")
    return Correction(factor, observed_tpot_p95, plain, rps_per_replica, reason)


def _found(rps_per_replica: float) -> str:
    return (
        "the step-time factor at which the simulator's TPOT p95 (read through vLLM's buckets) meets the live one"
        f" at {rps_per_replica:.2f} rps per replica"
    )


# ---- the scenario set ----------------------------------------------------------------------


@dataclass(frozen=True)
class Lever:
    """One lever as asked for: a replica count (absolute or relative) or an overflow mode with its settings."""

    replicas: str | None = None  # "N", "+N" or "-N"
    mode: Mode | None = None
    max_queue: int | None = None
    max_wait_seconds: float | None = None
    hosted_after_queue: int | None = None


DEFAULT_LEVERS = (
    Lever(replicas="+1"),
    Lever(mode="bounded_queue", max_queue=32),
    Lever(mode="hosted", hosted_after_queue=16),
    Lever(mode="defer"),
)


def replicas_for(asked: str, current: int) -> int:
    """'+1', '-2' or '4' against `current`; ValueError when it leaves no replica or is not a count."""
    text = asked.strip()
    try:
        count = current + int(text) if text[:1] in "+-" else int(text)
    except ValueError:
        raise ValueError(f"{asked!r}: expected a count of replicas such as 4, +1 or -1") from None
    if count < 1:
        raise ValueError(f"{asked!r}: leaves {count} replicas from {current}; expected at least 1")
    return count


def scenarios(
    current: int,
    now_policy: Policy,
    levers: Sequence[Lever],
    planned_cap: int | None,
    hosted_allowed: bool,
    mode_base: Policy | None = None,
    lead_seconds: float = 0.0,
) -> list[Scenario]:
    """ "now" first (nothing changed), then one scenario per lever; ValueError for a lever that cannot be.

    A mode lever changes the gateway's policy now; with no gateway now, `mode_base` (the plan's overflow
    section), else the gateway's defaults. Replicas added serve after `lead_seconds` (the model's load); replicas
    taken away stop at once."""
    result = [Scenario("now", current, now_policy, planned_cap if now_policy.mode != "pass" else None)]
    for lever in levers:
        if lever.replicas is not None:
            count = replicas_for(lever.replicas, current)
            name = (
                f"{count} replicas"
                if lever.replicas[:1] not in "+-"
                else f"{lever.replicas} replica" + ("s" if abs(count - current) != 1 else "")
            )
            scenario = replace(result[0], name=name, replicas=count)
            if count > current and lead_seconds > 0:
                scenario = replace(
                    scenario,
                    serving_now=current,
                    lead_seconds=lead_seconds,
                    note=f"the {'new replica serves' if count - current == 1 else 'new replicas serve'} "
                    f"after {_minutes(lead_seconds)} (the lead time)",
                )
            result.append(scenario)
            continue
        if lever.mode is None:
            continue
        base = now_policy if now_policy.mode != "pass" else (mode_base or Policy())
        changes: dict = {"mode": lever.mode, "hosted_allowed": True}
        if lever.max_queue is not None:
            changes["max_queue"] = lever.max_queue
        if lever.max_wait_seconds is not None:
            changes["max_wait_seconds"] = lever.max_wait_seconds
        if lever.hosted_after_queue is not None:
            changes["hosted_after_queue"] = lever.hosted_after_queue
        policy = replace(base, **changes)
        note = ""
        if lever.mode == "hosted" and not hosted_allowed:
            note = "the plan's data.prompts_may_leave is false: a switch to hosted would be refused"
        result.append(Scenario(_mode_name(policy), current, policy, planned_cap, note))
    return result


def _minutes(seconds: float) -> str:
    minutes = seconds / 60.0
    return f"{minutes:.0f} min" if minutes >= 1 and minutes == round(minutes) else f"{minutes:.1f} min"


def _mode_name(policy: Policy) -> str:
    if policy.mode == "bounded_queue":
        return f"bounded queue {policy.max_queue}"
    if policy.mode == "hosted":
        return f"hosted after {policy.hosted_after_queue}"
    if policy.mode == "defer":
        return "defer batch"
    return "pass"


def run_all(
    shape: ReplicaShape,
    chosen: Sequence[Scenario],
    workload: Workload,
    costs: Costs,
    correction: Correction,
    seed: int = 0,
) -> list[Result]:
    return [run_scenario(shape, s, workload, costs, correction.factor, seed) for s in chosen]
