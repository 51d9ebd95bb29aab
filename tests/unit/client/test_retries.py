"""Retries, timeouts and error mapping against a small scripted HTTP server on loopback: 429
then 200 (honouring Retry-After), connection refused then success, a read timeout that is
not retried, error bodies in ragline's shape and not."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragline_client import AsyncClient, Client, RaglineError, RetryPolicy
from ragline_client._flows import plan_batches
from ragline_client.errors import retry_after_seconds
from ragline_client.models import DocumentIn, LimitsOut

ME = {
    "tenant_id": "acme",
    "principal_id": "service:test",
    "roles": ["ingest"],
    "limits": {"max_batch_documents": 2, "max_body_bytes": 4096, "max_upload_bytes": 10_000},
}
FAST = RetryPolicy(attempts=4, initial_wait=0.05, max_wait=0.2, jitter=0.05)


@dataclass
class Reply:
    status: int = 200
    body: object = field(default_factory=lambda: ME)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class Script:
    """Answers requests with ``replies`` in order (the last one repeats) and records them."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.seen: list[tuple[str, str]] = []  # (path, x-request-id)
        script = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                script.seen.append((self.path, self.headers.get("x-request-id", "")))
                reply = script.replies[min(len(script.seen), len(script.replies)) - 1]
                time.sleep(reply.delay)
                raw = reply.body.encode() if isinstance(reply.body, str) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *_: object) -> None:
                pass

        self.handler = Handler


def _serve(script: Script, port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), script.handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def scripted() -> Iterator[Callable[..., tuple[str, Script]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(*replies: Reply) -> tuple[str, Script]:
        script = Script(*replies)
        servers.append(_serve(script))
        return f"http://127.0.0.1:{servers[-1].server_address[1]}", script

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _error(code: str, rid: str = "rid-1") -> dict:
    return {"error": {"code": code, "message": f"{code} happened", "request_id": rid}}


def test_429_then_200_waits_what_retry_after_asks(scripted: Callable[..., tuple[str, Script]]) -> None:
    url, script = scripted(Reply(429, _error("rate_limited"), {"Retry-After": "1"}), Reply())
    started = time.monotonic()
    assert Client(url, "k", retry=FAST).me().tenant_id == "acme"
    # The policy alone would have waited ~0.05 s; the server asked for 1 s.
    assert time.monotonic() - started >= 0.95
    assert len(script.seen) == 2
    assert script.seen[0][1] == script.seen[1][1] != ""  # one request id for the call and its retry


def test_503_backs_off_then_succeeds_and_gives_up_after_attempts(
    scripted: Callable[..., tuple[str, Script]],
) -> None:
    url, script = scripted(Reply(503, _error("unavailable")), Reply(503, _error("unavailable")), Reply())
    assert Client(url, "k", retry=FAST).me().principal_id == "service:test"
    assert len(script.seen) == 3
    url, script = scripted(Reply(503, _error("unavailable", "rid-9")))
    with pytest.raises(RaglineError) as exc:
        Client(url, "k", retry=RetryPolicy(attempts=2, initial_wait=0.01, max_wait=0.02)).me()
    assert (exc.value.code, exc.value.status, exc.value.request_id) == ("unavailable", 503, "rid-9")
    assert len(script.seen) == 2


def test_connection_refused_then_success() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    script = Script(Reply())
    servers: list[ThreadingHTTPServer] = []
    timer = threading.Timer(0.4, lambda: servers.append(_serve(script, port)))
    timer.start()
    try:
        policy = RetryPolicy(attempts=20, initial_wait=0.05, max_wait=0.2, jitter=0.05)
        assert Client(f"http://127.0.0.1:{port}", "k", retry=policy).me().tenant_id == "acme"
        assert len(script.seen) == 1
    finally:
        timer.join()
        for server in servers:
            server.shutdown()
            server.server_close()
    with pytest.raises(RaglineError) as exc:  # nothing listening at all: attempts run out
        Client(f"http://127.0.0.1:{port}", "k", retry=RetryPolicy(attempts=2, initial_wait=0.01)).me()
    assert exc.value.code == "connection_error" and exc.value.status is None


def test_read_timeout_is_reported_not_retried(scripted: Callable[..., tuple[str, Script]]) -> None:
    url, script = scripted(Reply(delay=1.5))
    with pytest.raises(RaglineError) as exc:
        Client(url, "k", timeout=0.3, retry=FAST).me()
    assert exc.value.code == "timeout" and exc.value.request_id
    assert len(script.seen) == 1


def test_error_bodies_map_to_one_exception(scripted: Callable[..., tuple[str, Script]]) -> None:
    url, _ = scripted(Reply(404, _error("not_found", "rid-404")))
    with pytest.raises(RaglineError) as exc:
        Client(url, "k", retry=FAST).job("0b7e3c1a-5f7d-4d8e-9a63-2f4b8c1d9e70")
    assert (exc.value.code, exc.value.status, exc.value.request_id) == ("not_found", 404, "rid-404")
    assert "rid-404" in str(exc.value)
    # A proxy's page is not ragline's shape: the status and the X-Request-ID header still come through.
    url, script = scripted(Reply(400, "<html>bad gateway</html>", {"X-Request-ID": "proxy-1"}))
    with pytest.raises(RaglineError) as exc:
        Client(url, "k", retry=FAST).me()
    assert (exc.value.code, exc.value.request_id) == ("http_400", "proxy-1")
    assert len(script.seen) == 1  # a 400 is never retried


def test_async_client_retries_the_same_way(scripted: Callable[..., tuple[str, Script]]) -> None:
    url, script = scripted(Reply(429, _error("rate_limited"), {"Retry-After": "0"}), Reply())

    async def call() -> str:
        async with AsyncClient(url, "k", retry=FAST) as client:
            return (await client.me()).tenant_id

    assert asyncio.run(call()) == "acme"
    assert len(script.seen) == 2


def test_retry_after_forms() -> None:
    assert retry_after_seconds("3") == 3.0
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (retry_after_seconds(soon) or 0) <= 30
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_batches_respect_count_and_body_size() -> None:
    limits = LimitsOut(max_batch_documents=3, max_body_bytes=1000, max_upload_bytes=10_000)
    docs = [
        DocumentIn(external_id=f"d{i}", text="x" * n) for i, n in enumerate([10, 10, 10, 10, 500, 500, 2000])
    ]
    encoded = [(d, d.model_dump_json(exclude_defaults=True).encode()) for d in docs]
    batches, too_large = plan_batches(encoded, limits)
    assert batches == [[0, 1, 2], [3, 4], [5]]
    assert [(r.index, r.code) for r in too_large] == [(6, "payload_too_large")]
    for batch in batches:
        assert sum(len(encoded[i][1]) + 1 for i in batch) <= 1000 - 64
