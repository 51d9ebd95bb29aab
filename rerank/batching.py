"""Dynamic batching for rerank requests arriving concurrently.

A :class:`core.batching.MicroBatcher` owns the model: requests queue their (query, passage)
pairs; the worker gathers pairs across requests until a batch is full (pairs or padded
tokens) or the oldest waiting pair has waited ``max_wait_ms``, scores the batch in one
forward pass and hands each request its scores. A request whose time budget passes is
abandoned by its caller (``RerankTimeout``) and its remaining pairs are dropped instead of
scored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from core.batching import MicroBatcher, aresult_within, result_within
from core.errors import ConfigError, RerankTimeout
from rerank.scoring import Pair, PairScorer

__all__ = ["BatchingReranker", "RerankTimeout"]


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
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        if max_batch_pairs < 1 or max_batch_tokens < 1 or max_wait_ms < 0 or default_timeout_s <= 0:
            raise ConfigError("batching limits must be positive")
        self._scorer = scorer
        self.max_batch_pairs = max_batch_pairs
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_ms / 1000.0
        self.default_timeout_s = default_timeout_s
        self._batcher: MicroBatcher[Pair, float] = MicroBatcher(
            scorer.score_pairs,
            max_items=max_batch_pairs,
            max_cost=max_batch_tokens,
            max_wait_s=self.max_wait_s,
            name="reranker",
            thread_name="rerank-batcher",
            on_batch=on_batch,
        )
        self._batcher.start()

    @property
    def queue_depth(self) -> int:
        return self._batcher.queue_depth

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
        try:
            return result_within(self._submit(query, passages, budget), budget)
        except TimeoutError:
            raise RerankTimeout(f"rerank of {len(passages)} passages exceeded {budget:.3f}s") from None

    async def ascore(
        self, query: str, passages: Sequence[str], *, timeout_s: float | None = None
    ) -> list[float]:
        """Async form of :meth:`score`; the event loop is never blocked."""
        budget = self.default_timeout_s if timeout_s is None else timeout_s
        try:
            return await aresult_within(self._submit(query, passages, budget), budget)
        except TimeoutError:
            raise RerankTimeout(f"rerank of {len(passages)} passages exceeded {budget:.3f}s") from None

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the worker; requests still waiting fail with ``UnavailableError``."""
        self._batcher.close(timeout_s)

    def __enter__(self) -> BatchingReranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit(self, query: str, passages: Sequence[str], budget: float) -> Future[list[float]]:
        pairs = [(query, passage) for passage in passages]
        # Token counting runs on the caller's thread so the worker only ever runs the model.
        costs = self._scorer.pair_tokens(pairs) if pairs and not self._batcher.closed else None
        return self._batcher.submit(pairs, costs=costs, deadline=time.monotonic() + budget)
