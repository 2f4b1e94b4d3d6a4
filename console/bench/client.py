"""A streaming OpenAI-compatible client that drives a known load and times every request.

It speaks `/v1/completions` with `stream: true` and reads the server-sent events
itself, so it sees each chunk as it arrives. Per request it records, on the
client's own clock: time to first token (the first chunk with output, by the
rule of console/token_chunks.py: a chat's role-only chunk is not a token),
end-to-end time, the gaps between those chunks, and the token counts the server
reported in its closing `usage` chunk. Used by the real-vLLM test lane to check the console
against what a client saw, and by the goodput benchmark.

Times are measured from just before the request is sent, so they include the
HTTP front end, tokenization and queueing: what a user waits for.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import httpx

from console.token_chunks import carries_token


@dataclass(frozen=True)
class RequestResult:
    """One request as the client saw it; seconds on the client's monotonic clock."""

    ok: bool
    started: float  # perf_counter at send
    e2e_seconds: float
    ttft_seconds: float | None = None
    chunk_gaps_seconds: tuple[float, ...] = ()  # between successive streamed chunks with output
    prompt_tokens: int | None = None  # from the server's usage chunk
    output_tokens: int | None = None
    status: int | None = None
    finish_reason: str | None = None
    error: str = ""
    # From send to the last chunk that carried a choice: vLLM's benchmark calls this the latency (E2E),
    # and its TPOT is (latency - TTFT) / (output tokens - 1). `e2e_seconds` runs to the stream's end.
    last_token_seconds: float | None = None


