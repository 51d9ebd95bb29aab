"""Dynamic batching for rerank requests arriving concurrently.

One background thread owns the model. Requests put their (query, passage) pairs on a queue;
the worker gathers pairs across requests until a batch is full (pairs or padded tokens) or
the oldest waiting pair has waited ``max_wait_ms``, scores the batch in one forward pass and
hands each request its scores. A request whose time budget passes is abandoned by its caller
(``RerankTimeout``) and its remaining pairs are dropped instead of scored.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from core.errors import ConfigError, RaglineError, UnavailableError
from rerank.scoring import Pair, PairScorer

logger = logging.getLogger(__name__)


class RerankTimeout(RaglineError):
    """A rerank request did not finish within its time budget."""

    code = "rerank_timeout"
    http_status = 504


@dataclass(slots=True, eq=False)
class _Request:
    pairs: list[Pair]
    tokens: list[int]
    deadline: float
    submitted: float = field(default_factory=time.monotonic)
    future: Future[list[float]] = field(default_factory=Future)
    scores: list[float] = field(default_factory=list)
    remaining: int = 0

    def expired(self) -> bool:
        return self.future.done() or time.monotonic() > self.deadline


@dataclass(slots=True, frozen=True)
class _Unit:
    request: _Request
    index: int

    @property
    def tokens(self) -> int:
        return self.request.tokens[self.index]


_STOP = object()


class BatchingReranker:
    """Gathers pairs from concurrent requests into token-capped batches for one scorer.

    Usable from many threads (:meth:`score`) and from asyncio (:meth:`ascore`). Results are the
    same as scoring each request alone, in the order the passages were given.
    """

    def __init__(
        self,
        scorer: PairScorer,
        *,
        max_batch_pairs: int = 64,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 3.0,
        default_timeout_s: float = 1.5,
    ) -> None:
        if max_batch_pairs < 1 or max_batch_tokens < 1 or max_wait_ms < 0 or default_timeout_s <= 0:
            raise ConfigError("batching limits must be positive")
        self._scorer = scorer
        self.max_batch_pairs = max_batch_pairs
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_ms / 1000.0
        self.default_timeout_s = default_timeout_s
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._pending: deque[_Unit] = deque()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rerank-batcher", daemon=True)
        self._thread.start()

    @property
    def max_length(self) -> int:
        return self._scorer.max_length

    def score(self, query: str, passages: Sequence[str], *, timeout_s: float | None = None) -> list[float]:
        """Score passages against a query, blocking until done or the budget passes.

        Args:
            query: the search query.
            passages: candidate texts.
            timeout_s: time budget for this request; defaults to ``default_timeout_s``.

        Returns:
            One score per passage, in the order given.

        Raises:
            RerankTimeout: the budget passed before every pair was scored.
            UnavailableError: the batcher is closed.
        """
        budget = self.default_timeout_s if timeout_s is None else timeout_s
        future = self._submit(query, passages, budget)
        try:
            return future.result(timeout=budget)
        except FutureTimeout:
            if future.cancel():  # still pending: abandon it so the worker drops its pairs
                raise RerankTimeout(f"rerank of {len(passages)} passages exceeded {budget:.3f}s") from None
            return future.result()  # it finished in the gap; may raise the scorer's error

    async def ascore(
        self, query: str, passages: Sequence[str], *, timeout_s: float | None = None
    ) -> list[float]:
        """Async form of :meth:`score`; the event loop is never blocked."""
        budget = self.default_timeout_s if timeout_s is None else timeout_s
        future = self._submit(query, passages, budget)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=budget)
        except TimeoutError:
            future.cancel()
            raise RerankTimeout(f"rerank of {len(passages)} passages exceeded {budget:.3f}s") from None

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the worker; requests still waiting fail with ``UnavailableError``."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._queue.put(_STOP)
        self._thread.join(timeout_s)

    def __enter__(self) -> BatchingReranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit(self, query: str, passages: Sequence[str], budget: float) -> Future[list[float]]:
        if self._closed.is_set():
            raise UnavailableError("reranker is closed")
        pairs = [(query, passage) for passage in passages]
        request = _Request(pairs=pairs, tokens=[], deadline=time.monotonic() + budget)
        if not pairs:
            request.future.set_result([])
            return request.future
        # Token counting runs on the caller's thread so the worker only ever runs the model.
        request.tokens = self._scorer.pair_tokens(pairs)
        request.scores = [0.0] * len(pairs)
        request.remaining = len(pairs)
        self._queue.put(request)
        return request.future

    # --- worker thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            if not self._fill():
                break
            batch = self._take_batch()
            if batch:
                self._score(batch)
        self._fail_pending()

    def _enqueue(self, item: object) -> bool:
        if item is _STOP:
            return False
        if isinstance(item, _Request):
            self._pending.extend(_Unit(item, i) for i in range(len(item.pairs)))
        return True

    def _fill(self) -> bool:
        """Gather pairs until a batch is full or the oldest has waited long enough.

        Returns False when the batcher is closing.
        """
        if not self._pending and not self._enqueue(self._queue.get()):
            return False
        # The wait counts from the oldest waiting pair's arrival, so leftovers are not delayed twice.
        flush_at = self._pending[0].request.submitted + self.max_wait_s
        while not self._full():
            wait = flush_at - time.monotonic()
            try:
                item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if not self._enqueue(item):
                return False
        return True

    def _full(self) -> bool:
        live = [u for u in self._pending if not u.request.expired()]
        if len(live) >= self.max_batch_pairs:
            return True
        longest = max((u.tokens for u in live), default=0)
        return len(live) * longest >= self.max_batch_tokens

    def _take_batch(self) -> list[_Unit]:
        """Pop pairs in arrival order while the padded batch stays under both caps."""
        batch: list[_Unit] = []
        longest = 0
        while self._pending and len(batch) < self.max_batch_pairs:
            unit = self._pending[0]
            if unit.request.expired():
                self._pending.popleft()
                continue
            longest_if_added = max(longest, unit.tokens)
            if batch and (len(batch) + 1) * longest_if_added > self.max_batch_tokens:
                break
            batch.append(self._pending.popleft())
            longest = longest_if_added
        return batch

    def _score(self, batch: list[_Unit]) -> None:
        try:
            scores = self._scorer.score_pairs([u.request.pairs[u.index] for u in batch])
        except Exception as exc:  # the worker must survive a failing batch; callers get the error
            logger.exception("rerank batch failed", extra={"pairs": len(batch)})
            for request in {u.request for u in batch}:
                _resolve(request.future, exc=exc)
            return
        for unit, value in zip(batch, scores, strict=True):
            request = unit.request
            request.scores[unit.index] = value
            request.remaining -= 1
            if request.remaining == 0:
                _resolve(request.future, result=request.scores)

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Request):
                self._pending.extend(_Unit(item, i) for i in range(len(item.pairs)))
        for request in {u.request for u in self._pending}:
            _resolve(request.future, exc=UnavailableError("reranker closed before scoring finished"))
        self._pending.clear()


def _resolve(
    future: Future[list[float]], *, result: list[float] | None = None, exc: BaseException | None = None
) -> None:
    # The caller may cancel (on timeout) between our check and the set; that race is harmless.
    if future.done():
        return
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result if result is not None else [])
    except InvalidStateError:
        pass
