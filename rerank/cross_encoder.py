"""Cross-encoder reranking: pick a backend and load the model.

Pairs are truncated to the model's maximum length and scored in batches whose padded size
is capped in tokens, so one request with long passages cannot blow up memory or latency.
Two backends share that logic (:class:`rerank.scoring.BatchedCrossEncoder`), one file each:
PyTorch (``rerank.torch_backend.CrossEncoderReranker``) and ONNX Runtime on an export of the
same model (``rerank.onnx_backend.OnnxCrossEncoderReranker``), chosen by name from
:data:`BACKENDS`; ``auto`` is resolved as for the embedder (:mod:`core.backends`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from core.backends import Backend, BackendChoice, pick_backend
from core.backends import resolve_backend as _resolve_backend
from core.errors import ConfigError
from rerank.onnx_backend import OnnxCrossEncoderReranker
from rerank.scoring import BatchedCrossEncoder
from rerank.torch_backend import CrossEncoderReranker

logger = logging.getLogger(__name__)

BACKENDS: dict[str, type[BatchedCrossEncoder]] = {
    "torch": CrossEncoderReranker,
    "onnx": OnnxCrossEncoderReranker,
}


def _looks_like_path(name_or_path: str) -> bool:
    # Hub ids are "name" or "org/name"; anything else with a separator is meant as a folder.
    return (
        name_or_path.startswith((".", "~", os.sep))
        or name_or_path.count("/") > 1
        or (os.altsep is not None and os.altsep in name_or_path)
    )


def resolve_backend(backend: str, *, device: str, data_dir: Path | None) -> Backend:
    """The backend ``load_reranker`` will use; ``auto`` is ONNX on CPU when it can be exported.

    ``auto`` picks ONNX when the device resolves to CPU, a ``data_dir`` for the export cache
    is given and both ``onnxruntime`` and ``onnx`` import; PyTorch otherwise.
    """
    return _resolve_backend(backend, device=device, cache_dir=data_dir, kind="reranker")


def load_reranker(
    name_or_path: str,
    *,
    device: str = "auto",
    max_length: int | None = None,
    max_batch_tokens: int = 8192,
    max_batch_pairs: int = 128,
    backend: BackendChoice = "torch",
    data_dir: Path | None = None,
    threads: int | None = None,
) -> BatchedCrossEncoder:
    """Load a sentence-transformers CrossEncoder by local path or hub name, on the chosen backend.

    Args:
        name_or_path: a CrossEncoder folder (e.g. written by ``train_reranker``) or a hub id.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``;
            the ONNX backend runs on CPU only.
        max_length: cap on tokens per pair; defaults to the model's own maximum.
        max_batch_tokens: cap on padded tokens per forward pass.
        max_batch_pairs: cap on pairs per forward pass.
        backend: ``torch``, ``onnx`` (onnxruntime, the ``.[onnx]`` extra) or ``auto``
            (see :func:`resolve_backend`); an ``auto`` ONNX export that fails falls back
            to PyTorch with a warning.
        data_dir: the ONNX export is cached in ``<data_dir>/models/<name>-rerank-onnx``.
        threads: the ONNX session's intra-op threads (default 1). PyTorch's thread count
            is process-wide and shared with the embedder, so it is left alone.

    Returns:
        The reranker, ready to score.

    Raises:
        ConfigError: the folder does not exist, the model cannot be loaded or exported from
            it, or ``backend="onnx"`` without ``data_dir`` or onnxruntime.
    """
    path = Path(name_or_path).expanduser()
    if not path.exists() and _looks_like_path(name_or_path):
        raise ConfigError(f"reranker model folder not found: {name_or_path}")
    source = str(path) if path.exists() else name_or_path
    chosen: str = resolve_backend(backend, device=device, data_dir=data_dir)

    def load(name: str) -> BatchedCrossEncoder:
        return pick_backend(BACKENDS, name, kind="reranker").load(
            source,
            device=device,
            max_length=max_length,
            max_batch_tokens=max_batch_tokens,
            max_batch_pairs=max_batch_pairs,
            data_dir=data_dir,
            threads=threads,
        )

    try:
        reranker = load(chosen)
    except Exception:  # an export can fail in many ways; "auto" means "PyTorch will do"
        if chosen != "onnx" or backend == "onnx":
            raise
        logger.warning("ONNX reranker backend unavailable; using PyTorch", exc_info=True)
        chosen = "torch"
        reranker = load(chosen)
    logger.info(
        "loaded reranker",
        extra={
            "model": name_or_path,
            "backend": chosen,
            "device": reranker.device,
            "max_length": reranker.max_length,
        },
    )
    return reranker
