"""The simulator's engine with its decode stretches taken in one stride: what makes a what-if cheap.

Between two events (an arrival admitted, a prefill chunk, a request finishing, a KV block running
out) every running request of console.sim.engine.Engine decodes one token per step, and the step's
time grows by the same amount each step (each request's KV grows by one token). Stepping that
stretch token by token is most of an offline run's CPU; here it is added up in closed form: the
stretch's steps end where they would have ended, each request gets its tokens, its blocks and its
last token's time, and the next step is the engine's own again. TTFT, TPOT and finishing times come
out as the step-by-step engine gives them (tests/ahead/test_whatif_engine.py holds them equal).

What a stride skips are per-step observer calls (inter-token latencies, steps): a what-if reads
requests, not the vLLM metrics page. Pure, like the engine it extends.
"""

from __future__ import annotations

import math

from console.sim.engine import Engine, SimRequest

MIN_STRIDE = 2  # shorter stretches are left to the engine's own step


class StridingEngine(Engine):
    """An Engine whose pure-decode stretches run in one stride (same results, a fraction of the CPU)."""

    def advance(self, now: float, max_work: int | None = None) -> list[SimRequest]:
        """Every step that ends by `now`, as the engine runs them; `max_work` is not used (a what-if runs offline)."""
        updated: dict[int, SimRequest] = {}
        while self.behind(now):
            if self._pending is None and self._stride(now, updated):
                continue
            for request in super().advance(now, max_work=1):
                updated[id(request)] = request
        return list(updated.values())

    def _stride(self, now: float, updated: dict[int, SimRequest]) -> bool:
        """Run the pure-decode steps that end by `now` in one stride; False when the next step is not one."""
        running = self.running
        if not running:
            return False
        shape = self.shape
        batch = len(running)
        budget = shape.max_num_batched_tokens - batch
        if budget < 0:
            return False
        remaining = math.inf
        kv_tokens = 0
        for request in running:
            num_tokens = request.prompt_tokens + request.generated
            if request.generated == 0 or request.computed != num_tokens - 1:
                return False  # a prefill (chunk) is in this step
            remaining = min(remaining, request.output_tokens - request.generated)
            kv_tokens += num_tokens
        if self.waiting and batch < shape.max_num_seqs:
            head = self.waiting[0]
            if head.arrival <= self.clock:
                need = -(-min(head.num_tokens, budget) // shape.block_size)
                if need <= self.pool.free:
                    return False  # the next step admits it
            else:
                return False  # it arrives during the stretch: leave it to the engine
        # Steps in the stride: none finishes a request (the engine's own step does), all fit in the blocks free.
        steps = int(remaining) - 1
        if steps < MIN_STRIDE:
            return False
        steps = min(steps, self._steps_by(now, kv_tokens, batch))
        steps = self._steps_in_blocks(steps)
        if steps < MIN_STRIDE:
            return False
        # Step j (1-based) reads kv_tokens + (j - 1) x batch tokens of KV: its time is first + (j - 1) x growth.
        first = self.decode_step_seconds(kv_tokens, decode_tokens=batch)
        growth = self.decode_step_seconds(kv_tokens + batch, decode_tokens=batch) - first
        end = self.clock + steps * first + growth * steps * (steps - 1) / 2
        block_size = shape.block_size
        taken = 0
        for request in running:
            request.computed += steps
            request.generated += steps
            blocks = -(-request.computed // block_size)
            if blocks > request.blocks:
                taken += blocks - request.blocks
                request.blocks = blocks
            request.last_token = end
            updated[id(request)] = request
        self.pool.take(taken)
        self.clock = end
        self.steps += steps
        return True

    def _steps_by(self, now: float, kv_tokens: int, batch: int) -> int:
        """How many decode steps from the engine's clock end by `now`."""
        first = self.decode_step_seconds(kv_tokens, decode_tokens=batch)
        growth = self.decode_step_seconds(kv_tokens + batch, decode_tokens=batch) - first
        room = now - self.clock
        if room < first:
            return 0
        if growth <= 0:
            steps = int(room // first)
        else:
            # steps x first + growth x steps (steps - 1) / 2 <= room
            a, b = growth / 2, first - growth / 2
            steps = int((-b + math.sqrt(b * b + 4 * a * room)) / (2 * a))
        while steps > 0 and steps * first + growth * steps * (steps - 1) / 2 > room:
            steps -= 1
        return steps

    def _steps_in_blocks(self, steps: int) -> int:
        """At most `steps`, so that every running request's growing KV fits in the blocks free now."""
        block_size = self.shape.block_size
        free = self.pool.free

        def need(k: int) -> int:
            return sum(max(0, -(-(r.computed + k) // block_size) - r.blocks) for r in self.running)

        if need(steps) <= free:
            return steps
        low, high = 0, steps
        while low < high:
            middle = (low + high + 1) // 2
            if need(middle) <= free:
                low = middle
            else:
                high = middle - 1
        return low
