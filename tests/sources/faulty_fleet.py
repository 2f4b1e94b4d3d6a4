"""A loopback fleet of /metrics targets in a process of its own, where a share of the targets misbehave.

Each target is a path on one raw socket server (`/t/<index>/metrics`), so hundreds of targets cost one port;
the scraper still keeps one connection per target. A target's behaviour is chosen by its index, one of:

- ``ok``: answers a real vLLM page at once and keeps the connection alive;
- ``hang``: reads the request and never answers;
- ``reset``: reads the request and resets the connection (RST);
- ``close``: reads the request and closes the connection (FIN) without a byte;
- ``slow``: sends the headers, then the body a few bytes at a time, slower than any scrape timeout;
- ``cut``: sends the headers and half the body, then closes.

The server runs in a child process (`python -m tests.sources.faulty_fleet PAGE SHARE`, printing its port), so the scraper
under test does not share its event loop (nor, on a loaded machine, its CPU slice) with the faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BEHAVIOURS = ("ok", "hang", "reset", "close", "slow", "cut")


def behaviour(index: int, faulty_share_in_eight: int = 3) -> str:
    """The behaviour of target `index`: `faulty_share_in_eight` in every 8 targets misbehave, in turn."""
    slot = index % 8
    if slot >= faulty_share_in_eight:
        return "ok"
    return BEHAVIOURS[1 + (index // 8 + slot) % (len(BEHAVIOURS) - 1)]


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:  # SO_LINGER with a zero timeout: close() sends RST instead of FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _serve(page: bytes, faulty: int) -> None:
    headers = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n" % len(page)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                path = request.split(b" ", 2)[1].decode()
                index = int(path.split("/")[2])
                kind = behaviour(index, faulty)
                if kind == "ok":
                    writer.write(headers + page)
                    await writer.drain()
                    continue
                if kind == "hang":
                    await asyncio.sleep(3600)
                elif kind == "reset":
                    _reset(writer)
                elif kind == "close":
                    writer.close()
                elif kind == "slow":
                    writer.write(headers)
                    for start in range(0, len(page), 64):
                        writer.write(page[start : start + 64])
                        await writer.drain()
                        await asyncio.sleep(0.5)
                elif kind == "cut":
                    writer.write(headers + page[: len(page) // 2])
                    await writer.drain()
                    writer.close()
                return
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError):
            with contextlib.suppress(OSError):
                writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)  # the parent reads the port from this line
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def faulty_fleet(page_file: Path, faulty_share_in_eight: int = 3) -> Iterator[str]:
    """Start the fleet's server in a child process; yield its base URL (`http://127.0.0.1:PORT`)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.sources.faulty_fleet", str(page_file), str(faulty_share_in_eight)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()  # the child's first line, or "" if it died first
        if not port.isdigit():
            raise RuntimeError("the faulty fleet's server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


def target_urls(base: str, count: int) -> list[str]:
    return [f"{base}/t/{index}/metrics" for index in range(count)]


if __name__ == "__main__":
    asyncio.run(_serve(Path(sys.argv[1]).read_bytes(), int(sys.argv[2])))
