"""The micro-batcher's observer hook and queue depth, as the metrics read them."""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY

from core import metrics
from core.batching import MicroBatcher
from rerank import BatchingReranker
from tests.unit.rerank.test_batching import FakeScorer


def test_on_batch_gets_each_batch_size_and_queue_depth_counts_waiting_items() -> None:
    gate = threading.Event()
    sizes: list[int] = []

    def run(items: list[int]) -> list[int]:
        gate.wait(5)
        return [i * 2 for i in items]

    batcher: MicroBatcher[int, int] = MicroBatcher(run, max_items=4, on_batch=sizes.append)
    batcher.start()
    try:
        first = batcher.submit_one(0)
        while not sizes:  # the worker took the first item and is blocked in run()
            threading.Event().wait(0.01)
        waiting = [batcher.submit_one(i) for i in range(1, 7)]
        assert batcher.queue_depth == 6
        gate.set()
        assert first.result(5) == 0 and [f.result(5) for f in waiting] == [2, 4, 6, 8, 10, 12]
        assert sizes == [1, 4, 2] and batcher.queue_depth == 0
    finally:
        batcher.close()


def test_reranker_batches_land_in_the_batch_size_histogram() -> None:
    def count() -> float:
        return REGISTRY.get_sample_value("ragline_batch_size_count", {"batcher": "rerank"}) or 0.0

    before = count()
    reranker = BatchingReranker(FakeScorer(), on_batch=metrics.BATCH_SIZE.labels("rerank").observe)
    try:
        assert len(reranker.score("q", ["a", "b", "c"])) == 3
        assert reranker.queue_depth == 0
    finally:
        reranker.close()
    assert count() > before
