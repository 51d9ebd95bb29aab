"""The ingestion runner (API servers and ``ragline ingest`` share it)."""

from __future__ import annotations

from core.settings import Settings
from index.embedder import Embedder
from index.shared_embedders import EmbeddingModels
from ingest.isolation import IsolationConfig
from ingest.ocr import OcrOptions
from ingest.pipeline import ChunkingConfig
from jobs.runner import IngestRunner, RunnerConfig
from services.ingest import QueuePolicy
from wiring.embedding import embedding_spec
from wiring.index import LIVE_ALIAS


def chunking_config(settings: Settings) -> ChunkingConfig:
    ing = settings.ingest
    return ChunkingConfig(
        chunk_tokens=ing.chunk_tokens,
        overlap_tokens=ing.chunk_overlap,
        max_chunks=ing.max_chunks_per_document,
        parse_timeout_seconds=ing.parse_timeout_seconds,
        ocr=OcrOptions(
            mode=ing.ocr,
            languages=ing.ocr_languages,
            page_timeout_seconds=ing.ocr_page_timeout_seconds,
            dpi=ing.ocr_dpi,
        ),
    )


def isolation_config(settings: Settings) -> IsolationConfig:
    ing = settings.ingest
    return IsolationConfig(
        enabled=ing.isolate_parsing, workers=ing.parse_workers, memory_mb=ing.parse_memory_mb
    )


def runner_config(settings: Settings, url: str, *, use_ray: bool = True) -> RunnerConfig:
    return RunnerConfig(
        conninfo=url,
        model_name=settings.embedding_model,
        chunking=chunking_config(settings),
        data_dir=settings.data_dir,
        upload_dir=settings.upload_dir,
        inline_max_documents=settings.ingest.inline_max_documents,
        use_ray=use_ray,
        ray_address=settings.ray_address,
        prepare_actors=settings.ingest.prepare_workers,
        embed_actors=settings.ingest.workers,
        embed_batch=settings.ingest.embed_batch_size,
        embedding=embedding_spec(settings),
        lease_seconds=settings.ingest.job_lease_seconds,
        alias=LIVE_ALIAS,
        isolation=isolation_config(settings),
        concurrent_jobs=settings.ingest.concurrent_jobs,
    )


def make_runner(
    settings: Settings,
    url: str,
    *,
    use_ray: bool = True,
    embedder: Embedder | None = None,
    models: EmbeddingModels | None = None,
) -> IngestRunner:
    """A runner for jobs in the catalog at ``url``; ``embedder`` reuses a loaded model.

    Without ``embedder`` the runner loads its model on its first inline job, from ``models``
    when given: an API server passes its app's, so the runner and the search service embed
    with one loaded model (one copy in memory, not two: issue 42), each at its own batch size.
    """
    config = runner_config(settings, url, use_ray=use_ray)
    if embedder is not None:
        given = embedder
        return IngestRunner(config, lambda: given)
    shared = models if models is not None else EmbeddingModels()
    return IngestRunner(config, lambda: shared.get(config.embedding))


def queue_policy(settings: Settings) -> QueuePolicy:
    """How the API queues pushes (coalescing, the per-tenant depth limit)."""
    ing = settings.ingest
    return QueuePolicy(
        coalesce_max_documents=ing.coalesce_max_documents,
        max_queued_documents=ing.max_queued_documents,
        retry_after_s=ing.queue_retry_after_seconds,
    )
