"""ASGI middleware: request ids, the request body size limit and a Server-Timing header.

The size limit runs before FastAPI reads the body: a declared Content-Length over the limit
is refused at once, and a chunked body is counted as it streams, so an oversize request is
never held in memory. Upload routes get their own, larger limit. Every response carries
``Server-Timing: app;dur=<ms>``, the time from the request reaching the application to its
response starting, so a client can tell server time from network and queueing time.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable

from opentelemetry import propagate
from opentelemetry.trace import SpanKind, StatusCode
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import metrics, tracing
from core.context import request_id_var

log = logging.getLogger(__name__)


def error_body(code: str, message: str, request_id: str) -> bytes:
    error = {"code": code, "message": message, "request_id": request_id}
    trace_id = tracing.current_trace_id()
    if trace_id is not None:
        error["trace_id"] = trace_id
    return json.dumps({"error": error}).encode()


class _TooLarge(HTTPException):
    """A streamed body went past the limit. An ``HTTPException`` because it is raised inside
    the route's body read, where FastAPI turns any other exception into a 400 ("error
    parsing the body"); this one reaches the 413 handler. Caught here too, for a read that
    happens outside a route."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes")


class TracingMiddleware:
    """A server span per HTTP request, installed only when tracing is on (wiring/tracing.py).

    Continues a W3C ``traceparent`` the caller sent. Outside the request-context middleware, so
    the error bodies that middleware answers carry the trace id too. The span is named by the
    route's template (never the raw path) and carries the method, route and status only.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        method = scope["method"]
        with tracing.current_span(
            method,
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method},
        ) as span:
            status = 0

            async def tracking(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    span.set_attribute("http.response.status_code", status)
                await send(message)

            try:
                await self.app(scope, receive, tracking)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                if status >= 500:
                    span.set_status(StatusCode.ERROR)


class RequestContextMiddleware:
    """Assigns a request id (or keeps a sane incoming X-Request-ID) and enforces body limits."""

    def __init__(self, app: ASGIApp, *, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        incoming = headers.get("x-request-id", "")
        rid = incoming if 0 < len(incoming) <= 64 and incoming.isprintable() else uuid.uuid4().hex
        token = request_id_var.set(rid)
        scope.setdefault("state", {})["request_id"] = rid
        limit = self.limit_for(scope["path"])
        try:
            declared = int(headers.get("content-length", "0") or 0)
        except ValueError:
            declared = 0
        started_response = False

        async def tracking(message: Message) -> None:
            nonlocal started_response
            started_response = started_response or message["type"] == "http.response.start"
            await send(message)

        try:
            if declared > limit:
                await self._refuse(send, rid, limit)
                return
            await self.app(scope, self._counting(receive, limit), self._with_header(tracking, rid, started))
        except _TooLarge:
            if not started_response:
                await self._refuse(send, rid, limit)
        except Exception as exc:
            # Any exception no handler translated: a 500 in the shared body, with the request
            # id, answered here so the connection stays usable (nothing is re-raised).
            log.exception("unhandled error: %s", type(exc).__name__)
            if not started_response:
                body = error_body("internal_error", "internal error", rid)
                await send_error(send, 500, body, [(b"x-request-id", rid.encode())])
        finally:
            request_id_var.reset(token)

    @staticmethod
    def _counting(receive: Receive, limit: int) -> Receive:
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return message

        return wrapped

    @staticmethod
    def _with_header(send: Send, rid: str, started: float) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                dur = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
                headers = message.setdefault("headers", [])
                headers.append((b"x-request-id", rid.encode()))
                headers.append((b"server-timing", dur.encode()))
            await send(message)

        return wrapped

    @classmethod
    async def _refuse(cls, send: Send, rid: str, limit: int) -> None:
        metrics.ERRORS.labels("payload_too_large").inc()
        body = error_body("payload_too_large", f"request body exceeds {limit} bytes", rid)
        await send_error(send, 413, body, [(b"x-request-id", rid.encode())])


async def send_error(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    """Answer with a JSON error body straight from ASGI (middleware that runs outside the routes)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
