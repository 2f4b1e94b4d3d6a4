"""Load that follows a plan: the week's profile with time compressed, arrivals, lengths, classes, spikes.

The pure parts (profile rate, arrival gaps, length draws) take a random
generator and times as arguments. `TrafficGenerator` is the async loop that
sends the requests, either straight into the replicas' engines (in-process:
cheap, what the demo uses) or as real OpenAI-style HTTP requests.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from console.plan.model import DAYS, TokenStats, Workload

if TYPE_CHECKING:
    import aiohttp

SECONDS_PER_DAY = 86400.0
SECONDS_PER_WEEK = 7 * SECONDS_PER_DAY
Z95 = 1.6448536269514722
REDRAW_SECONDS = 1.0
# Arrivals one call of `run_due` sends at most. Past it the rest of what is due is dropped (and
# counted): a generator asked for more than a simulator can serve, or woken late by a busy
# loop, then does bounded work per tick instead of holding the event loop (and Ctrl+C) for ever.
MAX_ARRIVALS_PER_CALL = 500
# Requests one HTTP target keeps in flight; past it sends are refused (counted), not queued as tasks.
MAX_HTTP_IN_FLIGHT = 1024


# ---- the profile ---------------------------------------------------------------------------


def profile_rate(workload: Workload, week_seconds: float) -> float:
    """The workload's rps at a moment of the week (Monday 00:00 = 0), linear between hour marks.

    Each hour's figure is placed at the middle of its hour, so a flat hour reads flat.
    """
    hours = (week_seconds % SECONDS_PER_WEEK) / 3600.0 - 0.5
    index = math.floor(hours)
    share = hours - index
    table = workload.rps_by_hour

    def at(i: int) -> float:
        i %= 7 * 24
        return table[i // 24][i % 24]

    return at(index) * (1 - share) + at(index + 1) * share


def week_label(week_seconds: float) -> str:
    """'mon 08:30' for a moment of the week."""
    seconds = week_seconds % SECONDS_PER_WEEK
    day = int(seconds // SECONDS_PER_DAY)
    minute = int(seconds % SECONDS_PER_DAY // 60)
    return f"{DAYS[day]} {minute // 60:02d}:{minute % 60:02d}"


# ---- arrivals and lengths ------------------------------------------------------------------


def arrival_gap(rng: random.Random, rate: float, burstiness: float = 1.0) -> float:
    """Seconds to the next arrival: Gamma(k, 1/(rate k)) as vLLM's benchmark draws them (k = 1: Poisson)."""
    if rate <= 0:
        return math.inf
    return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


@dataclass(frozen=True)
class LengthSampler:
    """Input lengths lognormal with the plan's mean and p95; outputs gamma with the plan's mean, capped at max."""

    tokens: TokenStats
    max_model_len: int

    @property
    def _input_sigma(self) -> float:
        # mean = m exp(s^2/2) and p95 = m exp(1.645 s), so p95/mean = exp(1.645 s - s^2/2): take the smaller root.
        ratio = self.tokens.input_p95 / self.tokens.input_mean
        if ratio <= 1.0:
            return 0.0
        disc = Z95 * Z95 - 2.0 * math.log(ratio)
        return Z95 - math.sqrt(disc) if disc > 0 else Z95

    @property
    def _output_shape(self) -> float | None:
        spread = self.tokens.output_max / self.tokens.output_mean - 1.0
        if spread <= 0:
            return None  # every answer has the same length
        # Keep mean + 2.5 sd under the cap so the cap rarely cuts the mean down.
        return max(2.0, (2.5 / spread) ** 2)

    def draw(self, rng: random.Random) -> tuple[int, int, int]:
        """(prompt tokens, tokens the model will answer, max_tokens the client asks for)."""
        t = self.tokens
        max_tokens = max(1, int(t.output_max))
        sigma = self._input_sigma
        prompt = t.input_mean if sigma == 0 else rng.lognormvariate(math.log(t.input_mean) - sigma * sigma / 2, sigma)
        shape = self._output_shape
        answer = t.output_mean if shape is None else rng.gammavariate(shape, t.output_mean / shape)
        answer = min(max_tokens, max(1, round(answer)))
        prompt = max(1, min(round(prompt), self.max_model_len - max_tokens))
        return prompt, answer, max_tokens


