"""An httpcore network backend on plain asyncio streams.

httpcore's default backend goes through anyio, whose per-call bookkeeping (cancel
scopes, task lookups, socket attribute tables) costs more CPU than the HTTP work
itself when one process scrapes hundreds of replicas every second. This backend
hands httpcore asyncio's own streams and maps their errors to httpcore's, so the
connection pool, h11 parsing and keep-alive handling above it are unchanged.

A per-call `timeout` is honoured when given; the scrape source passes none and
bounds each whole request with one deadline instead.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore


def _message(error: BaseException) -> str:
    return str(error).strip() or type(error).__name__


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as error:
            raise httpcore.ReadTimeout(_message(error)) from error
        except OSError as error:
            raise httpcore.ReadError(_message(error)) from error

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            if timeout is None:
                await self._writer.drain()
            else:
                async with asyncio.timeout(timeout):
                    await self._writer.drain()
        except TimeoutError as error:
            raise httpcore.WriteTimeout(_message(error)) from error
        except (OSError, RuntimeError) as error:  # RuntimeError: the transport was already shut for writing
            raise httpcore.WriteError(_message(error)) from error

    async def aclose(self) -> None:
        # Not waiting for the close to complete: a TLS peer that never answers the
        # shutdown would hold the caller for asyncio's 30 s shutdown timeout.
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            try:
                if timeout is None:
                    await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
                else:
                    async with asyncio.timeout(timeout):
                        await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
            except TimeoutError as error:
                raise httpcore.ConnectTimeout(_message(error)) from error
            except OSError as error:  # ssl.SSLError included: a failed certificate check lands here
                raise httpcore.ConnectError(_message(error)) from error
        except BaseException:
            self._writer.close()  # a connection whose handshake failed or was cancelled is of no use
            raise
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # httpcore asks this of an idle kept-alive connection: anything readable there
            # (normally the server's close) means the connection must not be reused.
            return self._reader.at_eof() or self._writer.transport.is_closing()
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "socket":
            return self._writer.get_extra_info("socket")
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[tuple] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        local = (local_address, 0) if local_address else None
        try:
            if timeout is None:
                reader, writer = await asyncio.open_connection(host, port, local_addr=local)
            else:
                async with asyncio.timeout(timeout):
                    reader, writer = await asyncio.open_connection(host, port, local_addr=local)
        except TimeoutError as error:
            raise httpcore.ConnectTimeout(_message(error)) from error
        except OSError as error:
            raise httpcore.ConnectError(_message(error)) from error
        sock: socket.socket | None = writer.get_extra_info("socket")
        for option in socket_options or ():
            if sock is not None:
                sock.setsockopt(*option)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[tuple] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            if timeout is None:
                reader, writer = await asyncio.open_unix_connection(path)
            else:
                async with asyncio.timeout(timeout):
                    reader, writer = await asyncio.open_unix_connection(path)
        except TimeoutError as error:
            raise httpcore.ConnectTimeout(_message(error)) from error
        except OSError as error:
            raise httpcore.ConnectError(_message(error)) from error
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
