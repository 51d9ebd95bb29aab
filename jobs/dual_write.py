"""Dual write: the vectors an ingestion commit needs for models other than its own.

While a model migration is active (or the alias serves, or may roll back to, a version of
another model), every new chunk needs a vector for each of those models too, committed in
the same document transaction, so the migration's target never misses what was written
during its backfill. The models are read from the catalog once per commit batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import psycopg

from catalog import reembed as reembed_repo
from core.records import Committable, Embedded
from index.embedder import Embedder


class DualWriter:
    """Embeds a batch's leaf chunks with every extra model the catalog asks for."""

    def __init__(self, *, alias: str, base_model: str, load: Callable[[str], Embedder]) -> None:
        self.alias, self.base_model = alias, base_model
        self._load = load
        self._embedders: dict[str, Embedder] = {}
        self._lock = threading.Lock()

    def models(self, conn: psycopg.Connection) -> list[str]:
        found = reembed_repo.write_models(conn, alias=self.alias)
        conn.commit()
        return [m for m in found if m != self.base_model]

    def _embedder(self, model: str) -> Embedder:
        with self._lock:
            if model not in self._embedders:
                self._embedders[model] = self._load(model)
            return self._embedders[model]

    def vectors(
        self, conn: psycopg.Connection, results: Sequence[Committable]
    ) -> list[dict[str, np.ndarray]]:
        """Per result (aligned), the extra models' vectors of its leaf chunks."""
        out: list[dict[str, np.ndarray]] = [{} for _ in results]
        embedded = [(i, r) for i, r in enumerate(results) if isinstance(r, Embedded)]
        if not embedded:
            return out
        for model in self.models(conn):
            texts = [c.embedding_text for _, r in embedded for c in r.prepared.chunks if c.level == 0]
            vecs = self._embedder(model).embed(texts)
            start = 0
            for i, r in embedded:
                n = len(r.vectors)
                out[i][model] = vecs[start : start + n]
                start += n
        return out