# ---- the generator -------------------------------------------------------------------------


@dataclass
class TrafficStats:
    sent: int = 0
    sent_by_kind: dict[str, int] = field(default_factory=dict)
    refused: int = 0  # no replica up, or the replica said no
    failed: int = 0  # HTTP mode: connection errors and 5xx
    dropped: int = 0  # due but not sent: over MAX_ARRIVALS_PER_CALL in one call (about; never sent)


class Target:
    """Where the generator sends one request. Implementations: in-process engine, HTTP client."""

    def load(self) -> float:  # requests in flight, for least-loaded dispatch
        return 0.0

    def up(self) -> bool:
        return True

    def send(self, prompt: int, answer: int, max_tokens: int, kind: str) -> bool:
        raise NotImplementedError


@dataclass
class Spike:
    factor: float
    until: float  # wall (loop) time


class TrafficGenerator:
    """Sends the plan's traffic to `targets`, least-loaded first.

    `time_scale` is profile seconds per wall second (288: a day in five minutes);
    `rps_scale` multiplies every rate (a fleet smaller than the plan's gets a share);
    `burstiness` overrides the plan's gamma shape of arrival gaps (1: Poisson).
    """

    def __init__(
        self,
        workloads: Sequence[Workload],
        targets: Sequence[Target],
        max_model_len: int,
        time_scale: float = 288.0,
        rps_scale: float = 1.0,
        start_week_seconds: float = 7 * 3600.0,  # Monday 07:00, just before the morning ramp
        burstiness: float | None = None,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        tick_seconds: float = 0.05,
    ):
        self.workloads = list(workloads)
        self.targets = list(targets)
        self.samplers = [LengthSampler(w.tokens, max_model_len) for w in self.workloads]
        self.time_scale = time_scale
        self.rps_scale = rps_scale
        self.start_week_seconds = start_week_seconds
        # Gamma shape of the gaps per workload: the plan's, unless the caller overrides it.
        self.burstiness = [burstiness or w.burstiness for w in self.workloads]
        self.rng = random.Random(seed)
        self.tick_seconds = tick_seconds
        self._clock = clock
        self._started: float | None = None
        self._next: list[float] = []
        self._fires: list[bool] = []
        self.spike_state: Spike | None = None
        self.paused = False
        self.stats = TrafficStats()
        self._round_robin = 0

    def now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    # ---- controls ----

    def spike(self, factor: float, seconds: float) -> None:
        """Multiply every rate by `factor` for `seconds` of wall time."""
        if factor <= 0 or seconds <= 0:
            raise ValueError("a spike needs a positive factor and duration")
        self.spike_state = Spike(factor, self.now() + seconds)

    def week_seconds(self, at: float | None = None) -> float:
        at = self.now() if at is None else at
        started = self._started if self._started is not None else at
        return self.start_week_seconds + (at - started) * self.time_scale

    def spike_factor(self, at: float) -> float:
        spike = self.spike_state
        return spike.factor if spike is not None and at < spike.until else 1.0

    def rate(self, workload_index: int, at: float | None = None) -> float:
        """Requests per second this generator sends for one workload at wall time `at`."""
        at = self.now() if at is None else at
        base = profile_rate(self.workloads[workload_index], self.week_seconds(at))
        return base * self.rps_scale * self.spike_factor(at)

    def total_rate(self, at: float | None = None) -> float:
        return sum(self.rate(i, at) for i in range(len(self.workloads)))

    # ---- the loop ----

    def _pick(self) -> Target | None:
        """The least-loaded live target, ties taken in turn; one pass over the targets."""
        lightest = math.inf
        candidates: list[Target] = []
        for target in self.targets:
            if not target.up():
                continue
            load = target.load()
            if load < lightest:
                lightest, candidates = load, [target]
            elif load == lightest:
                candidates.append(target)
        if not candidates:
            return None
        self._round_robin += 1
        return candidates[self._round_robin % len(candidates)]

    def _fire(self, index: int) -> None:
        workload = self.workloads[index]
        prompt, answer, max_tokens = self.samplers[index].draw(self.rng)
        target = self._pick()
        self.stats.sent += 1
        self.stats.sent_by_kind[workload.kind] = self.stats.sent_by_kind.get(workload.kind, 0) + 1
        if target is None or not target.send(prompt, answer, max_tokens, workload.kind):
            self.stats.refused += 1

    def run_due(self, now: float) -> int:
        """Send every arrival due by `now`; returns how many were sent.

        Each gap is drawn at the rate of the moment it starts. A gap longer than
        `REDRAW_SECONDS` is cut there and drawn again (exact for Poisson arrivals,
        which have no memory), so a rate rising from 0 at dawn is noticed.
        """
        if self._started is None:
            self._started = now
            self._next = [now] * len(self.workloads)
            self._fires = [False] * len(self.workloads)
        fired = 0
        for i in range(len(self.workloads)):
            while self._next[i] <= now:
                if fired >= MAX_ARRIVALS_PER_CALL:
                    # The rest of what is due is dropped: counted at the rate of now, sent never.
                    behind = now - self._next[i]
                    self.stats.dropped += int(min(self.rate(i, now) * behind, 1e15))
                    self._next[i], self._fires[i] = now + self.tick_seconds, False
                    break
                at = self._next[i]
                if self._fires[i] and not self.paused:
                    self._fire(i)
                    fired += 1
                gap = arrival_gap(self.rng, self.rate(i, at), self.burstiness[i])
                self._fires[i] = gap <= REDRAW_SECONDS
                self._next[i] = at + min(gap, REDRAW_SECONDS)
        return fired

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            self.run_due(self.now())
            await asyncio.sleep(self.tick_seconds)


