"""The load generator's lean HTTP/1.1 client against a real asyncio server on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from bench.http import HttpError, LeanClient
from bench.load import LoadConfig, RequestSpec, run_rate, run_rates

SERVED = [0]  # requests answered, for the per-request counter test


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers by path: /json echoes the body, /chunked streams chunks, /close closes after."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            SERVED[0] += 1
            lines = head.decode().split("\r\n")
            method, path, _ = lines[0].split(" ")
            headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if path == "/chunked":
                writer.write(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                )
            elif path == "/close":
                writer.write(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy")
                await writer.drain()
                writer.close()
                return
            elif path == "/broken":
                writer.write(b"garbage\r\n\r\n")
                await writer.drain()
                writer.close()
                return
            else:
                out = json.dumps({"method": method, "got": json.loads(body) if body else None}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nServer-Timing: app;dur=1.5\r\n"
                    + f"Content-Length: {len(out)}\r\n\r\n".encode()
                    + out
                )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def _with_server(test: Callable[[LeanClient], Awaitable[None]]) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with LeanClient(f"http://127.0.0.1:{port}") as client:
            await test(client)
    finally:
        server.close()
        await server.wait_closed()


def test_json_round_trip_reuses_the_connection() -> None:
    async def check(client: LeanClient) -> None:
        for i in range(3):
            reply = await client.request("POST", "/json", json={"i": i}, headers={"X-Test": "1"})
            assert reply.status_code == 200 and reply.is_success
            assert reply.json() == {"method": "POST", "got": {"i": i}}
            assert reply.headers["server-timing"] == "app;dur=1.5"
        assert client.opened == 1

    asyncio.run(_with_server(check))


def test_chunked_body_and_connection_close() -> None:
    async def check(client: LeanClient) -> None:
        assert (await client.request("GET", "/chunked")).content == b"hello world"
        busy = await client.request("GET", "/close")
        assert busy.status_code == 503 and not busy.is_success and busy.content == b"busy"
        assert (await client.request("GET", "/json")).json()["method"] == "GET"
        assert client.opened == 2  # the closed connection was not reused

    asyncio.run(_with_server(check))


def test_malformed_response_is_an_http_error() -> None:
    async def check(client: LeanClient) -> None:
        with pytest.raises(HttpError):
            await client.request("GET", "/broken")
        assert (await client.request("GET", "/json")).is_success

    asyncio.run(_with_server(check))


def test_open_loop_rate_counts_and_server_timings() -> None:
    async def check(client: LeanClient) -> None:
        config = LoadConfig(rate=50, duration_s=0.6, warmup_s=0.2, arrival="fixed")
        result = await run_rate(
            client,
            lambda i: RequestSpec("POST", "/json", {"i": i}),
            config,
            server_timings=lambda reply: {"app": float(reply.headers["server-timing"].split("=")[1])},
        )
        assert result.sent == 30 and result.ok == 30 and result.errors == 0
        assert result.server_p50_ms == {"app": 1.5}
        assert result.p50_ms > 0

    asyncio.run(_with_server(check))


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError):
        LeanClient("https://example.org")


def test_counters_are_reported_per_request_sent() -> None:
    async def check() -> list[float]:
        server = await asyncio.start_server(_serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            configs = [LoadConfig(rate=r, duration_s=0.4, warmup_s=0.1, arrival="fixed") for r in (20, 40)]
            results = await run_rates(
                f"http://127.0.0.1:{port}",
                lambda i: RequestSpec("GET", "/json"),
                configs,
                pause_s=0.05,
                counters={"served": lambda: float(SERVED[0]), "constant": lambda: 7.0},
            )
        finally:
            server.close()
            await server.wait_closed()
        assert [r.per_request["constant"] for r in results] == [0.0, 0.0]
        return [r.per_request["served"] for r in results]

    assert asyncio.run(check()) == [1.0, 1.0]  # one server hit per request sent, warm-up included
