"""EmbeddingModels: one load per model key, each caller at its own batch size (issue 42)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from index.embedder import EmbeddingSpec
from index.shared_embedders import EmbeddingModels
from index.tokens import TokenCounter

SPEC = EmbeddingSpec(
    model_name="m", device="cpu", backend="torch", onnx_dir=Path("/nowhere"), threads=None, batch_size=32
)


class FakeModel:
    def __init__(self, spec: EmbeddingSpec) -> None:
        self.model_name, self.dim, self.max_tokens = spec.model_name, 2, 8
        self.precision = spec.precision
        self.batch_sizes: list[int | None] = []

    def embed(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        self.batch_sizes.append(batch_size)
        return np.ones((len(texts), self.dim), dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    @property
    def token_counter(self) -> TokenCounter:
        raise NotImplementedError


def test_one_load_per_model_key_each_caller_at_its_own_batch_size() -> None:
    loaded: list[FakeModel] = []

    def load(spec: EmbeddingSpec) -> FakeModel:
        loaded.append(FakeModel(spec))
        return loaded[-1]

    models = EmbeddingModels(load)
    queries = models.get(SPEC)
    passages = models.get(dataclasses.replace(SPEC, batch_size=128))
    assert len(loaded) == 1 and queries.model is passages.model is loaded[0]
    queries.embed(["a"])
    passages.embed(["a", "b"])
    assert loaded[0].batch_sizes == [32, 128]
    assert (passages.model_name, passages.dim, passages.count_tokens("a b")) == ("m", 2, 2)


def test_what_decides_the_model_loads_another() -> None:
    models = EmbeddingModels(FakeModel)
    first = models.get(SPEC)
    for change in ({"precision": "int8"}, {"threads": 1}, {"model_name": "other"}, {"device": "cuda"}):
        other = models.get(dataclasses.replace(SPEC, **change))
        assert other.model is not first.model, change
    assert models.get(SPEC).model is first.model
    assert len(models) == 5
