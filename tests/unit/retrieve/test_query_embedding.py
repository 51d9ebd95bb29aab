"""QueryEmbedder: cache, batching across threads, deduplication, errors and closing."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from core.errors import UnavailableError
from index.tokens import TokenCounter
from retrieve.query_embedding import QueryEmbedder


class FakeEmbedder:
    model_name = "fake"
    dim = 3
    max_tokens = 64

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.started.set()
        self.gate.wait(5)
        if "boom" in texts:
            raise RuntimeError("model failed")
        return np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    @property
    def token_counter(self) -> TokenCounter:
        raise NotImplementedError


def test_vectors_and_cache_hits() -> None:
    fake = FakeEmbedder()
    qe = QueryEmbedder(fake)
    first = qe.embed("banana")
    assert first.tolist() == [6.0, 3.0, 1.0]
    hit = qe.submit("banana")
    assert hit.done() and hit.result() is first
    assert fake.calls == [["banana"]] and qe.batches_sent == 1
    qe.close()


def test_concurrent_requests_share_one_pass_and_duplicates_are_embedded_once() -> None:
    fake = FakeEmbedder()
    qe = QueryEmbedder(fake)
    fake.gate.clear()
    first = qe.submit("first")
    assert fake.started.wait(5)
    waiting = [qe.submit(t) for t in ("a", "b", "a", "c")]
    fake.gate.set()
    assert first.result(5)[0] == 5.0
    assert [f.result(5)[0] for f in waiting] == [1.0, 1.0, 1.0, 1.0]
    assert fake.calls == [["first"], ["a", "b", "c"]]
    qe.close()


def test_cache_is_bounded_lru() -> None:
    fake = FakeEmbedder()
    qe = QueryEmbedder(fake, cache_size=2)
    for text in ("x", "y", "x", "z"):  # "x" is used again, so "y" is the one evicted
        qe.embed(text)
    calls = len(fake.calls)
    qe.embed("x")
    qe.embed("z")
    assert len(fake.calls) == calls
    qe.embed("y")
    assert fake.calls[calls:] == [["y"]]
    qe.close()


def test_model_errors_reach_the_caller_and_the_worker_survives() -> None:
    qe = QueryEmbedder(FakeEmbedder())
    with pytest.raises(RuntimeError, match="model failed"):
        qe.embed("boom")
    assert qe.embed("fine")[0] == 4.0
    qe.close()


def test_close_embeds_what_waits_then_refuses() -> None:
    fake = FakeEmbedder()
    qe = QueryEmbedder(fake)
    fake.gate.clear()
    first = qe.submit("first")
    assert fake.started.wait(5)
    waiting = qe.submit("second")
    closer = threading.Thread(target=qe.close)
    closer.start()
    fake.gate.set()
    closer.join(5)
    assert first.result(5)[0] == 5.0 and waiting.result(5)[0] == 6.0
    with pytest.raises(UnavailableError):
        qe.embed("third")
