"""The benchmark's streaming request on aiohttp: the same figures as console/bench/client.py, less client CPU.

`capcon bench` measures a replica from a machine that may have two cores: what the
client spends per request and per chunk is time the replica's answer waits to be
read. httpx (through anyio) costs about 2 ms more per request than aiohttp here,
which showed as TTFT (benchmarks/bench_client.py), so the sweep sends its requests
through one aiohttp session and reads the server-sent events itself: one chunk per
`data:` line, timed as it is parsed, as vLLM's own benchmark client does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import aiohttp

from console.bench.client import RequestResult, _count

MAX_ERROR_TEXT = 200


class SessionClient:
    """Streaming completions to one OpenAI-compatible server over a shared aiohttp session."""

    def __init__(self, base_url: str, model: str, timeout: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> SessionClient:
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False)
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(
        self, prompt: str, max_tokens: int, ignore_eos: bool = False, messages: Sequence[dict] | None = None
    ) -> RequestResult:
        """One streamed completion (a chat when `messages` is given). Never raises for a server or network fault."""
        assert self._session is not None, "use `async with SessionClient(...)`"
        body: dict = {
            "model": self.model,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if messages is not None:
            body["messages"] = list(messages)
            body["max_completion_tokens"] = max_tokens
            url = self.base_url + "/v1/chat/completions"
        else:
            body["prompt"] = prompt
            body["max_tokens"] = max_tokens
            url = self.base_url + "/v1/completions"
        if ignore_eos:
            body["ignore_eos"] = True
        started = time.perf_counter()
        first: float | None = None
        last: float | None = None
        gaps: list[float] = []
        usage: dict = {}
        finish_reason: str | None = None
        status: int | None = None
        try:
            async with self._session.post(url, json=body) as response:
                status = response.status
                if status != 200:
                    text = (await response.content.read(4096)).decode("utf-8", "replace")[:MAX_ERROR_TEXT]
                    return RequestResult(
                        False, started, time.perf_counter() - started, status=status, error=f"HTTP {status}: {text}"
                    )
                buffer = b""
                done = False
                async for data in response.content.iter_any():
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    for raw in lines:
                        line = raw.strip()
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                            break
                        chunk = json.loads(payload)
                        if not isinstance(chunk, dict):
                            raise json.JSONDecodeError("a chunk that is not a JSON object", payload.decode(), 0)
                        now = time.perf_counter()
                        choices = chunk.get("choices")
                        if choices:
                            if first is None:
                                first = now
                            elif last is not None:
                                gaps.append(now - last)
                            last = now
                            choice = choices[0] if isinstance(choices, list) else {}
                            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
                            finish_reason = reason or finish_reason
                        if isinstance(chunk.get("usage"), dict):
                            usage = chunk["usage"]
                    if done:
                        break
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError, UnicodeDecodeError, OSError) as error:
            return RequestResult(
                False, started, time.perf_counter() - started, status=status, error=f"{type(error).__name__}: {error}"
            )
        end = time.perf_counter()
        return RequestResult(
            ok=first is not None,
            started=started,
            e2e_seconds=end - started,
            ttft_seconds=first - started if first is not None else None,
            chunk_gaps_seconds=tuple(gaps),
            prompt_tokens=_count(usage.get("prompt_tokens")),
            output_tokens=_count(usage.get("completion_tokens")),
            status=status,
            finish_reason=finish_reason,
            error="" if first is not None else "the stream ended without a token",
            last_token_seconds=last - started if last is not None else None,
        )
