"""Admission control and the request deadline: the server protecting itself under load.

Past capacity, queueing every request only makes every answer late (open-loop bursts at
100 req/s once gave a p95 of 15.6 s, all 200s). So the expensive routes (retrieval, the
document push, the console's search and explain) pass a :class:`FairGate`: at most
``max_inflight`` run at once, at most ``max_queued`` wait for a slot, each for at most
``queue_timeout``; the rest are shed at once with 503 ``overloaded`` and ``Retry-After``, so
the requests accepted keep a normal latency. Each uvicorn worker admits for itself, like the
per-key limits.

The gate is a FastAPI dependency (``api.deps``) behind authentication and the key's own
limits, not a middleware in front of them: a key over its rate or concurrency is answered 429
before it takes a seat, and the gate knows the tenant, whose queue it joins. Tenants are
served in turn (deficit round robin, weights per tenant), so a flood from one tenant uses
idle capacity but cannot shed another tenant's requests.

Every other request (health, readiness and metrics aside) gets a deadline too:
``deadline_var`` bounds its pool waits (``catalog.db.DeadlinePool``) and the gate's queue
wait; as the last resort, a request still running at the deadline is answered 503
``deadline_exceeded`` while its worker finishes in the background (holding its admission
slot until it really ends, so the gate keeps counting the work the machine is doing). Admin
index operations and uploads, which may legitimately run long, have no deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import RETRY_AFTER_SECONDS
from api.middleware import error_body, send_error
from core import metrics
from core.context import deadline_var, request_id_var
from core.limits import AdmissionLimits

log = logging.getLogger(__name__)

# Never shed nor cut short: probes and scrapes must answer under load (a shed /readyz would
# take a busy replica out of rotation and move its load to the others).
_NO_DEADLINE = frozenset({"/healthz", "/readyz", "/metrics", "/v1/documents:upload"})
_NO_DEADLINE_PREFIXES = ("/v1/admin/index",)  # rebuild, swap, GC, quality: operator work


class Shed(Exception):
    """No slot: the queue is full, the wait for a slot ran out, or a lighter tenant took the seat."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FairGate:
    """At most ``max_inflight`` holders; at most ``max_queued`` waiters, queued per tenant.

    A free slot goes to the tenants' queues in deficit round robin (Shreedhar and Varghese,
    "Efficient fair queuing using deficit round robin", SIGCOMM 1995), each request costing
    one unit and each tenant's quantum its weight: backlogged tenants are served in
    proportion to their weights, and one tenant alone may use every slot. When the queue is
    full, a newcomer whose tenant holds fewer seats (per weight) than the heaviest queue takes
    the newest seat of that queue, whose request is shed (``displaced``): a flood can fill the
    idle seats but never keeps another tenant out. Used from one event loop (no thread locks).
    """

    def __init__(
        self,
        max_inflight: int,
        max_queued: int,
        queue_timeout_s: float,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        self.max_inflight = max_inflight
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self._weights = dict(weights or {})
        self.inflight = 0
        self.queued = 0
        self._queues: dict[str, deque[asyncio.Future[None]]] = {}
        self._turns: deque[str] = deque()  # tenants with waiters, in round-robin order
        self._deficit: dict[str, float] = {}

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, 1.0)

    @asynccontextmanager
    async def slot(self, tenant: str, wait_s: float | None = None) -> AsyncIterator[None]:
        """Hold a slot for the ``with`` body, waiting at most ``wait_s`` (default: the queue timeout)."""
        if self.inflight < self.max_inflight and not self.queued:
            self.inflight += 1
        else:
            timeout = self.queue_timeout_s if wait_s is None else min(wait_s, self.queue_timeout_s)
            await self._wait(tenant, max(0.0, timeout))
        try:
            yield
        finally:
            self._release()

    async def _wait(self, tenant: str, timeout: float) -> None:
        if self.queued >= self.max_queued:
            self._displace_for(tenant)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if tenant not in self._queues:
            self._queues[tenant] = deque()
            self._turns.append(tenant)
            self._deficit[tenant] = 0.0
        self._queues[tenant].append(waiter)
        self.queued += 1
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._release()  # granted just as the wait ended: give the slot on
            elif not waiter.done():
                waiter.cancel()
                self._forget(tenant, waiter)
            if isinstance(exc, TimeoutError):
                raise Shed("queue_timeout") from None
            raise

    def _displace_for(self, tenant: str) -> None:
        """Make a seat for ``tenant`` by shedding the newest waiter of the heaviest queue, or shed it."""

        def load(t: str) -> float:
            return len(self._queues.get(t, ())) / self.weight(t)

        heaviest = max(self._queues, key=load, default=None)
        mine = load(tenant) + 1 / self.weight(tenant)
        if heaviest is None or heaviest == tenant or load(heaviest) <= mine:
            raise Shed("queue_full")
        victim = self._queues[heaviest].pop()
        victim.set_exception(Shed("displaced"))
        self._forget(heaviest, None)

    def _forget(self, tenant: str, waiter: asyncio.Future[None] | None) -> None:
        """Take ``waiter`` (already popped when None) off ``tenant``'s queue."""
        queue = self._queues[tenant]
        if waiter is not None:
            queue.remove(waiter)
        self.queued -= 1
        if not queue:
            self._drop(tenant)

    def _drop(self, tenant: str) -> None:
        del self._queues[tenant]
        del self._deficit[tenant]
        self._turns.remove(tenant)

    def _release(self) -> None:
        """A slot is free: hand it to the next waiter in turn, or leave it free."""
        if not self.queued:
            self.inflight -= 1
            return
        waiter = self._next_waiter()
        self.queued -= 1
        waiter.set_result(None)  # the slot passes on: inflight stays the same

    def _next_waiter(self) -> asyncio.Future[None]:
        while True:
            tenant = self._turns[0]
            if self._deficit[tenant] < 1.0:
                self._deficit[tenant] += self.weight(tenant)
                if self._deficit[tenant] < 1.0:  # a weight below 1 saves up over rounds
                    self._turns.rotate(-1)
                    continue
            self._deficit[tenant] -= 1.0
            queue = self._queues[tenant]
            waiter = queue.popleft()
            if not queue:
                self._drop(tenant)
            elif self._deficit[tenant] < 1.0:
                self._turns.rotate(-1)
            return waiter


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
    """Answers every request by its deadline; the gate itself is admitted by ``api.deps``."""

    def __init__(self, app: ASGIApp, *, limits: AdmissionLimits) -> None:
        self.app = app
        self.limits = limits
        self._background: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in _NO_DEADLINE or path.startswith(_NO_DEADLINE_PREFIXES):
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.limits.request_timeout_s
        reply = _Reply(send)
        task = asyncio.create_task(self._run(scope, receive, reply, deadline))
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
        if task in done or reply.started:
            await task  # finished (its exception goes to the outer middleware), or streaming
            return
        reply.abandoned = True
        self._background.add(task)
        task.add_done_callback(self._finished)
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        metrics.DEADLINE_EXCEEDED.labels(route).inc()
        log.warning("request over its deadline (%.0f s): %s", self.limits.request_timeout_s, route)
        await _refuse(send, 503, "deadline_exceeded", "the request ran past its deadline, retry shortly")

    async def _run(self, scope: Scope, receive: Receive, reply: _Reply, deadline: float) -> None:
        deadline_var.set(deadline)  # this task's own context: the gate and the worker thread read it
        await self.app(scope, receive, reply.send)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("request finished after its deadline with %s", type(task.exception()).__name__)


def build_gate(limits: AdmissionLimits) -> FairGate | None:
    """The shared gate ``limits`` describe, or None when admission control is off."""
    if limits.max_inflight < 1:
        return None
    return FairGate(limits.max_inflight, limits.max_queued, limits.queue_timeout_s, limits.tenant_weights)


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    metrics.ERRORS.labels(code).inc()
    body = error_body(code, message, request_id_var.get())
    await send_error(send, status, body, [(b"retry-after", RETRY_AFTER_SECONDS.encode())])
