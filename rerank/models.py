"""Rerankers loaded by model folder, on first use, a bounded number at a time: the models of
tenants' own gated rerankers (``catalog.rerankers``), which a node loads only when one of
their tenants searches."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from rerank.batching import BatchingReranker


class RerankerModels:
    """Up to ``capacity`` loaded rerankers by model path, least recently used dropped first.

    ``load`` builds one (the wiring's loader: the same backend, batcher and budget as the
    server's own reranker). A dropped model is closed: a request still scoring on it fails
    and keeps its fused order (``SearchService`` degrades the ``rerank`` stage).
    """

    def __init__(self, load: Callable[[str], BatchingReranker], *, capacity: int = 4) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._load, self.capacity = load, capacity
        self._models: OrderedDict[str, BatchingReranker] = OrderedDict()
        # One load at a time: two tenants' first requests must not load a model twice.
        self._lock = threading.Lock()

    def get(self, model: str) -> BatchingReranker:
        """The loaded reranker of ``model`` (loaded now if it is not).

        Raises:
            ConfigError: the folder is missing or holds no loadable model.
        """
        with self._lock:
            found = self._models.get(model)
            if found is not None:
                self._models.move_to_end(model)
                return found
            loaded = self._load(model)
            self._models[model] = loaded
            while len(self._models) > self.capacity:
                _, dropped = self._models.popitem(last=False)
                dropped.close()
            return loaded

    def loaded(self) -> list[str]:
        """The model paths held now, least recently used first."""
        with self._lock:
            return list(self._models)

    def close(self) -> None:
        with self._lock:
            while self._models:
                _, model = self._models.popitem(last=False)
                model.close()
