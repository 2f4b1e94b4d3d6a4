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

from console.bench.client import RequestResult, StreamTimes

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

    async def __aexit__(self, *exc: object) -> None:
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
        times = StreamTimes(started)
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
                        if line.startswith(b"data:") and times.read(line[5:].strip().decode()):
                            done = True
                            break
                    if done:
                        break
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError, UnicodeDecodeError, OSError) as error:
            return RequestResult(
                False, started, time.perf_counter() - started, status=status, error=f"{type(error).__name__}: {error}"
            )
        return times.result(status)