@dataclass(frozen=True)
class LoadResult:
    results: tuple[RequestResult, ...]
    wall_seconds: float
    concurrency: int
    max_tokens: int

    @property
    def succeeded(self) -> tuple[RequestResult, ...]:
        return tuple(r for r in self.results if r.ok)

    @property
    def failed(self) -> tuple[RequestResult, ...]:
        return tuple(r for r in self.results if not r.ok)

    def total(self, attribute: str) -> int:
        """Sum of `prompt_tokens` or `output_tokens` over successful requests (None counts as 0)."""
        return sum(getattr(r, attribute) or 0 for r in self.succeeded)

    def quantile(self, attribute: str, q: float) -> float | None:
        """Quantile of a per-request time (`ttft_seconds`, `e2e_seconds`) over successful requests."""
        return percentile([getattr(r, attribute) for r in self.succeeded if getattr(r, attribute) is not None], q)


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear-interpolated quantile (numpy's default, as vLLM's serving benchmark uses); None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class StreamingClient:
    """Sends streaming completions to one OpenAI-compatible server (`base_url` like http://host:8000)."""

    base_url: str
    model: str
    timeout: float = 120.0
    headers: dict[str, str] = field(default_factory=dict)

    async def complete(
        self,
        http: httpx.AsyncClient,
        prompt: str,
        max_tokens: int,
        ignore_eos: bool = True,
        messages: Sequence[dict] | None = None,
    ) -> RequestResult:
        """One streamed completion (a chat when `messages` is given, `prompt` then unused).

        Never raises for a server or network fault: the result says what failed.
        """
        body: dict = {
            "model": self.model,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if messages is not None:
            body["messages"] = list(messages)
            body["max_completion_tokens"] = max_tokens
            path = "/v1/chat/completions"
        else:
            body["prompt"] = prompt
            body["max_tokens"] = max_tokens
            path = "/v1/completions"
        if ignore_eos:
            body["ignore_eos"] = True  # vLLM extension: exactly max_tokens come out
        started = time.perf_counter()
        times = StreamTimes(started)
        status: int | None = None
        try:
            async with http.stream(
                "POST", self.base_url.rstrip("/") + path, json=body, headers=self.headers
            ) as response:
                status = response.status_code
                if status != 200:
                    text = (await response.aread()).decode("utf-8", "replace")[:200]
                    return RequestResult(
                        False, started, time.perf_counter() - started, status=status, error=f"HTTP {status}: {text}"
                    )
                async for line in response.aiter_lines():
                    if line.startswith("data:") and times.read(line[len("data:") :].strip()):
                        break
        except (httpx.HTTPError, json.JSONDecodeError, OSError, UnicodeDecodeError) as error:
            return RequestResult(
                False, started, time.perf_counter() - started, status=status, error=f"{type(error).__name__}: {error}"
            )
        return times.result(status)

    async def run(
        self, prompts: Sequence[str], concurrency: int, max_tokens: int, ignore_eos: bool = True
    ) -> LoadResult:
        """Send every prompt, at most `concurrency` in flight at once (a closed loop)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        for item in enumerate(prompts):
            queue.put_nowait(item)
        results: list[RequestResult | None] = [None] * len(prompts)

        async def worker(http: httpx.AsyncClient) -> None:
            while True:
                try:
                    index, prompt = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                results[index] = await self.complete(http, prompt, max_tokens, ignore_eos)

        started = time.perf_counter()
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), limits=limits) as http:
            await asyncio.gather(*(worker(http) for _ in range(min(concurrency, len(prompts)) or 1)))
        wall = time.perf_counter() - started
        return LoadResult(tuple(r for r in results if r is not None), wall, concurrency, max_tokens)


class StreamTimes:
    """One streamed answer's `data:` events read as they arrive: first token, gaps, finish reason and usage.

    Shared by the httpx client here and the aiohttp one of the sweep (console/bench/stream.py), so both time a
    stream by the same rule. `read(payload)` takes one event's payload (after `data:`), returns True at [DONE],
    and raises json.JSONDecodeError for a chunk that is not a JSON object. Only chunks with output
    (console/token_chunks.py) are timed: a chat's role chunk sent before prefill would read a TTFT of the
    server's time to accept, and its gap to the first token would count as one more token.
    """

    def __init__(self, started: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.started = started
        self.clock = clock
        self.first: float | None = None
        self.last: float | None = None
        self.gaps: list[float] = []
        self.usage: dict = {}
        self.finish_reason: str | None = None

    def read(self, payload: str) -> bool:
        if payload == "[DONE]":
            return True
        chunk = json.loads(payload)
        if not isinstance(chunk, dict):
            raise json.JSONDecodeError("a chunk that is not a JSON object", payload, 0)
        now = self.clock()
        choices = chunk.get("choices")
        if choices:
            if carries_token(chunk):
                if self.first is None:
                    self.first = now
                elif self.last is not None:
                    self.gaps.append(now - self.last)
                self.last = now
            choice = choices[0] if isinstance(choices, list) else {}
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            self.finish_reason = reason or self.finish_reason
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        return False

    def result(self, status: int | None) -> RequestResult:
        end = self.clock()
        first, last, started = self.first, self.last, self.started
        return RequestResult(
            ok=first is not None,
            started=started,
            e2e_seconds=end - started,
            ttft_seconds=first - started if first is not None else None,
            chunk_gaps_seconds=tuple(self.gaps),
            prompt_tokens=_count(self.usage.get("prompt_tokens")),
            output_tokens=_count(self.usage.get("completion_tokens")),
            status=status,
            finish_reason=self.finish_reason,
            error="" if first is not None else "the stream ended without a token",
            last_token_seconds=last - started if last is not None else None,
        )


def _count(value: object) -> int | None:
    """A token count from the server's usage chunk; anything but a whole number >= 0 is no count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def prompts(count: int, words: int = 24) -> list[str]:
    """`count` distinct, deterministic prompts of about `words` words (distinct so prefix caching stays small)."""
    vocabulary = (
        "capacity queue token latency replica engine cache batch prefill decode window "
        "fleet scrape quantile bucket rate counter gauge server client request stream"
    ).split()
    out = []
    for i in range(count):
        head = f"request {i}:"
        body = " ".join(vocabulary[(i * 5 + j * 7) % len(vocabulary)] for j in range(words))
        out.append(f"{head} {body}")
    return out
