"""``RerankerModels``: loaded once per folder, at most ``capacity`` held, the oldest closed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rerank.batching import BatchingReranker
from rerank.models import RerankerModels


class Pairs:
    max_length = 32

    def pair_tokens(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        return [len(q) + len(p) for q, p in pairs]

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return [float(len(p)) for _, p in pairs]


def test_loads_each_folder_once_and_closes_the_least_recently_used() -> None:
    loads: list[str] = []

    def load(model: str) -> BatchingReranker:
        loads.append(model)
        return BatchingReranker(Pairs())

    models = RerankerModels(load, capacity=2)
    a = models.get("a")
    assert models.get("a") is a and loads == ["a"]
    models.get("b")
    models.get("a")  # "b" is now the least recently used
    models.get("c")
    assert models.loaded() == ["a", "c"] and loads == ["a", "b", "c"]
    assert a.score("q", ["xy", "xyz"]) == [2.0, 3.0]
    models.close()
    assert models.loaded() == []
    with pytest.raises(Exception):  # noqa: B017  # closed: the batcher refuses
        a.score("q", ["x"])
    with pytest.raises(ValueError):
        RerankerModels(load, capacity=0)