class HttpTarget(Target):
    """Sends each request as a real `/v1/completions` call (prompt as token ids, not streamed)."""

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        on_done: Callable[[bool], None] | None = None,
        model: str = "",
    ):
        self.url = url
        self.session = session
        self.model = model  # "" for a replica (it serves one model); a gateway checks the name
        self.in_flight = 0
        self.on_done = on_done
        self.tasks: set[asyncio.Task] = set()
        self.healthy = True

    def up(self) -> bool:
        return self.healthy

    def load(self) -> float:
        return self.in_flight

    def send(self, prompt: int, answer: int, max_tokens: int, kind: str) -> bool:
        if len(self.tasks) >= MAX_HTTP_IN_FLIGHT:
            return False
        body = {"model": self.model, "prompt": [1] * prompt, "max_tokens": max_tokens, "user": kind}
        task = asyncio.create_task(self._post(body, kind))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    async def _post(self, body: dict, kind: str = "interactive") -> None:
        self.in_flight += 1
        ok = False
        # A gateway in front tells deferrable work by this header (console/overflow/clients.py).
        headers = {"x-capcon-class": "deferrable"} if kind == "deferrable" else None
        try:
            async with self.session.post(f"{self.url}/v1/completions", json=body, headers=headers) as response:
                await response.read()
                ok = response.status == 200
            self.healthy = True
        except (TimeoutError, OSError):
            self.healthy = False  # refused: the replica is down; try again after a pause
            await asyncio.sleep(1.0)
            self.healthy = True
        except Exception:  # noqa: BLE001 - a malformed answer is the replica's failure, not ours
            ok = False
        finally:
            self.in_flight -= 1
            if self.on_done:
                self.on_done(ok)

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
