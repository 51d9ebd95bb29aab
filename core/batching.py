"""A micro-batcher: one worker thread runs a batch function over items of concurrent requests.

Shared by the query embedder (``retrieve.query_embedding``) and the reranker
(``rerank.batching``). A request is one or more items; each waits in one queue in arrival
order. The worker sends a batch when it is full (``max_items``, or a padded cost
``len(batch) * max(cost)`` reaching ``max_cost``) or when the oldest waiting item has
waited ``max_wait_s``. With ``max_wait_s=0`` (continuous batching) a lone request goes at
once, and requests that arrive while a batch runs go together in the next one: the only
cost over a direct call is one hand-over to the worker thread, with no sleep.

A request whose future is done (cancelled by a caller that gave up, or failed by an earlier
batch) or whose deadline has passed is dropped from the queue instead of being run; a
passed deadline fails its future with ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from core import tracing
from core.errors import ConfigError, UnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(slots=True, eq=False)
class _Request(Generic[T]):
    items: Sequence[T]
    costs: Sequence[int] | None
    deadline: float | None
    single: bool
    results: list[Any]
    remaining: int
    submitted: float = field(default_factory=time.monotonic)
    future: Future[Any] = field(default_factory=Future)
    # The submitting request's trace context (None when untraced): the batch's span joins it.
    trace: Any = field(default_factory=tracing.waiting_context)

    def expired(self, now: float) -> bool:
        return self.future.done() or (self.deadline is not None and now > self.deadline)


@dataclass(slots=True, eq=False)
class _Unit(Generic[T]):
    request: _Request[T]
    index: int

    @property
    def cost(self) -> int:
        costs = self.request.costs
        return 0 if costs is None else costs[self.index]


class MicroBatcher(Generic[T, R]):
    """Gathers items of concurrent requests into batches for one batch function.

    Args:
        run_batch: maps a batch of items to one result per item, in order. It runs on the
            worker thread only, one batch at a time; an exception fails every request with
            an item in that batch, and the worker carries on.
        max_items: cap on items per batch.
        max_cost: cap on ``len(batch) * max(item cost)`` (padded tokens), or None. An item
            over the cap on its own still gets a batch of one.
        max_wait_s: how long the oldest waiting item may wait for a fuller batch.
        name: what is batched, for messages (``"reranker"`` -> ``"reranker is closed"``).
        thread_name: the worker thread's name.
        drain_on_close: whether :meth:`close` runs what is still waiting (True) or fails it
            with ``UnavailableError`` (False).
        on_batch: called on the worker thread with each sent batch's size (a metrics hook).
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], Sequence[R]],
        *,
        max_items: int,
        max_cost: int | None = None,
        max_wait_s: float = 0.0,
        name: str = "batcher",
        thread_name: str = "micro-batcher",
        drain_on_close: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        if max_items < 1 or (max_cost is not None and max_cost < 1) or max_wait_s < 0:
            raise ConfigError("batching limits must be positive")
        self._run_batch = run_batch
        self.max_items = max_items
        self.max_cost = max_cost
        self.max_wait_s = max_wait_s
        self.name = name
        self._drain_on_close = drain_on_close
        self._pending: deque[_Unit[T]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=thread_name, daemon=True)
        self.batches_run = 0  # batches whose function returned
        self._on_batch = on_batch

    def start(self) -> None:
        """Start the worker thread (once)."""
        if not self._thread.is_alive() and not self._closed:
            self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop taking requests, finish the running batch, then drain or fail what waits."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        else:
            self._fail_pending()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def queue_depth(self) -> int:
        """Items waiting for a batch (read without the lock: a gauge, not a decision)."""
        return len(self._pending)

    def submit(
        self, items: Sequence[T], *, costs: Sequence[int] | None = None, deadline: float | None = None
    ) -> Future[list[R]]:
        """Queue the items of one request; the future gets one result per item, in order.

        Args:
            items: what to run; an empty request is done at once.
            costs: one cost per item (tokens) when the batcher has ``max_cost``.
            deadline: ``time.monotonic()`` after which items not yet sent are dropped.

        Raises:
            UnavailableError: the batcher is closed.
        """
        if costs is not None and len(costs) != len(items):
            raise ValueError("one cost per item")
        return cast("Future[list[R]]", self._enqueue(items, costs, deadline, single=False))

    def submit_one(self, item: T, *, cost: int | None = None, deadline: float | None = None) -> Future[R]:
        """Queue a single item; the future gets its result. See :meth:`submit`."""
        costs = None if cost is None else (cost,)
        return cast("Future[R]", self._enqueue((item,), costs, deadline, single=True))

    def _enqueue(
        self, items: Sequence[T], costs: Sequence[int] | None, deadline: float | None, *, single: bool
    ) -> Future[Any]:
        if self._closed:
            raise UnavailableError(f"{self.name} is closed")
        request = _Request(items, costs, deadline, single, [None] * len(items), len(items))
        if not items:
            request.future.set_result([])
            return request.future
        with self._cond:
            if self._closed:
                raise UnavailableError(f"{self.name} is closed")
            if single:
                self._pending.append(_Unit(request, 0))
            else:
                self._pending.extend([_Unit(request, i) for i in range(len(items))])
            self._cond.notify()
        return request.future

    # --- worker thread -------------------------------------------------------------------

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            if batch:
                self._execute(batch)
        self._fail_pending()

    def _next_batch(self) -> list[_Unit[T]] | None:
        """Wait for a full batch or the oldest item's flush time; None when closing."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed and not (self._drain_on_close and self._pending):
                return None
            # The wait counts from the oldest waiting item's arrival, so leftovers are not delayed twice.
            flush_at = self._pending[0].request.submitted + self.max_wait_s
            while not self._closed and not self._full():
                left = flush_at - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._take()

    def _full(self) -> bool:
        if self.max_cost is None and len(self._pending) < self.max_items:
            return False  # nothing to count: cancelled items only make it emptier
        now = time.monotonic()
        live = [u for u in self._pending if not u.request.expired(now)]
        if len(live) >= self.max_items:
            return True
        if self.max_cost is None:
            return False
        return len(live) * max((u.cost for u in live), default=0) >= self.max_cost

    def _take(self) -> list[_Unit[T]]:
        """Pop live items in arrival order while the padded batch stays under both caps."""
        batch: list[_Unit[T]] = []
        longest = 0
        now = time.monotonic()
        while self._pending and len(batch) < self.max_items:
            unit = self._pending[0]
            if unit.request.expired(now):
                self._pending.popleft()
                # Answer a waiter that set a deadline but no timeout of its own.
                _resolve(unit.request.future, exc=TimeoutError(f"{self.name} deadline passed"))
                continue
            longest_if_added = max(longest, unit.cost)
            if self.max_cost is not None and batch and (len(batch) + 1) * longest_if_added > self.max_cost:
                break
            batch.append(self._pending.popleft())
            longest = longest_if_added
        return batch

    def _execute(self, batch: list[_Unit[T]]) -> None:
        if self._on_batch is not None:
            self._on_batch(len(batch))
        requests = list(dict.fromkeys(u.request for u in batch))
        started_ns = time.time_ns()
        try:
            results = self._run_batch([u.request.items[u.index] for u in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{self.name} returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # the worker must survive a failing batch; callers get the error
            log.exception("%s batch failed", self.name, extra={"items": len(batch)})
            self._trace(requests, started_ns, len(batch), failed=True)
            for request in requests:
                _resolve(request.future, exc=exc)
            return
        self._trace(requests, started_ns, len(batch), failed=False)
        self.batches_run += 1
        for unit, value in zip(batch, results, strict=True):
            request = unit.request
            request.results[unit.index] = value
            request.remaining -= 1
            if request.remaining == 0:
                _resolve(request.future, result=request.results[0] if request.single else request.results)

    def _trace(self, requests: list[_Request[T]], started_ns: int, items: int, *, failed: bool) -> None:
        parents = [r.trace for r in requests if r.trace is not None]
        if parents:
            tracing.batch_spans(
                f"{self.name.replace(' ', '_')}.batch",
                parents,
                started_ns,
                time.time_ns(),
                **{
                    "ragline.batch.items": items,
                    "ragline.batch.requests": len(requests),
                    "ragline.batch.failed": failed,
                },
            )

    def _fail_pending(self) -> None:
        with self._cond:
            requests = {u.request for u in self._pending}
            self._pending.clear()
        for request in requests:
            _resolve(request.future, exc=UnavailableError(f"{self.name} closed before finishing"))


def _resolve(future: Future[Any], *, result: Any = None, exc: BaseException | None = None) -> None:
    # The caller may cancel (on timeout) between our check and the set; that race is harmless.
    if future.done():
        return
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass


def result_within(future: Future[R], timeout_s: float) -> R:
    """The future's result, waiting at most ``timeout_s``.

    On timeout the future is cancelled, so the worker drops its items not yet sent, and
    ``TimeoutError`` is raised; a result that lands in that gap is returned instead.
    """
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError:
        if future.cancel():
            raise
        return future.result()  # it finished in the gap; may raise the batch's error


async def aresult_within(future: Future[R], timeout_s: float) -> R:
    """Async form of :func:`result_within`; the event loop is never blocked."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout=timeout_s)
    except TimeoutError:
        future.cancel()
        raise
