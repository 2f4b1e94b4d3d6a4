"""One simulated vLLM replica in simulated time: it schedules like vLLM V1 and steps at the roofline.

Pure: no clock is read. The caller submits requests stamped with their arrival
time and calls `advance(now)`; every engine step whose end is at or before `now`
is executed. A step's batch is fixed when it starts (requests arriving during a
step join the next one), and its tokens appear when it ends.

Scheduling follows vLLM V1 (`vllm/v1/core/sched/scheduler.py`):
- running requests first, in order: a decoding request takes one token, a
  prefilling one takes the rest of its prompt up to the step's token budget
  (chunked prefill);
- when a running request cannot get the KV blocks it needs, the last running
  request is preempted by recompute: its blocks are freed, it goes back to the
  head of the queue, and its prefill (prompt plus tokens generated so far) is
  paid again;
- waiting requests are admitted first come, first served while the batch has
  fewer than `max_num_seqs` requests, budget is left and blocks are free, and
  only in a step that preempted nothing.

Step time (docs/method.md, 'Decode and prefill roofline', at the plan's efficiencies):
  overhead
  + max(weight bytes per GPU / (bandwidth x bandwidth efficiency),
        tokens scheduled x 2 x parameters / TP / (FLOP/s at the compute precision x compute efficiency))
  + KV bytes read per GPU / (bandwidth x bandwidth efficiency)
The linear layers read each weight once per step and multiply it by every token scheduled, prefill and decode
alike: a small batch waits on the weights, a large one (or a prefill chunk) on the tensor cores. Leaving decode
tokens out put a 70B replica's step at 1,024 running requests at the weights' 15 ms where the GEMMs take 64 ms.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from console.sim.kv import BlockPool
from console.sim.shape import ReplicaShape, blocks_for

# Host-side scheduling and sampling per step; small next to a 70B decode step.
DEFAULT_STEP_OVERHEAD_SECONDS = 0.001


@dataclass(eq=False)
class SimRequest:
    request_id: str
    prompt_tokens: int
    output_tokens: int  # tokens the simulated model produces before it stops (at most max_tokens)
    max_tokens: int
    arrival: float
    kind: str = "interactive"  # or "deferrable"
    computed: int = 0  # tokens whose KV is in the cache
    generated: int = 0
    blocks: int = 0
    preemptions: int = 0
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    finished_at: float | None = None
    finished_reason: str | None = None  # stop, length, abort, error
    cached_tokens: int = 0  # prefix-cache hits (none simulated yet)
    tag: object = field(default=None, repr=False)  # the caller's handle (a stream, a client record)

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def e2e(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.arrival

    @property
    def tpot(self) -> float | None:
        """vLLM's per-request TPOT: decode time over tokens after the first (0 for one token)."""
        if self.first_token is None or self.last_token is None:
            return None
        if self.generated <= 1:
            return 0.0
        return (self.last_token - self.first_token) / (self.generated - 1)


class EngineObserver:
    """What the engine reports as it runs; the vLLM metrics implement it."""

    def on_step(self, tokens: int, end: float) -> None: ...
    def on_prefix_query(self, request: SimRequest, queried: int, hits: int) -> None: ...
    def on_first_token(self, request: SimRequest) -> None: ...
    def on_tokens(self, count: int) -> None: ...
    def on_inter_token(self, seconds: float, count: int) -> None: ...
    def on_preemption(self, request: SimRequest) -> None: ...
    def on_finished(self, request: SimRequest) -> None: ...


@dataclass
class _Step:
    start: float
    end: float
    scheduled: list[tuple[SimRequest, int]]
    # What the step costs each of the replica's GPUs: for the GPU's own counters (console/sim/gpu.py).
    busy_seconds: float = 0.0  # kernels running: the step less the host's overhead
    bytes_read: float = 0.0  # weights and live KV read from device memory
    flops: float = 0.0  # 2 x parameters / TP per token scheduled


