"""Admission control and the request deadline: the server protecting itself under load.

Past capacity, queueing every request only makes every answer late (open-loop bursts at
100 req/s once gave a p95 of 15.6 s, all 200s). So the expensive routes (retrieval, the
document push, the console's search and explain) pass an :class:`AdmissionGate`: at most
``max_inflight`` run at once, at most ``max_queued`` wait for a slot, each for at most
``queue_timeout``; the rest are shed at once with 503 ``overloaded`` and ``Retry-After``, so
the requests accepted keep a normal latency. An ``asyncio.Semaphore`` on the event loop is
the whole mechanism: each uvicorn worker admits for itself, like the per-key limits.

Every other request (health, readiness and metrics aside) gets a deadline too:
``deadline_var`` bounds its pool waits (``catalog.db.DeadlinePool``) and, as the last
resort, a request still running at the deadline is answered 503 ``deadline_exceeded`` while
its worker finishes in the background (holding its admission slot until it really ends, so
the gate keeps counting the work the machine is doing). Admin index operations and uploads,
which may legitimately run long, have no deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import RETRY_AFTER_SECONDS
from api.middleware import error_body, send_error
from core import metrics
from core.context import deadline_var, request_id_var

log = logging.getLogger(__name__)

# (method, path) of the routes the gate admits; none has a path parameter, so the path is
# the route template (the shed counter's label).
ADMITTED = frozenset(
    {
        ("POST", "/v1/retrieve"),
        ("POST", "/retrieve"),
        ("POST", "/v1/documents"),
        ("POST", "/v1/admin/retrieve"),
        ("POST", "/v1/admin/explain"),
    }
)
# Never shed nor cut short: probes and scrapes must answer under load (a shed /readyz would
# take a busy replica out of rotation and move its load to the others).
_NO_DEADLINE = frozenset({"/healthz", "/readyz", "/metrics", "/v1/documents:upload"})
_NO_DEADLINE_PREFIXES = ("/v1/admin/index",)  # rebuild, swap, GC, quality: operator work


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    max_inflight: int  # 0: no admission control
    max_queued: int
    queue_timeout_s: float
    request_timeout_s: float


class Shed(Exception):
    """No slot: the queue is full, or the wait for a slot ran out."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AdmissionGate:
    """At most ``max_inflight`` holders; at most ``max_queued`` waiters, each for a bounded time.

    Used from one event loop (no thread locks). FIFO: asyncio.Semaphore wakes waiters in order.
    """

    def __init__(self, max_inflight: int, max_queued: int, queue_timeout_s: float) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        self.max_inflight = max_inflight
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self._slots = asyncio.Semaphore(max_inflight)
        self.inflight = 0
        self.queued = 0

    @asynccontextmanager
    async def slot(self, wait_s: float | None = None) -> AsyncIterator[None]:
        """Hold a slot for the ``with`` body, waiting at most ``wait_s`` (default: the queue timeout)."""
        if self._slots.locked():
            if self.queued >= self.max_queued:
                raise Shed("queue_full")
            timeout = self.queue_timeout_s if wait_s is None else min(wait_s, self.queue_timeout_s)
            self.queued += 1
            try:
                await asyncio.wait_for(self._slots.acquire(), max(0.0, timeout))
            except TimeoutError:
                raise Shed("queue_timeout") from None
            finally:
                self.queued -= 1
        else:
            await self._slots.acquire()
        self.inflight += 1
        try:
            yield
        finally:
            self.inflight -= 1
            self._slots.release()


@dataclass(frozen=True, slots=True)
class _RouteName:
    path: str


class _Reply:
    """The downstream ``send``, which goes quiet once the deadline answered for the request."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.abandoned = False

    async def send(self, message: Message) -> None:
        if self.abandoned:
            return
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)


class AdmissionMiddleware:
    """Sheds the expensive routes past the gate's limits and answers every request by its deadline."""

    def __init__(self, app: ASGIApp, *, limits: AdmissionLimits) -> None:
        self.app = app
        self.limits = limits
        self.gate = (
            AdmissionGate(limits.max_inflight, limits.max_queued, limits.queue_timeout_s)
            if limits.max_inflight > 0
            else None
        )
        self._background: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in _NO_DEADLINE or path.startswith(_NO_DEADLINE_PREFIXES):
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.limits.request_timeout_s
        admitted = (scope["method"], path) in ADMITTED
        reply = _Reply(send)
        task = asyncio.create_task(self._run(scope, receive, reply, deadline, admitted))
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
        if task in done or reply.started:
            await task  # finished (its exception goes to the outer middleware), or streaming
            return
        reply.abandoned = True
        self._background.add(task)
        task.add_done_callback(self._finished)
        route = path if admitted else getattr(scope.get("route"), "path", None) or "unmatched"
        metrics.DEADLINE_EXCEEDED.labels(route).inc()
        log.warning("request over its deadline (%.0f s): %s", self.limits.request_timeout_s, route)
        await _refuse(send, 503, "deadline_exceeded", "the request ran past its deadline, retry shortly")

    async def _run(
        self, scope: Scope, receive: Receive, reply: _Reply, deadline: float, admitted: bool
    ) -> None:
        deadline_var.set(deadline)  # this task's own context: the route's worker thread copies it
        if not admitted or self.gate is None:
            await self.app(scope, receive, reply.send)
            return
        try:
            async with self.gate.slot(deadline - time.monotonic()):
                await self.app(scope, receive, reply.send)
        except Shed as shed:
            metrics.SHED.labels(scope["path"], shed.reason).inc()
            # Never routed: name the route for MetricsMiddleware, which labels by ``route.path``.
            scope.setdefault("route", _RouteName(scope["path"]))
            await _refuse(reply.send, 503, "overloaded", "the server is at capacity, retry shortly")

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("request finished after its deadline with %s", type(task.exception()).__name__)


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    metrics.ERRORS.labels(code).inc()
    body = error_body(code, message, request_id_var.get())
    await send_error(send, status, body, [(b"retry-after", RETRY_AFTER_SECONDS.encode())])
