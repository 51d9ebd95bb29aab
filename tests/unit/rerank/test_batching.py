from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from core.errors import UnavailableError
from rerank import BatchingReranker, Reranker, RerankTimeout
from rerank.scoring import BatchedCrossEncoder, Pair
from tests.unit.rerank.conftest import TOPICS

PASSAGES = [passage for _, passage in TOPICS]


class FakeScorer:
    """A deterministic pair scorer that records every batch it is sent."""

    max_length = 16

    def __init__(self, delay_s: float = 0.0, fail_on: str | None = None) -> None:
        self.delay_s = delay_s
        self.fail_on = fail_on
        self.batches: list[list[Pair]] = []
        self.lock = threading.Lock()

    def pair_tokens(self, pairs: Sequence[Pair]) -> list[int]:
        return [min(self.max_length, len(q.split()) + len(p.split()) + 3) for q, p in pairs]

    def score_pairs(self, pairs: Sequence[Pair]) -> list[float]:
        with self.lock:
            self.batches.append(list(pairs))
        time.sleep(self.delay_s)
        if self.fail_on is not None and any(q == self.fail_on for q, _ in pairs):
            raise RuntimeError("model failed")
        return [zlib.crc32(f"{q}\x00{p}".encode()) / 2**32 for q, p in pairs]


class RecordingScorer:
    """Wraps the real reranker and records the token cost of every batch it is sent."""

    def __init__(self, inner: BatchedCrossEncoder) -> None:
        self.inner = inner
        self.max_length = inner.max_length
        self.costs: list[tuple[int, int]] = []  # (pairs, longest pair in tokens)

    def pair_tokens(self, pairs: Sequence[Pair]) -> list[int]:
        return self.inner.pair_tokens(pairs)

    def score_pairs(self, pairs: Sequence[Pair]) -> list[float]:
        self.costs.append((len(pairs), max(self.inner.pair_tokens(pairs))))
        return self.inner.score_pairs(pairs)


def _requests(n: int) -> list[tuple[str, list[str]]]:
    # Varied candidate lists (different lengths and orders) so misrouted scores would show.
    return [
        (f"query {i} {TOPICS[i % 8][0]}", [PASSAGES[(i + j) % 8] for j in range(1 + i % 7)]) for i in range(n)
    ]


def _concurrently(batcher: BatchingReranker, requests: list[tuple[str, list[str]]]) -> list[list[float]]:
    barrier = threading.Barrier(len(requests))

    def one(request: tuple[str, list[str]]) -> list[float]:
        barrier.wait()
        return batcher.score(request[0], request[1], timeout_s=60)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(one, requests))


def test_concurrent_results_match_unbatched_and_keep_order() -> None:
    scorer = FakeScorer()
    requests = _requests(12)
    with BatchingReranker(scorer, max_batch_pairs=16, max_batch_tokens=10_000, max_wait_ms=200) as batcher:
        results = _concurrently(batcher, requests)
    for (query, passages), got in zip(requests, results, strict=True):
        assert got == scorer.score_pairs([(query, p) for p in passages])
    sent = scorer.batches[: -len(requests)]
    assert any(len({q for q, _ in batch}) > 1 for batch in sent), "no batch mixed requests"
    assert all(len(batch) <= 16 for batch in sent)


def test_token_cap_per_batch_is_respected() -> None:
    scorer = FakeScorer()
    with BatchingReranker(scorer, max_batch_pairs=100, max_batch_tokens=40, max_wait_ms=50) as batcher:
        _concurrently(batcher, _requests(10))
    for batch in scorer.batches:
        assert len(batch) * max(scorer.pair_tokens(batch)) <= 40


@pytest.mark.integration  # the trained cross-encoder: not in ``make unit``
def test_real_model_batched_equals_unbatched(any_reranker: BatchedCrossEncoder) -> None:
    reranker = any_reranker
    recorder = RecordingScorer(reranker)
    requests = _requests(6)
    with BatchingReranker(recorder, max_batch_pairs=32, max_batch_tokens=256, max_wait_ms=30) as batcher:
        assert isinstance(batcher, Reranker)
        results = _concurrently(batcher, requests)
    for (query, passages), got in zip(requests, results, strict=True):
        assert np.allclose(got, reranker.score(query, passages), atol=1e-4)
    assert recorder.costs and all(n * longest <= 256 for n, longest in recorder.costs)


def test_timeout_raises_and_the_worker_survives() -> None:
    scorer = FakeScorer(delay_s=0.3)
    with BatchingReranker(scorer, max_wait_ms=0) as batcher:
        with pytest.raises(RerankTimeout) as info:
            batcher.score("slow", PASSAGES, timeout_s=0.05)
        assert info.value.code == "rerank_timeout"
        scorer.delay_s = 0.0
        assert len(batcher.score("fast", PASSAGES[:2], timeout_s=5)) == 2


def test_expired_requests_are_not_scored() -> None:
    scorer = FakeScorer(delay_s=0.2)
    with BatchingReranker(scorer, max_batch_pairs=1, max_wait_ms=0) as batcher:
        with pytest.raises(RerankTimeout):
            batcher.score("abandoned", PASSAGES, timeout_s=0.05)
        time.sleep(0.3)
    # The first pair was in flight when the budget passed; the other seven were dropped.
    assert sum(1 for batch in scorer.batches for q, _ in batch if q == "abandoned") <= 2


def test_async_scoring_and_timeout() -> None:
    scorer = FakeScorer()

    async def main(batcher: BatchingReranker) -> list[list[float]]:
        return await asyncio.gather(*(batcher.ascore(q, ps, timeout_s=10) for q, ps in _requests(5)))

    with BatchingReranker(scorer, max_wait_ms=20) as batcher:
        results = asyncio.run(main(batcher))
        for (query, passages), got in zip(_requests(5), results, strict=True):
            assert got == scorer.score_pairs([(query, p) for p in passages])
        scorer.delay_s = 0.3
        with pytest.raises(RerankTimeout):
            asyncio.run(batcher.ascore("slow", PASSAGES, timeout_s=0.05))


def test_scorer_errors_reach_the_caller_only() -> None:
    scorer = FakeScorer(fail_on="boom")
    with BatchingReranker(scorer, max_wait_ms=0) as batcher:
        with pytest.raises(RuntimeError, match="model failed"):
            batcher.score("boom", PASSAGES, timeout_s=5)
        assert len(batcher.score("fine", PASSAGES, timeout_s=5)) == len(PASSAGES)


def test_empty_request_and_closed_batcher() -> None:
    batcher = BatchingReranker(FakeScorer())
    assert batcher.score("q", [], timeout_s=1) == []
    batcher.close()
    with pytest.raises(UnavailableError):
        batcher.score("q", PASSAGES, timeout_s=1)
