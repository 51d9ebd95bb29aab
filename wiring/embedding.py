"""The embedder every process builds from the settings (API, CLI, Ray actors)."""

from __future__ import annotations

from dataclasses import replace

from core.settings import Settings
from index.embedder import EmbeddingSpec
from index.onnx_export import onnx_cache_dir


def embedding_spec(settings: Settings, *, batch_size: int | None = None) -> EmbeddingSpec:
    """How to load the serving embedding model; ``batch_size`` overrides the ingest batch."""
    return EmbeddingSpec(
        model_name=settings.embedding_model,
        device=settings.embedding_device,
        backend=settings.embedding_backend,
        onnx_dir=onnx_cache_dir(settings.data_dir.resolve(), settings.embedding_model),
        threads=settings.embedding_threads,
        batch_size=batch_size or settings.ingest.embed_batch_size,
    )


def query_embedding_spec(settings: Settings) -> EmbeddingSpec:
    """How a serving node loads its query encoder: the serving spec at the query precision."""
    return replace(embedding_spec(settings, batch_size=32), precision=settings.embedding_query_precision)