class Engine:
    def __init__(
        self,
        shape: ReplicaShape,
        observer: EngineObserver | None = None,
        step_overhead_seconds: float = DEFAULT_STEP_OVERHEAD_SECONDS,
    ):
        self.shape = shape
        self.observer = observer or EngineObserver()
        self.step_overhead_seconds = step_overhead_seconds
        self.slowdown = 1.0  # a fault multiplies every step's time by this
        self.pool = BlockPool(shape.num_blocks)
        self.max_model_len = min(shape.max_model_len, shape.kv_capacity_tokens)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.clock = 0.0  # end of the last step
        self.steps = 0
        self.preemptions = 0
        # Per GPU, over the steps ended so far: what dcgm-exporter's profiling fields are made of.
        self.gpu_busy_seconds = 0.0
        self.gpu_bytes_read = 0.0
        self.gpu_flops = 0.0
        self._pending: _Step | None = None
        # Per-token costs, precomputed: seconds per byte read and per prefill token.
        tp = shape.tensor_parallel
        self._seconds_per_byte = 1.0 / (shape.bandwidth_bytes_per_second * shape.bandwidth_efficiency)
        self._weight_bytes_per_gpu = shape.weight_bytes / tp
        self._kv_bytes_per_token_per_gpu = shape.kv_bytes_per_token / tp
        self._flops_per_token_per_gpu = 2.0 * shape.parameters / tp
        self._seconds_per_prefill_token = (
            2.0 * shape.parameters / tp / (shape.flops_per_second * shape.compute_efficiency)
        )

    # ---- state a monitor reads -------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting and self._pending is None

    def next_event_time(self) -> float | None:
        """When the engine next has something to report: the end of the step in flight."""
        if self._pending is not None:
            return self._pending.end
        start = self._next_start()
        return start

    def gpu_work(self, now: float) -> tuple[float, float, float]:
        """(busy seconds, bytes read, FLOPs) per GPU up to `now`: the steps ended, and the share of the one in flight."""
        busy, read, flops = self.gpu_busy_seconds, self.gpu_bytes_read, self.gpu_flops
        step = self._pending
        if step is not None and now > step.start and step.end > step.start:
            share = min(1.0, (now - step.start) / (step.end - step.start))
            busy += step.busy_seconds * share
            read += step.bytes_read * share
            flops += step.flops * share
        return busy, read, flops

    def decode_step_seconds(self, kv_tokens: int, prefill_tokens: int = 0, decode_tokens: int = 0) -> float:
        """The step-time formula, for callers that want the engine's own figure."""
        weights = self._weight_bytes_per_gpu * self._seconds_per_byte
        compute = (prefill_tokens + decode_tokens) * self._seconds_per_prefill_token
        kv = kv_tokens * self._kv_bytes_per_token_per_gpu * self._seconds_per_byte
        return (self.step_overhead_seconds + max(weights, compute) + kv) * self.slowdown

    # ---- requests --------------------------------------------------------------------------

    def validate(self, prompt_tokens: int, max_tokens: int) -> str | None:
        """Why vLLM would refuse this request (HTTP 400), or None."""
        if prompt_tokens < 1:
            return "the prompt is empty"
        if max_tokens < 1:
            return f"max_tokens must be at least 1, got {max_tokens}"
        if prompt_tokens + max_tokens > self.max_model_len:
            return (
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion)."
            )
        return None

    def submit(self, request: SimRequest) -> None:
        problem = self.validate(request.prompt_tokens, request.max_tokens)
        if problem:
            raise ValueError(problem)
        request.output_tokens = max(1, min(request.output_tokens, request.max_tokens))
        if self.idle:
            self.clock = max(self.clock, request.arrival)
        self.waiting.append(request)

    def resume(self, request: SimRequest) -> None:
        """A request already decoding when the simulation starts (a what-if carrying a live fleet's batch in):
        its prompt and its `generated` tokens but the last are in the cache, so it decodes on from the next step.
        Without room for it (blocks, or max_num_seqs) it waits, as a preempted request does, and is recomputed."""
        problem = self.validate(request.prompt_tokens, request.max_tokens)
        if problem:
            raise ValueError(problem)
        request.output_tokens = max(1, min(request.output_tokens, request.max_tokens))
        request.generated = max(1, min(request.generated, request.output_tokens - 1))
        context = request.prompt_tokens + request.generated - 1
        need = blocks_for(context, self.shape.block_size)
        if request.output_tokens > 1 and len(self.running) < self.shape.max_num_seqs and self.pool.take(need):
            request.computed, request.blocks = context, need
            request.first_scheduled = request.first_token = request.last_token = request.arrival
            self.running.append(request)
        else:
            request.generated = 0
            self.waiting.append(request)
        self.clock = max(self.clock, request.arrival)

    def abort(self, request: SimRequest, now: float) -> None:
        """The client went away: free its blocks and count it as aborted."""
        if request.finished:
            return
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self._finish(request, now, "abort")

    # ---- time ------------------------------------------------------------------------------

    def advance(self, now: float, max_work: int | None = None) -> list[SimRequest]:
        """Run every step that ends by `now`; return the requests that got tokens or finished.

        `max_work` bounds what one call does (a step counts one plus the requests it schedules,
        a refused request one): an engine far behind `now` catches up over several calls, and a
        caller on an event loop stays responsive (signals, other replicas) however heavy the load.
        Without it every step up to `now` is run, as the offline runs do.
        """
        updated: dict[int, SimRequest] = {}
        work = 0
        while max_work is None or work < max_work:
            if self._pending is None:
                start = self._next_start()
                if start is None or start > now:
                    break
                self._pending = self._schedule(start)
                work += 1
                if self._pending is None:
                    continue
                work += len(self._pending.scheduled)
            if self._pending.end > now:
                break
            step, self._pending = self._pending, None
            self._commit(step, updated)
        return list(updated.values())

    def behind(self, now: float) -> bool:
        """A step due by `now` is still to run (an `advance` stopped at its `max_work`)."""
        following = self.next_event_time()
        return following is not None and following <= now

    def _next_start(self) -> float | None:
        if self.running:
            return self.clock
        if self.waiting:
            return max(self.clock, self.waiting[0].arrival)
        return None

    def _schedule(self, start: float) -> _Step | None:
        budget = self.shape.max_num_batched_tokens
        scheduled: list[tuple[SimRequest, int]] = []
        preempted = False
        kv_tokens = 0
        prefill_tokens = 0
        index = 0
        block_size = self.shape.block_size
        pool, running = self.pool, self.running
        # The hot loop of every offline sweep (a step per token, each over the whole batch): the
        # token count and block arithmetic are inlined, and a request whose next token fits in its
        # blocks (most decode steps) skips the pool.
        while index < len(running) and budget > 0:
            request = running[index]
            computed = request.computed
            num_tokens = request.prompt_tokens + request.generated
            new = min(num_tokens - computed, budget)
            total = computed + new
            need = (-(-total // block_size) if total > 0 else 0) - request.blocks
            if need:
                preempted_itself = False
                while need > pool.free:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted = True
                    if victim is request:
                        preempted_itself = True
                        break
                if preempted_itself:
                    break  # vLLM stops scheduling running requests here
                pool.take(need)
                request.blocks += need
            scheduled.append((request, new))
            budget -= new
            kv_tokens += total
            if not (new == 1 and request.generated > 0 and computed == num_tokens - 1):  # not a decode step
                prefill_tokens += new
            index += 1
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.shape.max_num_seqs:
            request = self.waiting[0]
            if request.arrival > start:
                break
            new = min(request.num_tokens, budget)
            need = blocks_for(new, self.shape.block_size)
            if need > self.pool.free:
                break
            self.waiting.popleft()
            self.running.append(request)
            self.pool.take(need)
            request.blocks = need
            if request.first_scheduled is None:
                request.first_scheduled = start
            self.observer.on_prefix_query(request, request.num_tokens, 0)
            scheduled.append((request, new))
            budget -= new
            kv_tokens += new
            prefill_tokens += new
        if not scheduled:
            if not self.running and self.waiting:
                # Nothing fits even on an empty cache: refuse the head rather than spin.
                self._finish(self.waiting.popleft(), start, "error")
            return None
        tokens = self.shape.max_num_batched_tokens - budget  # every token scheduled came out of the budget
        seconds = self.decode_step_seconds(kv_tokens, prefill_tokens, tokens - prefill_tokens)
        return _Step(
            start=start,
            end=start + seconds,
            scheduled=scheduled,
            busy_seconds=max(0.0, seconds - self.step_overhead_seconds * self.slowdown),
            bytes_read=self._weight_bytes_per_gpu + kv_tokens * self._kv_bytes_per_token_per_gpu,
            flops=tokens * self._flops_per_token_per_gpu,
        )

    def _preempt(self, request: SimRequest) -> None:
        self.pool.release(request.blocks)
        request.blocks = 0
        request.computed = 0
        request.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(request)
        self.observer.on_preemption(request)

    def _commit(self, step: _Step, updated: dict[int, SimRequest]) -> None:
        end = step.end
        self.clock = end
        self.steps += 1
        self.gpu_busy_seconds += step.busy_seconds
        self.gpu_bytes_read += step.bytes_read
        self.gpu_flops += step.flops
        observer = self.observer
        observer.on_step(sum(new for _, new in step.scheduled), end)
        produced = 0
        in_rhythm = 0  # requests whose previous token came at this step's start: ITL = step length
        finished = False
        for request, new in step.scheduled:
            if request.finished_reason is not None:
                continue  # aborted while the step ran
            request.computed += new
            if request.computed < request.prompt_tokens + request.generated:
                continue  # a prefill chunk: no token yet
            request.generated += 1
            produced += 1
            if request.first_token is None:
                request.first_token = end
                observer.on_first_token(request)
            elif request.last_token == step.start:
                in_rhythm += 1
            elif request.last_token is not None:  # always, after a first token
                observer.on_inter_token(end - request.last_token, 1)
            request.last_token = end
            updated[id(request)] = request
            if request.generated >= request.output_tokens:
                reason = "length" if request.output_tokens >= request.max_tokens else "stop"
                self._finish(request, end, reason)
                finished = True
        if in_rhythm:
            observer.on_inter_token(end - step.start, in_rhythm)
        if produced:
            observer.on_tokens(produced)
        if finished:
            self.running = [r for r in self.running if r.finished_reason is None]

    def _finish(self, request: SimRequest, now: float, reason: str) -> None:
        if request.blocks:
            self.pool.release(request.blocks)
            request.blocks = 0
        request.finished_reason = reason
        request.finished_at = now
        self.observer.on_finished(request)
