"""One loaded embedding model per process, shared by every caller whose spec matches.

An API process embeds queries (the search service, at start-up) and small pushes (the ingest
runner's inline path, on its first job) with the same model. Each used to load its own copy,
which doubled the model's memory in every API process and its load time at start-up
(issue 42). ``EmbeddingModels`` loads a model once per ``EmbeddingSpec.model_key`` (name,
device, resolved backend, ONNX folder, threads, precision) and hands each caller a
``SharedEmbedder``: a view with the caller's own batch size over that one model. A query
encoder at ``int8`` and the passage encoder at ``fp32`` differ in their key, so they stay two
models, as they must.

Sharing serialises what the model itself serialises: on PyTorch a query waits for an ingest
slice's forward pass (the model's lock); on ONNX only tokenisation is locked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from index.embedder import (
    EmbeddingSpec,
    ModelKey,
    OnnxEmbedder,
    Precision,
    SentenceTransformerEmbedder,
)
from index.tokens import TokenCounter


class BatchedEmbedder(Protocol):
    """A loaded model: the ``Embedder`` seam with a per-call batch size."""

    model_name: str
    dim: int
    max_tokens: int

    def embed(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...

    @property
    def token_counter(self) -> TokenCounter: ...


class SharedEmbedder:
    """One caller's ``Embedder`` over a shared model: the model, at this caller's batch size."""

    def __init__(self, model: BatchedEmbedder, *, batch_size: int, precision: Precision) -> None:
        self.model = model
        self.model_name, self.dim, self.max_tokens = model.model_name, model.dim, model.max_tokens
        self.batch_size = batch_size
        self.precision = precision

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.embed(texts, batch_size=self.batch_size)

    def count_tokens(self, text: str) -> int:
        return self.model.count_tokens(text)

    @property
    def token_counter(self) -> TokenCounter:
        return self.model.token_counter


def load_model(spec: EmbeddingSpec) -> BatchedEmbedder:
    """``spec.load()``, as the loaded class it is (both of ``EMBEDDERS`` take a batch size)."""
    model = spec.load()
    if not isinstance(model, SentenceTransformerEmbedder | OnnxEmbedder):
        raise TypeError(f"EmbeddingSpec.load built a {type(model).__name__}, not one of EMBEDDERS")
    return model


class EmbeddingModels:
    """The embedding models one process (one app) has loaded, one per model key.

    Thread-safe: the search service asks at start-up, the ingest runner from a worker thread
    on its first job. A load holds the lock, so two callers asking for the same model at once
    wait for one load rather than making two.
    """

    def __init__(self, load: Callable[[EmbeddingSpec], BatchedEmbedder] = load_model) -> None:
        self._load = load
        self._models: dict[ModelKey, BatchedEmbedder] = {}
        self._lock = threading.Lock()

    def get(self, spec: EmbeddingSpec) -> SharedEmbedder:
        """``spec``'s model, loaded on the first request for its key, at ``spec.batch_size``."""
        key = spec.model_key()
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = self._load(spec)
        return SharedEmbedder(model, batch_size=spec.batch_size, precision=spec.precision)

    def __len__(self) -> int:
        """How many models are loaded."""
        return len(self._models)
