"""A lean asyncio HTTP/1.1 client for the load generator.

The load generator shares the 2 CPU cores with the server it measures, so its own CPU per
request counts against the server. This client does only what the benchmarks need, with as
little Python per request as possible: keep-alive connections to one host, one ``write``
per request, ``Content-Length`` and chunked bodies, and nothing else (no TLS, redirects,
cookies, proxies or HTTP/2). Measured by ``bench.retrieve``: 1-3 ms of CPU per
``/v1/retrieve`` request, JSON parsing of the response included.

A request that fails or is cancelled (a timeout) closes its connection, so a half-read
response is never mistaken for the next one.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class HttpError(Exception):
    """The connection failed or the server sent something that is not HTTP/1.1."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A response: status, lower-cased headers and the whole body."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class _Conn:
    __slots__ = ("reader", "writer", "last_used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.last_used = reader, writer, time.monotonic()

    def close(self) -> None:
        self.writer.close()


class LeanClient:
    """Keep-alive HTTP/1.1 connections to ``base_url``; at most ``max_connections`` open.

    Args:
        base_url: ``http://host:port`` (plain HTTP only).
        max_connections: open connections at most; a request waits for one beyond that
            (the wait counts in its latency, as a real client's would).
        keepalive_expiry: idle connections older than this are closed, not reused, so a
            connection the server is closing (uvicorn: 5 s keep-alive) is never picked.
    """

    def __init__(self, base_url: str, *, max_connections: int = 512, keepalive_expiry: float = 2.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"LeanClient speaks plain http to one host, not {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self._host_header = f"{self.host}:{self.port}".encode()
        self._idle: list[_Conn] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._expiry = keepalive_expiry
        self.opened = 0

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def _connection(self) -> _Conn:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.last_used < self._expiry and not conn.reader.at_eof():
                return conn
            conn.close()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.opened += 1
        return _Conn(reader, writer)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """Send one request and read the whole response.

        Raises:
            HttpError: the connection failed or the response was malformed.
        """
        body = b"" if json is None else jsonlib.dumps(json).encode()
        head = [f"{method} {path} HTTP/1.1".encode(), b"Host: " + self._host_header]
        if json is not None:
            head.append(b"Content-Type: application/json")
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(b"Content-Length: " + str(len(body)).encode())
        head.extend(f"{k}: {v}".encode() for k, v in (headers or {}).items())
        payload = b"\r\n".join(head) + b"\r\n\r\n" + body
        async with self._slots:
            conn = await self._connection()
            reusable = False
            try:
                conn.writer.write(payload)
                reply, reusable = await _read_response(conn.reader, method)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                raise HttpError(f"{type(exc).__name__}: {exc}") from exc
            finally:
                if reusable:
                    conn.last_used = time.monotonic()
                    self._idle.append(conn)
                else:  # failed, cancelled mid-response, or the server said close
                    conn.close()
        return reply


async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[Reply, bool]:
    """(the response, whether the connection may carry another request)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise HttpError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(rest.split(" ", 1)[0])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        content = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        content = await _read_chunked(reader)
    elif "content-length" in headers:
        content = await reader.readexactly(int(headers["content-length"]))
    else:  # delimited by the server closing the connection
        content = await reader.read()
        keep = False
    return Reply(status, headers, content), keep


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Trailers (rare) end with an empty line.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the CRLF after each chunk
